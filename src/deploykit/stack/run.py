"""Running a stack end to end: validate, load, best cases, each model alone, all together, the result."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploykit.stack.record import StackResult
from deploykit.stack.spec import StackSpec, stack_from_dict

REPORT_FILES = ("stack.json", "junit.xml", "summary.md", "report.html")


def run_stack(
    source: str | Path | Mapping[str, Any],
    *,
    workdir: str | Path = ".deploykit",
    duration_s: float | None = None,
    alone_s: float | None = None,
    report_dir: str | Path | None = None,
    reporter: Any = None,
) -> StackResult:
    """Run a stack; return its result (``result.passed``, ``result.exit_code``, HTML in notebooks).

    Args:
        source: a stack.yaml path, or the same as a mapping (relative model paths from the working folder).
        workdir: the artifact store the models' configs build into (and reuse from).
        duration_s: overrides the file's ``duration_s`` (all models together).
        alone_s: overrides ``alone_s`` (each model alone first; 0 skips).
        report_dir: where to write stack.json, junit.xml, summary.md and report.html.
        reporter: progress events of the models' builds.
    """
    from deploykit import tracing
    from deploykit.safety.limits import time_limit
    from deploykit.stack.models import load_all
    from deploykit.stack.record import build_result
    from deploykit.stack.runner import best_cases, run_phase
    from deploykit.stack.soak import make_watch

    spec = _spec(source, duration_s, alone_s)
    loaded = load_all(spec, Path(workdir), reporter)
    runs = {n: tracing.wrap(m.session.timed_runner(m.feeds), f"infer {n}") for n, m in loaded.items()}
    watch = make_watch(spec.soak, {n: m.session for n, m in loaded.items()})
    total = spec.duration_s + spec.alone_s * len(spec.models)
    with time_limit(total * 2 + 60, f"stack {spec.name}", hint="a model stopped responding; see its entry"):
        best = best_cases(spec, runs)
        alone = {}
        if spec.alone_s > 0:
            for name in spec.models:
                with tracing.span(f"stack {name} alone"):
                    alone.update(run_phase(spec, {name: runs[name]}, spec.alone_s))
        with tracing.span(f"stack {spec.name} together"):
            together = run_phase(spec, runs, spec.duration_s, watch)
        for name, m in loaded.items():  # NaN/Inf: one untimed inference each, after the timed phase
            with tracing.span(f"stack {name} output check"):
                watch.outputs[name].after(lambda m=m: m.session.infer(m.feeds), together[name])
    result = build_result(
        spec,
        together,
        alone,
        best,
        {n: m.source for n, m in loaded.items()},
        _environment(),
        watch,
        _trace_warning(),
    )
    if report_dir is not None:
        write_reports(result, Path(report_dir))
    return result


def _spec(source: str | Path | Mapping[str, Any], duration_s: float | None, alone_s: float | None) -> StackSpec:
    from deploykit.config.load import load_yaml, read_text
    from deploykit.errors import ConfigError

    if isinstance(source, Mapping):
        raw, base, where = dict(source), Path.cwd(), "stack"
    else:
        path = Path(source)
        raw, base, where = load_yaml(read_text(path), str(path)), path.parent.resolve(), str(path)
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping with 'models' at the top level")
    for key, value in (("duration_s", duration_s), ("alone_s", alone_s)):
        if value is not None:
            raw[key] = value
    return stack_from_dict(raw, base, where)


def _trace_warning() -> list[str]:
    from deploykit import tracing

    tracer = tracing.active()
    if tracer is None or tracer.path is None:
        return []
    return [
        f"--trace keeps every frame's event in memory until {tracer.path.name} is written: the resident "
        "memory growth includes it (trace a soak with DEPLOYKIT_TRACE=nvtx, which keeps nothing)"
    ]


def _environment() -> dict[str, Any]:
    from deploykit.store import clock
    from deploykit.store.environment import device_fingerprint, tool_versions

    return {
        "cpus": os.cpu_count() or 0,
        "device": device_fingerprint(),
        "tools": tool_versions(),
        "created": clock.stamp(),
    }


def write_reports(result: StackResult, folder: Path) -> list[Path]:
    """stack.json, junit.xml, summary.md and report.html in ``folder``."""
    from deploykit.errors import os_error
    from deploykit.stack import views

    texts = (views.to_json(result), views.junit(result), views.markdown(result), views.html_page(result))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in zip(REPORT_FILES, texts, strict=True):
            (folder / name).write_text(text, encoding="utf-8")
    except OSError as e:
        raise os_error(e, folder, "write the stack reports") from e
    return [folder / n for n in REPORT_FILES]


__all__ = ["REPORT_FILES", "run_stack", "write_reports"]
