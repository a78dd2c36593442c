"""The ``deploykit`` command: parse -> call the API -> render -> exit code. Thin on purpose."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from deploykit.choices import Flavour, LogFormat, Method, Precision, Provider, listed, values
from deploykit.errors import DeployKitError, InternalError, UsageError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Take a PyTorch model or an ONNX file to a verified, benchmarked engine.")
config_app = typer.Typer(no_args_is_help=True, help="Inspect configuration.")
artifacts_app = typer.Typer(no_args_is_help=True, help="List, inspect, verify and garbage-collect stored artifacts.")
app.add_typer(config_app, name="config")
app.add_typer(artifacts_app, name="artifacts")

Workdir = Annotated[Path, typer.Option("--workdir", "-w", help="Artifact store; reruns reuse what it holds.")]
Sets = Annotated[Optional[list[str]], typer.Option("--set", help="Override a config field: --set gate.iterations=50")]
Rerun = Annotated[Optional[list[str]], typer.Option("--rerun", help="Run this stage even if its artifact exists.")]
Backend = Annotated[Optional[str], typer.Option("--backend", help="Build backend (overrides build.backend).")]
ProviderOpt = Annotated[Optional[str], typer.Option("--provider", help=f"onnxruntime execution provider: {listed(Provider)}")]
Dims = Annotated[Optional[list[str]], typer.Option("--dim", help="Dynamic dim of an ONNX input: --dim batch=1,4,8")]
ReportDir = Annotated[Optional[Path], typer.Option("--report-dir", help="Copy parity/gate reports (JSON, JUnit, Markdown) here.")]
LogFormatOpt = Annotated[str, typer.Option("--log-format", help=listed(LogFormat))]


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _reporter(log_format: str) -> Any:
    from deploykit.progress import JsonReporter, RichReporter

    if log_format not in values(LogFormat):
        raise UsageError(f"--log-format {log_format!r}: use {listed(LogFormat)}")
    return JsonReporter() if log_format == "json" else RichReporter(_console())


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``key.path=value`` pairs; values are YAML, so numbers, lists and booleans work."""
    from deploykit.config_load import parse_override

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected key.path=value")
        out[key.strip()] = parse_override(key.strip(), value)
    return out


def parse_dims(items: list[str] | None) -> dict[str, tuple[int, int, int]]:
    """``name=MIN,OPT,MAX`` or ``name=N``; each a positive integer of at most 32 bits."""
    from deploykit.config_load import MAX_DIM

    out = {}
    for item in items or []:
        name, _, values = item.partition("=")
        try:
            nums = tuple(int(v) for v in values.split(",")) if len(values) <= 64 else ()
        except ValueError:
            nums = ()
        if len(nums) == 1:
            nums = nums * 3
        if not name or len(nums) != 3:
            raise UsageError(f"--dim {item!r}: expected name=MIN,OPT,MAX or name=N (integers)")
        if not all(1 <= n <= MAX_DIM for n in nums) or not nums[0] <= nums[1] <= nums[2]:
            raise UsageError(f"--dim {item!r}: needs 1 <= MIN <= OPT <= MAX <= {MAX_DIM}")
        out[name] = nums  # type: ignore[assignment]
    return out


def _run(source: Path, until: str | None, workdir: Path, sets: list[str] | None, rerun: list[str] | None,
         backend: str | None, dims: list[str] | None, report_dir: Path | None, log_format: str,
         extra: dict[str, Any] | None = None) -> Any:
    from deploykit import api

    overrides = parse_sets(sets) | (extra or {})
    if backend:
        overrides["build.backend"] = backend
    try:
        result = api.convert(source, workdir=workdir, until=until, rerun=tuple(rerun or ()), report_dir=report_dir,
                             reporter=_reporter(log_format), dims=parse_dims(dims), overrides=overrides)
    except DeployKitError as e:
        if getattr(e, "result", None) is not None:
            _print_table(e.result)  # type: ignore[attr-defined]
        raise
    _print_table(result)
    return result


