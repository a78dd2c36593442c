"""The ``deploykit`` command: parse -> call the API -> render -> exit code. Thin on purpose."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from deploykit.errors import DeployKitError, InternalError, UsageError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Take a PyTorch model or an ONNX file to a verified, benchmarked engine.")
config_app = typer.Typer(no_args_is_help=True, help="Inspect configuration.")
artifacts_app = typer.Typer(no_args_is_help=True, help="List and inspect stored artifacts.")
app.add_typer(config_app, name="config")
app.add_typer(artifacts_app, name="artifacts")

Workdir = Annotated[Path, typer.Option("--workdir", "-w", help="Artifact store; reruns reuse what it holds.")]
Sets = Annotated[Optional[list[str]], typer.Option("--set", help="Override a config field: --set gate.iterations=50")]
Rerun = Annotated[Optional[list[str]], typer.Option("--rerun", help="Run this stage even if its artifact exists.")]
Backend = Annotated[Optional[str], typer.Option("--backend", help="Build backend (overrides build.backend).")]
Provider = Annotated[Optional[str], typer.Option("--provider", help="onnxruntime execution provider: cpu | cuda | tensorrt")]
Dims = Annotated[Optional[list[str]], typer.Option("--dim", help="Dynamic dim of an ONNX input: --dim batch=1,4,8")]
ReportDir = Annotated[Optional[Path], typer.Option("--report-dir", help="Copy parity/gate reports (JSON, JUnit, Markdown) here.")]
LogFormat = Annotated[str, typer.Option("--log-format", help="human | json")]


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _reporter(log_format: str) -> Any:
    from deploykit.progress import JsonReporter, RichReporter

    if log_format not in ("human", "json"):
        raise UsageError(f"--log-format {log_format!r}: use 'human' or 'json'")
    return JsonReporter() if log_format == "json" else RichReporter(_console())


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``key.path=value`` pairs; values are YAML, so numbers, lists and booleans work."""
    import yaml

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected key.path=value")
        out[key.strip()] = yaml.safe_load(value)
    return out


def parse_dims(items: list[str] | None) -> dict[str, tuple[int, int, int]]:
    out = {}
    for item in items or []:
        name, _, values = item.partition("=")
        try:
            nums = tuple(int(v) for v in values.split(","))
        except ValueError:
            nums = ()
        if len(nums) == 1:
            nums = nums * 3
        if not name or len(nums) != 3:
            raise UsageError(f"--dim {item!r}: expected name=MIN,OPT,MAX or name=N")
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
                             reporter=_reporter(log_format), dims=parse_dims(dims),
                             **{k.replace(".", "__"): v for k, v in overrides.items()})
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
            dim: Dims = None, report_dir: ReportDir = None, provider: Provider = None,
            precision: Annotated[Optional[str], typer.Option(help="fp32 | fp16 | int8 | fp8 (sets quantize.precision)")] = None,
            allow_missing_target: Annotated[bool, typer.Option(help="Measure without failing when no target matches.")] = False,
            baseline: BaselineOpt = None, log_format: LogFormat = "human") -> None:
    """Run every stage: export -> surgery -> quantize -> build -> parity -> gate."""
    extra: dict[str, Any] = _gate_flags(allow_missing_target, baseline)
    if precision:
        extra["quantize.precision"] = precision
    if provider:
        extra["build.provider"] = provider
    _run(config, None, workdir, set_, rerun, backend, dim, report_dir, log_format, extra)


def _copy_out(result: Any, role: str, out: Path | None) -> None:
    if out is None:
        return
    import shutil

    artifact = result.artifacts[role]
    if role in ("model", "reference"):
        from deploykit.onnxio import copy_model

        out.parent.mkdir(parents=True, exist_ok=True)
        copy_model(artifact.file("model.onnx"), out)  # with its .data file, when it has one
    else:
        shutil.copytree(artifact.path, out, dirs_exist_ok=True)
    typer.echo(f"wrote {out}")


Out = Annotated[Optional[Path], typer.Option("--output", "-o", help="Copy the stage's output here.")]


@app.command()
def export(config: Annotated[Path, typer.Argument(help="deploykit.yaml")], output: Out = None,
           workdir: Workdir = Path(".deploykit"), set_: Sets = None, log_format: LogFormat = "human") -> None:
    """Export the torch model to ONNX (checked against torch)."""
    _copy_out(_run(config, "export", workdir, set_, None, None, None, None, log_format),
              "model", output)


@app.command()
def surgery(model: Annotated[Optional[Path], typer.Argument(help="deploykit.yaml or model.onnx")] = None, output: Out = None,
            pass_: Annotated[Optional[list[str]], typer.Option("--pass", help="A pass: name or name={json params}")] = None,
            workdir: Workdir = Path(".deploykit"), set_: Sets = None, dim: Dims = None, log_format: LogFormat = "human",
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
          backend: Backend = None, provider: Provider = None, workdir: Workdir = Path(".deploykit"), set_: Sets = None,
          dim: Dims = None, plugins: Annotated[Optional[list[str]], typer.Option("--plugins", help="TensorRT plugin library (repeatable).")] = None,
          log_format: LogFormat = "human") -> None:
    """Build an engine for a backend."""
    extra: dict[str, Any] = {"build.provider": provider} if provider else {}
    if plugins:
        extra["build.plugins"] = [str(Path(p).resolve()) for p in plugins]
    _copy_out(_run(model, "build", workdir, set_, None, backend, dim, None, log_format, extra), "engine", output)


@app.command()
def parity(model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")], backend: Backend = None,
           workdir: Workdir = Path(".deploykit"), set_: Sets = None, dim: Dims = None, report_dir: ReportDir = None,
           log_format: LogFormat = "human") -> None:
    """Build (or reuse) the engine and compare it with the FP32 reference."""
    _run(model, "parity", workdir, set_, None, backend, dim, report_dir, log_format)


@app.command()
def gate(model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")], backend: Backend = None,
         workdir: Workdir = Path(".deploykit"), set_: Sets = None, dim: Dims = None, report_dir: ReportDir = None,
         fps: Annotated[Optional[float], typer.Option(help="Target FPS (sets gate.targets.default.fps).")] = None,
         allow_missing_target: Annotated[bool, typer.Option(help="Measure without failing when no target matches.")] = False,
         baseline: BaselineOpt = None, log_format: LogFormat = "human") -> None:
    """Benchmark the engine against the FPS/latency target for this platform (and a baseline report)."""
    extra = _gate_flags(allow_missing_target, baseline)
    if fps is not None:
        extra["gate.targets"] = {"default": {"fps": fps}}
    _run(model, None, workdir, set_, None, backend, dim, report_dir, log_format, extra)


# Commands that live in their own modules register below (one line each).


@app.command()
def quantize(model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")], output: Out = None,
             precision: Annotated[Optional[str], typer.Option(help="fp16 | int8 | fp8 | int4")] = None,
             target: Annotated[Optional[str], typer.Option(help="tensorrt | onnxruntime | auto (follows the backend)")] = None,
             calib_data: Annotated[Optional[Path], typer.Option("--calib-data", help="Folder of images or .npy/.npz files.")] = None,
             method: Annotated[Optional[str], typer.Option(help="auto | max | entropy | percentile | mse")] = None,
             auto_repair: Annotated[bool, typer.Option("--auto-repair", help="Search for the layers to keep in higher precision until parity holds.")] = False,
             workdir: Workdir = Path(".deploykit"), set_: Sets = None, dim: Dims = None, log_format: LogFormat = "human") -> None:
    """Quantize (INT8/FP8/FP16): Q/DQ ONNX, ranges, TensorRT cache and precision report; -o copies them to a folder."""
    from deploykit import api

    extra = {k: v for k, v in {"quantize.precision": precision, "quantize.target": target, "quantize.method": method,
                                "quantize.repair.enabled": True if auto_repair else None}.items() if v is not None}
    overrides = {k.replace(".", "__"): v for k, v in (parse_sets(set_) | extra).items()}
    try:
        result = api.quantize(model, calib_data=calib_data, workdir=workdir, dims=parse_dims(dim),
                              reporter=_reporter(log_format), **overrides)
    except DeployKitError as e:
        if getattr(e, "result", None) is not None:
            _print_table(e.result)  # type: ignore[attr-defined]
        raise
    _print_table(result)
    _print_quantize(result.artifacts["model"].manifest.summary)
    if output is not None:
        import shutil

        shutil.copytree(result.artifacts["model"].path, output, dirs_exist_ok=True)
        typer.echo(f"wrote {output}")