def _print_table(result: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"deploykit: {result.name}", title_justify="left")
    for col in ("stage", "status", "time", "artifact", "note"):
        table.add_column(col, overflow="fold")
    colour = {"ran": "green", "reused": "cyan", "failed": "red"}
    for stage, status, seconds, digest, note in result.rows():
        table.add_row(stage, f"[{colour.get(status, 'white')}]{status}[/]", seconds, digest, escape(note))
    console = Console()
    console.print(table)
    gate = result.gate
    if gate:
        lat = gate["latency"]
        console.print(f"gate: {gate['fps']:.1f} FPS at batch {gate['batch']} (p50 {lat['p50_ms']:.2f} ms, "
                      f"p99 {lat['p99_ms']:.2f} ms) on {gate['platform']}", highlight=False)


BaselineOpt = Annotated[Optional[Path], typer.Option(
    "--baseline", help="A previous gate.json: fail when a metric regresses beyond the threshold plus the measured spread.")]


def _gate_flags(allow_missing_target: bool, baseline: Path | None) -> dict[str, Any]:
    out: dict[str, Any] = {"gate.allow_missing_target": True} if allow_missing_target else {}
    if baseline is not None:
        out["gate.baseline"] = str(baseline.resolve())  # relative to where the command runs, not the config
    return out


@app.command()
def convert(config: Annotated[Path, typer.Argument(help="deploykit.yaml (or an .onnx file)")],
            workdir: Workdir = Path(".deploykit"), set_: Sets = None, rerun: Rerun = None, backend: Backend = None,
            dim: Dims = None, report_dir: ReportDir = None, provider: ProviderOpt = None,
            precision: Annotated[Optional[str], typer.Option(help=f"{listed(Precision)} (sets quantize.precision)")] = None,
            allow_missing_target: Annotated[bool, typer.Option(help="Measure without failing when no target matches.")] = False,
            auto_repair: Annotated[bool, typer.Option("--auto-repair", help="Quantized: keep the nodes that add the most error out of quantization until the check passes (quantize.repair.enabled).")] = False,
            baseline: BaselineOpt = None, log_format: LogFormatOpt = "human") -> None:
    """Run every stage: export -> surgery -> quantize -> build -> parity -> gate."""
    extra: dict[str, Any] = _gate_flags(allow_missing_target, baseline)
    if precision:
        extra["quantize.precision"] = precision
    if auto_repair:
        extra["quantize.repair.enabled"] = True
    if provider:
        extra["build.provider"] = provider
    _run(config, None, workdir, set_, rerun, backend, dim, report_dir, log_format, extra)


def _copy_out(result: Any, role: str, out: Path | None) -> None:
    if out is None:
        return
    import shutil

    artifact = result.artifacts[role]
    if artifact.kind == "onnx":
        from deploykit.graph.files import copy_model_files
        from deploykit.stages.export import MODEL

        out.parent.mkdir(parents=True, exist_ok=True)
        copy_model_files(artifact.file(MODEL), out)  # with its .data file, when it has one
    else:
        shutil.copytree(artifact.path, out, dirs_exist_ok=True)
    typer.echo(f"wrote {out}")


Out = Annotated[Optional[Path], typer.Option("--output", "-o", help="Copy the stage's output here.")]


@app.command()
def export(config: Annotated[Path, typer.Argument(help="deploykit.yaml")], output: Out = None,
           workdir: Workdir = Path(".deploykit"), set_: Sets = None, log_format: LogFormatOpt = "human") -> None:
    """Export the torch model to ONNX (checked against torch)."""
    _copy_out(_run(config, "export", workdir, set_, None, None, None, None, log_format),
              "model", output)


@app.command()
def surgery(model: Annotated[Optional[Path], typer.Argument(help="deploykit.yaml or model.onnx")] = None, output: Out = None,
            pass_: Annotated[Optional[list[str]], typer.Option("--pass", help="A pass: name or name={json params}")] = None,
            workdir: Workdir = Path(".deploykit"), set_: Sets = None, dim: Dims = None, log_format: LogFormatOpt = "human",
            list_: Annotated[bool, typer.Option("--list", help="List every pass with its parameters and exit.")] = False) -> None:
    """Run graph surgery passes (default: the config's, else sanitize)."""
    if list_:
        from deploykit.surgery.registry import format_passes

        typer.echo(format_passes())
        return
    if model is None:
        raise UsageError("surgery: give a deploykit.yaml or model.onnx (or --list)")
    extra = {"surgery.passes": [_pass_spec(p) for p in pass_]} if pass_ else {}
    _copy_out(_run(model, "surgery", workdir, set_, None, None, dim, None, log_format, extra), "model", output)


def _pass_spec(text: str) -> Any:
    name, sep, params = text.partition("=")
    if not sep:
        return name
    try:
        return {name: json.loads(params)}
    except json.JSONDecodeError as e:
        raise UsageError(f"--pass {text!r}: parameters must be JSON ({e.msg})") from e


@app.command()
def build(model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")], output: Out = None,
          backend: Backend = None, provider: ProviderOpt = None, workdir: Workdir = Path(".deploykit"), set_: Sets = None,
          dim: Dims = None, plugins: Annotated[Optional[list[str]], typer.Option("--plugins", help="TensorRT plugin library (repeatable).")] = None,
          log_format: LogFormatOpt = "human") -> None:
    """Build an engine for a backend."""
    extra: dict[str, Any] = {"build.provider": provider} if provider else {}
    if plugins:
        extra["build.plugins"] = [str(Path(p).resolve()) for p in plugins]
    _copy_out(_run(model, "build", workdir, set_, None, backend, dim, None, log_format, extra), "engine", output)


@app.command()
def parity(model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")], backend: Backend = None,
           workdir: Workdir = Path(".deploykit"), set_: Sets = None, dim: Dims = None, report_dir: ReportDir = None,
           log_format: LogFormatOpt = "human") -> None:
    """Build (or reuse) the engine and compare it with the FP32 reference."""
    _run(model, "parity", workdir, set_, None, backend, dim, report_dir, log_format)


@app.command()
def gate(model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")], backend: Backend = None,
         workdir: Workdir = Path(".deploykit"), set_: Sets = None, dim: Dims = None, report_dir: ReportDir = None,
         fps: Annotated[Optional[float], typer.Option(help="Target FPS (sets gate.targets.default.fps).")] = None,
         allow_missing_target: Annotated[bool, typer.Option(help="Measure without failing when no target matches.")] = False,
         baseline: BaselineOpt = None, log_format: LogFormatOpt = "human") -> None:
    """Benchmark the engine against the FPS/latency target for this platform (and a baseline report)."""
    extra = _gate_flags(allow_missing_target, baseline)
    if fps is not None:
        extra["gate.targets"] = {"default": {"fps": fps}}
    _run(model, None, workdir, set_, None, backend, dim, report_dir, log_format, extra)


# Commands that live in their own modules register below (one line each).


@app.command()
def quantize(model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")], output: Out = None,
             precision: Annotated[Optional[str], typer.Option(help=listed(Precision, without=("fp32",)))] = None,
             target: Annotated[Optional[str], typer.Option(help=f"{listed(Flavour)} | auto (follows the backend)")] = None,
             calib_data: Annotated[Optional[Path], typer.Option("--calib-data", help="Folder of images or .npy/.npz files.")] = None,
             method: Annotated[Optional[str], typer.Option(help=listed(Method))] = None,
             auto_repair: Annotated[bool, typer.Option("--auto-repair", help="Search for the layers to keep in higher precision until parity holds.")] = False,
             workdir: Workdir = Path(".deploykit"), set_: Sets = None, dim: Dims = None, log_format: LogFormatOpt = "human") -> None:
    """Quantize (INT8/FP8/FP16): Q/DQ ONNX, ranges, TensorRT cache and precision report; -o copies them to a folder."""
    from deploykit import api

    extra = {k: v for k, v in {"quantize.precision": precision, "quantize.target": target, "quantize.method": method,
                                "quantize.repair.enabled": True if auto_repair else None}.items() if v is not None}
    try:
        result = api.quantize(model, calib_data=calib_data, workdir=workdir, dims=parse_dims(dim),
                              reporter=_reporter(log_format), overrides=parse_sets(set_) | extra)
    except DeployKitError as e:
        if getattr(e, "result", None) is not None:
            _print_table(e.result)  # type: ignore[attr-defined]
        raise
    _print_table(result)
    from deploykit.stages.quantize import QuantizeSummary

    _print_quantize(QuantizeSummary.of(result.artifacts["model"]))
    if output is not None:
        import shutil

        shutil.copytree(result.artifacts["model"].path, output, dirs_exist_ok=True)
        typer.echo(f"wrote {output}")