def _print_quantize(summary: dict[str, Any]) -> None:
    lines = [f"quantize: {summary['precision']} for {summary['flavour']}, {summary['method']} calibration on "
             f"{summary['samples']} samples, {summary['quantized_nodes']} nodes quantized"]
    for name, m in (summary.get("check") or {}).get("metrics", {}).items():
        lines.append(f"  {name}: rel-L2 {m['rel_l2']:.4g}, cosine {m['cosine']:.6f} ({summary['evaluator']})")
    if summary["excluded"] or summary["kept_fp32"]:
        lines.append(f"  kept out of quantization: {', '.join(summary['excluded']) or '-'}; "
                     f"kept FP32: {', '.join(summary['kept_fp32']) or '-'}")
    speed = summary.get("cpu_speed")
    if speed:
        lines.append(f"  CPU: FP32 {speed['fp32_ms']:.3f} ms, {summary['precision'].upper()} {speed['quantized_ms']:.3f} ms "
                     f"at batch {speed['batch']} ({speed['speedup']:.2f}x)")
    search = summary.get("repair")
    if search:
        raised = ", ".join(f"{g} {p}" for g, p in search["layer_precisions"].items()) or "-"
        ev = search["evaluations"]
        lines.append(f"  mixed-precision search: {ev['fresh']} evaluation(s) run, {ev['cached']} reused; "
                     f"raised {raised} ({search['stopped']})")
    notes = [f"  note: {n}" for n in summary["notes"]] + [f"  warning: {w}" for w in summary["warnings"]]
    typer.echo("\n".join(lines + notes))


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
    from deploykit.report import write_html

    typer.echo(f"wrote {write_html(workdir, run, output, with_plots=plots)}")


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
    """List artifacts, oldest first."""
    from rich.console import Console
    from rich.table import Table

    from deploykit.artifacts import Store

    table = Table()
    for col in ("digest", "kind", "stage", "created", "parents"):
        table.add_column(col)
    for a in Store(workdir).list():
        m = a.manifest
        table.add_row(a.digest[:12], m.kind, m.stage, m.created, " ".join(f"{r}:{d[:8]}" for r, d in m.parents.items()))
    Console().print(table)


@artifacts_app.command("show")
def artifacts_show(digest: str, workdir: Workdir = Path(".deploykit")) -> None:
    """Print an artifact's manifest (verified against its files)."""
    from dataclasses import asdict

    from deploykit.artifacts import Store

    artifact = Store(workdir).get(digest)
    typer.echo(json.dumps({"path": str(artifact.path), **asdict(artifact.manifest)}, indent=2, sort_keys=True))


@artifacts_app.command("lineage")
def artifacts_lineage(digest: str, workdir: Workdir = Path(".deploykit")) -> None:
    """Print the chain of artifacts an artifact was made from."""
    from deploykit.artifacts import Store

    store = Store(workdir)

    def walk(d: str, role: str, depth: int) -> None:
        a = store.get(d)
        typer.echo(f"{'  ' * depth}{role + ': ' if role else ''}{a.digest[:12]} {a.kind} (stage {a.manifest.stage} "
                   f"v{a.manifest.stage_version}, {a.manifest.created})")
        for r, parent in sorted(a.manifest.parents.items()):
            walk(parent, r, depth + 1)

    walk(digest, "", 0)


def main() -> None:
    """Entry point: map every failure class to its exit code and one clear line."""
    try:
        app(standalone_mode=False)
    except DeployKitError as e:
        _fail(e)
    except typer.Abort:
        sys.exit(130)
    except Exception as e:  # the parser's own usage errors first, then genuine bugs
        # typer >= 0.29 vendors click: its ClickException derives from typer.TyperException, and
        # `import click` fails on a fresh install.
        if isinstance(e, typer.TyperException) and hasattr(e, "show"):
            e.show()
            sys.exit(UsageError.exit_code)
        if os.environ.get("DEPLOYKIT_DEBUG"):
            raise
        _fail(InternalError(f"internal error: {type(e).__name__}: {e}",
                            hint="rerun with DEPLOYKIT_DEBUG=1 for the traceback and report it"))
    sys.exit(0)


def _fail(e: DeployKitError) -> None:
    from rich.markup import escape

    console = _console()  # messages quote shapes and extras like [tensorrt]: never read them as markup
    console.print(f"[bold red]error:[/] {escape(e.message)}", highlight=False, soft_wrap=True)
    if e.hint:
        console.print(f"[yellow]hint:[/] {escape(e.hint)}", highlight=False, soft_wrap=True)
    sys.exit(e.exit_code)