def _sample_counts(s: Any) -> str:
    """'ranges from 48 of 64 samples, checked on 16 held out' (or on samples the ranges saw, if few)."""
    if not s.samples:
        return "no calibration data"
    held = "held out" if s.range_samples < s.samples else "the ranges also saw"
    return f"ranges from {s.range_samples} of {s.samples} samples, checked on {s.check_samples} {held}"


def _print_quantize(s: Any) -> None:
    """The quantize stage's summary (a ``QuantizeSummary``) in a few lines."""
    lines = [f"quantize: {s.precision} for {s.flavour}, {s.method} calibration, "
             f"{s.quantized_nodes} nodes quantized; {_sample_counts(s)}"]
    for name, m in (s.check.metrics if s.check else {}).items():
        lines.append(f"  {name}: rel-L2 {m['rel_l2']:.4g}, cosine {m['cosine']:.6f} ({s.evaluator})")
    if s.excluded or s.kept_fp32:
        lines.append(f"  kept out of quantization: {', '.join(s.excluded) or '-'}; kept FP32: {', '.join(s.kept_fp32) or '-'}")
    if s.cpu_speed:
        speed = s.cpu_speed
        lines.append(f"  CPU: FP32 {speed.fp32_ms:.3f} ms, {s.precision.upper()} {speed.quantized_ms:.3f} ms "
                     f"at batch {speed.batch} ({speed.speedup:.2f}x; {speed.speedup_low:.2f}-"
                     f"{speed.speedup_high:.2f}x over {speed.rounds} interleaved rounds)")
    if s.repair:
        search = s.repair
        raised = ", ".join(f"{g} {p}" for g, p in search.layer_precisions.items()) or "-"
        ev = search.evaluations
        lines.append(f"  mixed-precision search: {ev.get('fresh', 0)} evaluation(s) run, {ev.get('cached', 0)} reused; "
                     f"raised {raised} ({search.stopped})")
    notes = [f"  note: {n}" for n in s.notes] + [f"  warning: {w}" for w in s.warnings]
    typer.echo("\n".join(lines + notes))


@app.command()
def profile(source: Annotated[Path, typer.Argument(help="deploykit.yaml, model.onnx, or an engine folder (build -o DIR)")],
            workdir: Workdir = Path(".deploykit"), set_: Sets = None, backend: Backend = None, dim: Dims = None,
            batch: Annotated[Optional[int], typer.Option(help="Batch to profile at (default: the opt shape).")] = None,
            iterations: Annotated[int, typer.Option(help="Profiled runs (a layer's time is its median).")] = 50,
            warmup: Annotated[int, typer.Option(help="Runs before profiling starts.")] = 10,
            top: Annotated[int, typer.Option(help="How many of the slowest layers to list.")] = 10,
            roofline: Annotated[bool, typer.Option(help="Add the roofline columns (peaks measured once, cached).")] = True,
            output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write profile.json, .md and .html here.")] = None,
            as_json: Annotated[bool, typer.Option("--json", help="Print the profile as JSON.")] = False,
            log_format: LogFormat = "human") -> None:
    """Per-layer time from the backend's own profiler, by node and op type, with FLOPs, bytes and the roofline."""
    from deploykit import api
    from deploykit.profiling import ProfileOptions

    overrides = parse_sets(set_) | ({"build.backend": backend} if backend else {})
    report = api.profile(source, workdir=workdir, batch=batch, dims=parse_dims(dim),
                         options=ProfileOptions(iterations=iterations, warmup=warmup, top=top, roofline=roofline),
                         reporter=_reporter(log_format), **{k.replace(".", "__"): v for k, v in overrides.items()})
    if output is not None:
        from deploykit.profiling.summary import write_profile

        for path in write_profile(report, output):
            typer.echo(f"wrote {path}", err=True)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        _print_profile(report)


def _print_profile(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"profile: {report.get('model', '')} ({report['backend']}, batch {report.get('batch', '?')})",
                  title_justify="left")
    for col in ("layer", "op", "prec", "ms", "share", "GFLOP/s", "GB/s", "of roof", "bound"):
        table.add_column(col, overflow="fold", justify="right" if col in ("ms", "share", "GFLOP/s", "GB/s", "of roof")
                         else "left")
    for r in report["layers"][: report["top_n"]]:
        table.add_row(escape(r["name"]), escape(r["op_type"]), r["precision"] or "?", f"{r['ms']:.4f}",
                      f"{r['share']:.1%}", f"{r['achieved_flops'] / 1e9:.2f}", f"{r['achieved_bandwidth'] / 1e9:.2f}",
                      f"{r['of_roofline']:.0%}" if "of_roofline" in r else "-", r.get("bound", "-"))
    console = Console()
    console.print(table)
    floor = (f"; roofline floor {report['floor_ms']:.3f} ms ({report['of_floor']:.0%} of it)" if "floor_ms" in report
             else f"; no roofline: {report.get('roofline_note', '')}")
    console.print(f"sum of layer times {report['total_ms']:.3f} ms over {report['layers_count']} layers{floor}",
                  highlight=False, soft_wrap=True)


@app.command()
def matrix(file: Annotated[Path, typer.Argument(help="matrix.yaml: models x precisions x targets")],
           ray: Annotated[Optional[str], typer.Option("--ray", help="local | auto | ray://HOST:10001 (default: a local process pool)")] = None,
           jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", help="Local pool size (default: the cores).")] = None,
           workdir: Annotated[Optional[Path], typer.Option("--workdir", "-w", help="The driver's artifact store (default: the file's store, else .deploykit).")] = None,
           report_dir: Annotated[Optional[Path], typer.Option("--report-dir", help="Where matrix.json, junit.xml, summary.md go (default: reports/<file name>).")] = None,
           set_: Sets = None, rerun: Rerun = None, log_format: LogFormat = "human") -> None:
    """Run models x precisions x targets; shared stages run once; exit non-zero if any cell fails."""
    from deploykit.matrix import run_matrix
    from deploykit.matrix.table import JsonView, LiveView

    if log_format not in ("human", "json"):
        raise UsageError(f"--log-format {log_format!r}: use 'human' or 'json'")
    overrides = {k.replace(".", "__"): v for k, v in parse_sets(set_).items()}
    folder = report_dir or Path("reports") / file.stem
    kwargs = {"ray": ray, "jobs": jobs, "workdir": workdir, "report_dir": folder, "rerun": tuple(rerun or ())}
    if log_format == "json":
        result = run_matrix(file, view=JsonView(), **kwargs, **overrides)
    else:
        from rich.console import Console

        console = Console()
        console = console if console.is_terminal else Console(width=200)  # a CI log: one line per cell
        with LiveView(console) as view:
            result = run_matrix(file, view=view, **kwargs, **overrides)
    typer.echo(f"report: {', '.join(str(p) for p in result.report_files)}", err=True)
    if result.interrupted:
        done = sum(c.status not in ("interrupted", "waiting") for c in result.cells)
        typer.echo(f"interrupted: {done} of {len(result.cells)} cells finished and are kept; rerun to continue", err=True)
        raise KeyboardInterrupt
    if result.exit_code:
        bad = [c for c in result.cells if c.exit_code]
        raise _MATRIX_ERRORS.get(result.exit_code, InternalError)(
            f"{len(bad)} of {len(result.cells)} cells did not pass; first: {bad[0].id}: {bad[0].status}"
            + (f" ({bad[0].error.splitlines()[0]})" if bad[0].error else ""), hint=f"see {folder / 'summary.md'}")


def _matrix_errors() -> dict[int, type[DeployKitError]]:
    from deploykit import errors

    return {e.exit_code: e for e in (errors.GateFailed, errors.UsageError, errors.EnvironmentProblem,
                                     errors.InvalidInput, errors.InternalError)}


_MATRIX_ERRORS = _matrix_errors()


@app.command()
def doctor(plugins: Annotated[Optional[list[str]], typer.Option("--plugins", help="Plugin library to check.")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output for CI.")] = False) -> None:
    """Report what this machine can do: ONNX Runtime providers, TensorRT, CUDA, GPUs, plugin libraries."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from deploykit import doctor as doctor_module

    report = doctor_module.collect(plugin_paths=plugins or ())
    if as_json:
        typer.echo(report.to_json())
        return
    table = Table(title="deploykit doctor", title_justify="left")
    for col in ("component", "status", "detail"):
        table.add_column(col, overflow="fold")
    colour = {"ok": "green", "warn": "yellow", "missing": "red"}
    for row in report.rows:
        table.add_row(escape(row.component), f"[{colour.get(row.status, 'white')}]{row.status}[/]", escape(row.detail))
    Console().print(table)
app.add_typer(__import__("deploykit.plugins.cli", fromlist=["app"]).app, name="plugins")
app.command("inspect")(__import__("deploykit.inspect", fromlist=["command"]).command)


@app.command()
def report(run: Annotated[str, typer.Argument(help="A run name (the config's name) or an artifact digest.")],
           output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
           workdir: Workdir = Path(".deploykit"),
           plots: Annotated[bool, typer.Option(help="Embed plots (needs matplotlib).")] = True) -> None:
    """Write one self-contained HTML report: stages, lineage, parity, latency, platform and tools."""
    from deploykit import api

    typer.echo(f"wrote {api.write_report(run, output, workdir=workdir, with_plots=plots)}")


@config_app.command("show")
def config_show(config: Annotated[Path, typer.Argument(help="deploykit.yaml")], set_: Sets = None) -> None:
    """Print the fully resolved config (every default filled in)."""
    import yaml

    from deploykit.config import load_config
    from deploykit.hashing import canonical

    resolved = canonical(load_config(config, parse_sets(set_)))
    resolved.pop("base_dir", None)
    typer.echo(yaml.safe_dump(resolved, sort_keys=False))


@artifacts_app.command("ls")
def artifacts_ls(workdir: Workdir = Path(".deploykit")) -> None:
    """List artifacts, oldest first; one that does not verify is listed as corrupt (exit 4)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from deploykit.artifacts import Store
    from deploykit.errors import ArtifactCorrupt

    table = Table()
    for col in ("digest", "kind", "stage", "created", "parents"):
        table.add_column(col, overflow="fold")
    with Store(workdir) as store:
        good, problems = store.scan()
    for a in good:
        m = a.manifest
        table.add_row(a.digest[:12], m.kind, m.stage, m.created, " ".join(f"{r}:{d[:8]}" for r, d in m.parents.items()))
    for line in problems:
        table.add_row("[red]corrupt[/]", "", "", "", escape(line))
    Console().print(table)
    if problems:
        raise ArtifactCorrupt(f"{len(problems)} artifact(s) in {workdir} do not verify; first: {problems[0]}",
                              hint="see `deploykit artifacts verify`; delete what it names and rerun")


@artifacts_app.command("verify")
def artifacts_verify(workdir: Workdir = Path(".deploykit")) -> None:
    """Re-hash every object and check every manifest, recipe and run record (exit 4 on any problem)."""
    from deploykit.artifacts import Store
    from deploykit.errors import ArtifactCorrupt
    from deploykit.storecheck import verify

    with Store(workdir) as store:
        report = verify(store)
    for line in report.problems:
        typer.echo(f"problem: {line}")
    typer.echo(f"checked {report.objects} objects, {report.recipes} recipes, {report.runs} runs: "
               f"{len(report.problems)} problem(s)")
    if report.problems:
        raise ArtifactCorrupt(f"{workdir}: {len(report.problems)} problem(s); first: {report.problems[0]}",
                              hint="delete what is named and rerun; `deploykit artifacts gc` removes unreferenced objects")


@artifacts_app.command("gc")
def artifacts_gc(workdir: Workdir = Path(".deploykit"),
                 dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go; remove nothing.")] = False) -> None:
    """Remove objects no recipe or run names (parents of named ones are kept), and stale temporaries."""
    from deploykit.artifacts import Store
    from deploykit.storecheck import gc

    with Store(workdir) as store:
        report = gc(store, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for digest in report.removed_objects:
        typer.echo(f"{verb} object {digest}")
    typer.echo(f"{verb} {len(report.removed_objects)} unreferenced object(s), {len(report.removed_recipes)} "
               f"dangling recipe(s), {len(report.removed_temporaries)} stale temporary folder(s); kept {report.kept}")


@artifacts_app.command("show")
def artifacts_show(digest: str, workdir: Workdir = Path(".deploykit")) -> None:
    """Print an artifact's manifest (verified against its files)."""
    from dataclasses import asdict

    from deploykit.artifacts import Store

    with Store(workdir) as store:
        artifact = store.get(digest)
    typer.echo(json.dumps({"path": str(artifact.path), **asdict(artifact.manifest)}, indent=2, sort_keys=True))


@artifacts_app.command("lineage")
def artifacts_lineage(digest: str, workdir: Workdir = Path(".deploykit")) -> None:
    """Print the chain of artifacts an artifact was made from."""
    from deploykit.artifacts import Store

    store = Store(workdir)  # closed when the command returns (the process ends)

    def walk(d: str, role: str, depth: int) -> None:
        a = store.get(d)
        typer.echo(f"{'  ' * depth}{role + ': ' if role else ''}{a.digest[:12]} {a.kind} (stage {a.manifest.stage} "
                   f"v{a.manifest.stage_version}, {a.manifest.created})")
        for r, parent in sorted(a.manifest.parents.items()):
            walk(parent, r, depth + 1)

    walk(digest, "", 0)


def main() -> None:
    """Entry point: map every failure class to its exit code and one clear line; never a traceback,
    and (supervised) never a signal or a hang either."""
    from deploykit import supervise

    if supervise.wanted():
        supervise.run(_main)
    _main()


def _main() -> None:
    _quiet_hooks()
    try:
        code = app(standalone_mode=False)  # typer turns Ctrl-C into Exit(130) and returns its code here
    except DeployKitError as e:
        _fail(e)
    except (typer.Abort, KeyboardInterrupt):
        _fail(UsageError("interrupted"), code=130)
    except Exception as e:  # the parser's own usage errors first, then the machine, then genuine bugs
        _fail(_last_resort(e))
    sys.exit(code if isinstance(code, int) else 0)


def _last_resort(e: Exception) -> DeployKitError:
    """The DeployKitError an exception that reached the top stands for."""
    from deploykit.errors import EnvironmentProblem, disk_full, first_line, is_disk_full

    # typer >= 0.29 vendors click: its ClickException derives from typer.TyperException, and
    # `import click` fails on a fresh install.
    if isinstance(e, typer.TyperException) and hasattr(e, "format_message"):
        return UsageError(e.format_message(), hint="see `deploykit --help` (or COMMAND --help)")
    if is_disk_full(e):
        return disk_full(e)
    if isinstance(e, MemoryError):
        return EnvironmentProblem("out of memory", hint="free memory, or lower the dims, batches or sample counts")
    if isinstance(e, OSError) and e.filename:  # e.g. an --output folder that cannot be written
        return EnvironmentProblem(f"{e.filename}: {e.strerror or type(e).__name__}",
                                  hint="check the path and its permissions")
    if os.environ.get("DEPLOYKIT_DEBUG"):
        raise e
    return InternalError(f"internal error: {type(e).__name__}: {first_line(e)}",
                         hint="rerun with DEPLOYKIT_DEBUG=1 for the traceback and report it")


def _quiet_hooks() -> None:
    """Warnings as one line each; errors in threads and finalizers never print a traceback."""
    import threading
    import warnings

    def one_line(message: Any, category: Any, filename: str, lineno: int, line: Any = None) -> str:
        return "warning: " + " ".join(str(message).split()) + "\n"

    def thread_error(args: Any) -> None:
        if os.environ.get("DEPLOYKIT_DEBUG"):
            return threading.__excepthook__(args)
        with contextlib.suppress(Exception):
            sys.stderr.write(f"warning: a worker thread failed: {args.exc_type.__name__}: {args.exc_value}\n")

    warnings.formatwarning = one_line  # formatting only: whoever records warnings still gets them
    threading.excepthook = thread_error
    sys.unraisablehook = lambda unraisable: None


def _fail(e: DeployKitError, code: int | None = None) -> None:
    with contextlib.suppress(Exception):
        from rich.markup import escape

        console = _console()  # messages quote shapes and extras like [tensorrt]: never read them as markup
        console.print(f"[bold red]error:[/] {escape(e.message)}", highlight=False, soft_wrap=True)
        if e.hint:
            console.print(f"[yellow]hint:[/] {escape(e.hint)}", highlight=False, soft_wrap=True)
    sys.exit(e.exit_code if code is None else code)
