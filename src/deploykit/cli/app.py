"""The ``deploykit`` command: parse -> call the API -> render the run record -> exit code. Thin on purpose:
options and their parsing live in :mod:`deploykit.cli.args`, rendering in :mod:`deploykit.report.terminal`."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from deploykit.cli import args as opt
from deploykit.cli import inspect as inspect_cli
from deploykit.cli import plugins as plugins_cli
from deploykit.cli import result as ending
from deploykit.cli.args import parse_dims, parse_sets
from deploykit.errors import DeployKitError, InternalError, UsageError
from deploykit.safety import thirdparty

opt.readable_help()
app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Take a PyTorch model or an ONNX file to a verified, benchmarked engine.",
)
config_app = typer.Typer(no_args_is_help=True, help="Inspect configuration.")
artifacts_app = typer.Typer(no_args_is_help=True, help="List, inspect, verify and garbage-collect stored artifacts.")
app.add_typer(config_app, name="config")
app.add_typer(artifacts_app, name="artifacts")
_STATE = ending.STATE  # --log-format json: errors go out as JSON too


def _version(value: bool) -> None:
    if value:
        from deploykit import __version__

        typer.echo(f"deploykit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Take a PyTorch model or an ONNX file to a verified, benchmarked engine."""


def _reporter(log_format: str) -> Any:
    from deploykit.progress import JsonReporter, RichReporter
    from deploykit.report.terminal import console

    _STATE["json"] = log_format == "json"
    return JsonReporter() if log_format == "json" else RichReporter(console(stderr=True))


def _show(record: Any, log_format: str, parity_table: bool = False, details: list[str] | None = None) -> None:
    """The run record: JSON on stdout (one object), or the stage table, ``details`` and the verdict lines."""
    from deploykit.report import terminal

    if log_format == "json":
        from deploykit.store.jsonio import dumps

        typer.echo(dumps({k: v for k, v in record.to_dict().items() if k != "details"}), nl=False)
        _STATE["result_printed"] = True
        return
    out = terminal.console()
    if parity_table and record.details.get("parity"):
        terminal.print_table(out, terminal.parity_table(record))
    terminal.print_run(record, out, details or [])


def _run(
    source: Path,
    until: str | None,
    workdir: Path,
    sets: list[str] | None,
    log_format: str,
    *,
    flags: dict[str, Any] | None = None,
    rerun: list[str] | None = None,
    dims: list[str] | None = None,
    shapes: dict[str, Any] | None = None,
    report_dir: Path | None = None,
    parity_table: bool = False,
    validation: Path | None = None,
) -> Any:
    from deploykit import api

    reporter = _reporter(log_format)
    try:
        result = api.convert(
            source,
            workdir=workdir,
            until=until,
            rerun=tuple(rerun or ()),
            report_dir=report_dir,
            reporter=reporter,
            dims=parse_dims(dims),
            shapes=shapes,
            validation=validation,
            overrides=parse_sets(sets) | opt.overrides(**(flags or {})),
        )
    except DeployKitError as e:
        if getattr(e, "result", None) is not None:
            _show(e.result.record, log_format, parity_table)  # type: ignore[attr-defined]
        raise
    _show(result.record, log_format, parity_table)
    return result


def _gate_flags(
    allow_missing_target: bool,
    baseline: Path | None,
    iterations: int | None,
    warmup: int | None,
    duration: float | None,
) -> dict[str, Any]:
    return {
        "gate.allow_missing_target": True if allow_missing_target else None,
        # relative to where the command runs, not to the config's folder
        "gate.baseline": str(baseline.resolve()) if baseline is not None else None,
        "gate.iterations": iterations,
        "gate.warmup": warmup,
        "gate.duration_s": duration,
    }


def _timing_flags(
    use_cuda_graph: bool, no_data_transfers: bool, warmup_ms: float | None, avg_runs: int | None, soak: float | None
) -> dict[str, Any]:
    """trtexec's timing flags as the gate fields they set (None: not given)."""
    return {
        "gate.cuda_graph": "on" if use_cuda_graph else None,
        "gate.data_transfers": False if no_data_transfers else None,
        "gate.warmup_s": warmup_ms / 1000.0 if warmup_ms is not None else None,
        "gate.avg_runs": avg_runs,
        "gate.soak_s": soak,
    }


def _tracing(path: Path | None) -> Any:
    """``--trace out.json``: every stage and timed inference as a Chrome trace (and NVTX ranges)."""
    from deploykit import tracing

    return tracing.trace(path) if path is not None else contextlib.nullcontext()


def _reruns(rerun: list[str] | None, remeasure: bool) -> list[str]:
    return [*(rerun or []), *(["gate"] if remeasure else [])]


@app.command()
def convert(
    config: Annotated[Path, typer.Argument(help="deploykit.yaml (or an .onnx file)")],
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    rerun: opt.Rerun = None,
    backend: opt.BackendOpt = None,
    provider: opt.ProviderOpt = None,
    precision: opt.PrecisionOpt = None,
    dim: opt.Dims = None,
    shapes: opt.Shapes = None,
    min_shapes: opt.MinShapes = None,
    opt_shapes: opt.OptShapes = None,
    max_shapes: opt.MaxShapes = None,
    plugins: opt.Plugins = None,
    timing_cache: opt.TimingCache = None,
    iterations: opt.Iterations = None,
    warmup: opt.Warmup = None,
    duration: opt.Duration = None,
    remeasure: opt.Remeasure = False,
    auto_repair: opt.AutoRepair = False,
    report_dir: opt.ReportDir = None,
    allow_missing_target: opt.AllowMissingTarget = False,
    baseline: opt.Baseline = None,
    use_cuda_graph: opt.UseCudaGraph = False,
    no_data_transfers: opt.NoDataTransfers = False,
    warmup_ms: opt.WarmupMs = None,
    avg_runs: opt.AvgRuns = None,
    soak: opt.Soak = None,
    trace: opt.Trace = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Run every stage: export -> surgery -> quantize -> build -> parity -> gate."""
    flags = {
        "quantize.precision": precision,
        "quantize.repair.enabled": True if auto_repair else None,
        "build.backend": backend,
        "build.provider": provider,
        "build.plugins": opt.checked_plugins(plugins),
        **_timing_cache(timing_cache),
        **_gate_flags(allow_missing_target, baseline, iterations, warmup, duration),
        **_timing_flags(use_cuda_graph, no_data_transfers, warmup_ms, avg_runs, soak),
    }
    with _tracing(trace):
        _run(
            config,
            None,
            workdir,
            set_,
            log_format,
            flags=flags,
            rerun=_reruns(rerun, remeasure),
            dims=dim,
            shapes=opt.shape_profiles(shapes, min_shapes, opt_shapes, max_shapes),
            report_dir=report_dir,
        )


def _timing_cache(path: Path | None) -> dict[str, Any]:
    return {"build.tensorrt.timing_cache_file": str(path.resolve()) if path is not None else None}


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
    typer.echo(f"wrote {out}", err=_STATE["json"])


@app.command()
def export(
    config: Annotated[Path, typer.Argument(help="deploykit.yaml")],
    output: opt.Out = None,
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    rerun: opt.Rerun = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Export the torch model to ONNX (checked against torch)."""
    _copy_out(_run(config, "export", workdir, set_, log_format, rerun=rerun), "model", output)


@app.command()
def surgery(
    model: Annotated[Optional[Path], typer.Argument(help="deploykit.yaml or model.onnx")] = None,
    output: opt.Out = None,
    pass_: Annotated[Optional[list[str]], typer.Option("--pass", help="A pass: name or name={json params}")] = None,
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    rerun: opt.Rerun = None,
    dim: opt.Dims = None,
    shapes: opt.Shapes = None,
    log_format: ending.LogFormatOpt = "human",
    list_: Annotated[bool, typer.Option("--list", help="List every pass with its parameters and exit.")] = False,
    as_json: opt.Json = False,
) -> None:
    """Run graph surgery passes (default: the config's, else sanitize)."""
    if list_:
        from deploykit.surgery.registry import format_passes, list_passes

        if ending.json_output(log_format, as_json):
            ending.emit_json(list_passes())
        else:
            typer.echo(format_passes())
        return
    if model is None:
        raise UsageError("surgery: give a deploykit.yaml or model.onnx (or --list)")
    flags = {"surgery.passes": [_pass_spec(p) for p in pass_] if pass_ else None}
    result = _run(
        model,
        "surgery",
        workdir,
        set_,
        log_format,
        flags=flags,
        rerun=rerun,
        dims=dim,
        shapes=opt.shape_profiles(shapes, None, None, None),
    )
    _copy_out(result, "model", output)


def _pass_spec(text: str) -> Any:
    name, sep, params = text.partition("=")
    if not sep:
        return name
    try:
        return {name: json.loads(params)}
    except json.JSONDecodeError as e:
        raise UsageError(f"--pass {text!r}: parameters must be JSON ({e.msg})") from e


@app.command()
def build(
    model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")],
    output: opt.Out = None,
    backend: opt.BackendOpt = None,
    provider: opt.ProviderOpt = None,
    precision: opt.PrecisionOpt = None,
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    rerun: opt.Rerun = None,
    dim: opt.Dims = None,
    shapes: opt.Shapes = None,
    min_shapes: opt.MinShapes = None,
    opt_shapes: opt.OptShapes = None,
    max_shapes: opt.MaxShapes = None,
    plugins: opt.Plugins = None,
    timing_cache: opt.TimingCache = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Build an engine for a backend."""
    flags = {
        "build.backend": backend,
        "build.provider": provider,
        "quantize.precision": precision,
        "build.plugins": opt.checked_plugins(plugins),
        **_timing_cache(timing_cache),
    }
    result = _run(
        model,
        "build",
        workdir,
        set_,
        log_format,
        flags=flags,
        rerun=rerun,
        dims=dim,
        shapes=opt.shape_profiles(shapes, min_shapes, opt_shapes, max_shapes),
    )
    _copy_out(result, "engine", output)


@app.command()
def parity(
    model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx (with OTHER: A, the reference)")],
    other: Annotated[
        Optional[Path],
        typer.Argument(metavar="OTHER", help="A second model or engine folder: compare the two on the same inputs."),
    ] = None,
    backend: opt.BackendOpt = None,
    precision: opt.PrecisionOpt = None,
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    rerun: opt.Rerun = None,
    dim: opt.Dims = None,
    shapes: opt.Shapes = None,
    report_dir: opt.ReportDir = None,
    atol: opt.Atol = None,
    rtol: opt.Rtol = None,
    save_inputs: opt.SaveInputs = None,
    load_inputs: opt.LoadInputs = None,
    save_outputs: opt.SaveOutputs = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Build (or reuse) the engine and compare it with the FP32 reference: one row per output x reference.

    With two arguments (models or engine folders, as `polygraphy run --onnxrt --trt` compares two runners),
    run both on the same inputs and judge the second against the first.
    """
    tolerances = opt.tolerance_overrides(atol, rtol)
    if other is not None:
        _parity_pair(
            model,
            other,
            precision,
            parse_sets(set_) | tolerances,
            dim,
            load_inputs,
            save_inputs,
            save_outputs,
            log_format,
        )
        return
    flags = {"build.backend": backend, "quantize.precision": precision, **tolerances}
    try:
        result = _run(
            model,
            "parity",
            workdir,
            set_,
            log_format,
            flags=flags,
            rerun=rerun,
            dims=dim,
            shapes=opt.shape_profiles(shapes, None, None, None),
            report_dir=report_dir,
            parity_table=True,
            validation=load_inputs,
        )
    except DeployKitError as e:
        if getattr(e, "result", None) is not None and "engine" in e.result.artifacts:  # type: ignore[attr-defined]
            _save_tensors(e.result, save_inputs, save_outputs)  # type: ignore[attr-defined]
        raise
    _save_tensors(result, save_inputs, save_outputs)


def _save_tensors(result: Any, inputs: Path | None, outputs: Path | None) -> None:
    if inputs is None and outputs is None:
        return
    from deploykit import api

    for path in api.save_tensors(result, inputs=inputs, outputs=outputs):
        typer.echo(f"wrote {path}", err=True)


def _parity_pair(
    a: Path,
    b: Path,
    precision: str | None,
    fields: dict[str, Any],
    dims: list[str] | None,
    load_inputs: Path | None,
    save_inputs: Path | None,
    save_outputs: Path | None,
    log_format: str,
) -> None:
    from deploykit import api
    from deploykit.data import feedfile
    from deploykit.errors import ParityFailed

    sizes = {name: values[1] for name, values in parse_dims(dims).items()}  # --dim batch=4: the opt size
    pair = api.compare(a, b, dims=sizes, samples=load_inputs, precision=precision or "fp32", overrides=fields)
    if save_inputs is not None:
        typer.echo(f"wrote {feedfile.save_inputs(save_inputs, pair.samples)}", err=True)
    if save_outputs is not None:
        typer.echo(f"wrote {feedfile.save_runs(save_outputs, pair.runs)}", err=True)
    _show(pair.record, log_format, parity_table=True)
    if not pair.passed:
        failed = pair.record.deciding("parity", "task")
        raise ParityFailed(
            f"{b} differs from {a}: {failed.name} {failed.verdict_line()}" if failed else f"{b} differs from {a}",
            hint="see the table above; loosen with --atol/--rtol or --set "
            "parity.default.* if the difference is expected",
        )


@app.command()
def gate(
    model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")],
    backend: opt.BackendOpt = None,
    precision: opt.PrecisionOpt = None,
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    rerun: opt.Rerun = None,
    dim: opt.Dims = None,
    shapes: opt.Shapes = None,
    min_shapes: opt.MinShapes = None,
    opt_shapes: opt.OptShapes = None,
    max_shapes: opt.MaxShapes = None,
    report_dir: opt.ReportDir = None,
    fps: Annotated[
        Optional[float],
        typer.Option(help="Target FPS, judged on wall-clock throughput (sets gate.targets.default.fps)."),
    ] = None,
    deadline_ms: opt.DeadlineMs = None,
    iterations: opt.Iterations = None,
    warmup: opt.Warmup = None,
    duration: opt.Duration = None,
    remeasure: opt.Remeasure = False,
    allow_missing_target: opt.AllowMissingTarget = False,
    baseline: opt.Baseline = None,
    use_cuda_graph: opt.UseCudaGraph = False,
    no_data_transfers: opt.NoDataTransfers = False,
    warmup_ms: opt.WarmupMs = None,
    avg_runs: opt.AvgRuns = None,
    soak: opt.Soak = None,
    trace: opt.Trace = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Benchmark the engine against the throughput/latency/deadline target for this platform (and a baseline)."""
    target = opt.overrides(fps=fps, deadline_ms=deadline_ms)  # a target from the flags replaces the config's
    flags = {
        "build.backend": backend,
        "quantize.precision": precision,
        "gate.targets": {"default": target} if target else None,
        **_gate_flags(allow_missing_target, baseline, iterations, warmup, duration),
        **_timing_flags(use_cuda_graph, no_data_transfers, warmup_ms, avg_runs, soak),
    }
    with _tracing(trace):
        _run(
            model,
            None,
            workdir,
            set_,
            log_format,
            flags=flags,
            rerun=_reruns(rerun, remeasure),
            dims=dim,
            shapes=opt.shape_profiles(shapes, min_shapes, opt_shapes, max_shapes),
            report_dir=report_dir,
        )


LintSource = Annotated[Path, typer.Argument(help="deploykit.yaml (the graph its build would get) or model.onnx")]
LintFor = Annotated[
    Optional[list[str]],
    typer.Option("--for", help="tensorrt (every supported version), tensorrt=10.13 or tensorrt=11; repeatable."),
]


@app.command()
def lint(
    model: LintSource,
    for_: LintFor = None,
    plugins: opt.Plugins = None,
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    dim: opt.Dims = None,
    shapes: opt.Shapes = None,
    min_shapes: opt.MinShapes = None,
    opt_shapes: opt.OptShapes = None,
    max_shapes: opt.MaxShapes = None,
    as_json: opt.Json = False,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """What TensorRT's parser and builder would refuse, without TensorRT: exit 4 on any error."""
    from deploykit import api

    as_json = ending.json_output(log_format, as_json)
    from deploykit.lint.tables import parse_for
    from deploykit.report import terminal

    with thirdparty.logged_to(workdir):  # onnx's and ONNX Runtime's own output goes to the workdir's log
        report = api.lint(
            model,
            versions=parse_for(for_ or []),
            plugins=opt.checked_plugins(plugins),
            workdir=workdir,
            dims=parse_dims(dim),
            shapes=opt.shape_profiles(shapes, min_shapes, opt_shapes, max_shapes),
            reporter=None if as_json else _reporter("human"),
            overrides=parse_sets(set_),
        )
    if as_json:
        ending.emit_json(report.to_dict())
    else:
        terminal.print_lint(report.to_dict())
    if report.exit_code:
        raise typer.Exit(report.exit_code)


# Commands that live in their own modules register below (one line each).


@app.command()
def quantize(
    model: Annotated[Path, typer.Argument(help="deploykit.yaml or model.onnx")],
    output: opt.Out = None,
    precision: opt.QuantPrecisionOpt = None,
    target: opt.TargetOpt = None,
    calib_data: Annotated[
        Optional[Path], typer.Option("--calib-data", help="Folder of images or .npy/.npz files.")
    ] = None,
    method: opt.MethodOpt = None,
    auto_repair: opt.AutoRepair = False,
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    rerun: opt.Rerun = None,
    dim: opt.Dims = None,
    shapes: opt.Shapes = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Quantize (INT8/FP8/FP16): Q/DQ ONNX, ranges, TensorRT cache and precision report; -o copies them to a folder."""
    from deploykit import api

    flags = opt.overrides(
        **{
            "quantize.precision": precision,
            "quantize.target": target,
            "quantize.method": method,
            "quantize.repair.enabled": True if auto_repair else None,
        }
    )
    try:
        result = api.quantize(
            model,
            calib_data=calib_data,
            workdir=workdir,
            rerun=tuple(rerun or ()),
            dims=parse_dims(dim),
            shapes=opt.shape_profiles(shapes, None, None, None),
            reporter=_reporter(log_format),
            overrides=parse_sets(set_) | flags,
        )
    except DeployKitError as e:
        if getattr(e, "result", None) is not None:
            _show(e.result.record, log_format)  # type: ignore[attr-defined]
        raise
    from deploykit.stages.quantize import QuantizeSummary

    _show(result.record, log_format, details=_quantize_lines(QuantizeSummary.of(result.artifacts["model"])))
    if output is not None:
        import shutil

        shutil.copytree(result.artifacts["model"].path, output, dirs_exist_ok=True)
        typer.echo(f"wrote {output}", err=_STATE["json"])


def _sample_counts(s: Any) -> str:
    """'ranges from 48 of 64 samples, checked on 16 held out' (or on samples the ranges saw, if few)."""
    if not s.samples:
        return "no calibration data"
    held = "held out" if s.range_samples < s.samples else "the ranges also saw"
    return f"ranges from {s.range_samples} of {s.samples} samples, checked on {s.check_samples} {held}"


def _quantize_lines(s: Any) -> list[str]:
    """The quantize stage's summary (a ``QuantizeSummary``) in a few lines."""
    lines = [
        f"  {s.precision} for {s.flavour}, {s.method} calibration, {s.quantized_nodes} nodes quantized; "
        f"{_sample_counts(s)}"
    ]
    for name, m in (s.check.metrics if s.check else {}).items():
        lines.append(f"  {name}: rel-L2 {m['rel_l2']:.4g}, cosine {m['cosine']:.6f} ({s.evaluator})")
    if s.excluded or s.kept_fp32:
        lines.append(
            f"  kept out of quantization: {', '.join(s.excluded) or '-'}; kept FP32: {', '.join(s.kept_fp32) or '-'}"
        )
    if s.cpu_speed:
        speed = s.cpu_speed
        lines.append(
            f"  CPU: FP32 {speed.fp32_ms:.3f} ms, {s.precision.upper()} {speed.quantized_ms:.3f} ms "
            f"at batch {speed.batch} ({speed.speedup:.2f}x; {speed.speedup_low:.2f}-"
            f"{speed.speedup_high:.2f}x over {speed.rounds} interleaved rounds)"
        )
    if s.repair:
        search = s.repair
        raised = ", ".join(f"{g} {p}" for g, p in search.layer_precisions.items()) or "-"
        ev = search.evaluations
        lines.append(
            f"  mixed-precision search: {ev.get('fresh', 0)} evaluation(s) run, {ev.get('cached', 0)} reused; "
            f"raised {raised} ({search.stopped})"
        )
    return lines + [f"  note: {n}" for n in s.notes]


@app.command()
def profile(
    source: Annotated[Path, typer.Argument(help="deploykit.yaml, model.onnx, or an engine folder (build -o DIR)")],
    workdir: opt.Workdir = Path(".deploykit"),
    set_: opt.Sets = None,
    backend: opt.BackendOpt = None,
    dim: opt.Dims = None,
    batch: Annotated[Optional[int], typer.Option(help="Batch to profile at (default: the opt shape).")] = None,
    iterations: Annotated[int, typer.Option(help="Profiled runs (a layer's time is its median).")] = 50,
    warmup: Annotated[int, typer.Option(help="Runs before profiling starts.")] = 10,
    top: Annotated[int, typer.Option(help="How many of the slowest layers to list.")] = 10,
    roofline: Annotated[bool, typer.Option(help="Add the roofline columns (peaks measured once, cached).")] = True,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Write profile.json, .md and .html here.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile as JSON.")] = False,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Per-layer time from the backend's own profiler, by node and op type, with FLOPs, bytes and the roofline."""
    from deploykit import api
    from deploykit.profiling import ProfileOptions

    with thirdparty.logged_to(workdir):  # the backend's own output goes to the workdir's log
        report = api.profile(
            source,
            workdir=workdir,
            batch=batch,
            dims=parse_dims(dim),
            options=ProfileOptions(iterations=iterations, warmup=warmup, top=top, roofline=roofline),
            reporter=_reporter(log_format),
            overrides=parse_sets(set_) | opt.overrides(**{"build.backend": backend}),
        )
    if output is not None:
        from deploykit.profiling.summary import write_profile

        for path in write_profile(report, output):
            typer.echo(f"wrote {path}", err=True)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        _print_profile(report)


def _print_profile(report: dict[str, Any]) -> None:
    from rich.markup import escape

    from deploykit.report import terminal

    table = terminal.table(
        f"profile: {report.get('model', '')} ({report['backend']}, batch {report.get('batch', '?')})",
        ["layer", "op", "prec", "ms", "share", "GFLOP/s", "GB/s", "of roof", "bound"],
    )
    for r in report["layers"][: report["top_n"]]:
        table.add_row(
            escape(r["name"]),
            escape(r["op_type"]),
            r["precision"] or "?",
            f"{r['ms']:.4f}",
            f"{r['share']:.1%}",
            f"{r['achieved_flops'] / 1e9:.2f}",
            f"{r['achieved_bandwidth'] / 1e9:.2f}",
            f"{r['of_roofline']:.0%}" if "of_roofline" in r else "-",
            r.get("bound", "-"),
        )
    console = terminal.console()
    terminal.print_table(console, table)
    floor = (
        f"; roofline floor {report['floor_ms']:.3f} ms ({report['of_floor']:.0%} of it)"
        if "floor_ms" in report
        else f"; no roofline: {report.get('roofline_note', '')}"
    )
    console.print(
        f"sum of layer times {report['total_ms']:.3f} ms over {report['layers_count']} layers{floor}",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def matrix(
    file: Annotated[Path, typer.Argument(help="matrix.yaml: models x precisions x targets")],
    ray: Annotated[
        Optional[str], typer.Option("--ray", help="local | auto | ray://HOST:10001 (default: a local process pool)")
    ] = None,
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", help="Local pool size (default: the cores).")] = None,
    workdir: Annotated[
        Optional[Path],
        typer.Option(
            "--workdir", "-w", help="The driver's artifact store (default: the file's store, else .deploykit)."
        ),
    ] = None,
    report_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--report-dir", help="Where matrix.json, junit.xml, summary.md go (default: reports/<file name>)."
        ),
    ] = None,
    set_: opt.Sets = None,
    rerun: opt.Rerun = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Run models x precisions x targets; shared stages run once; exit non-zero if any cell fails."""
    from deploykit.matrix import run_matrix
    from deploykit.matrix.table import JsonView, LiveView

    overrides = parse_sets(set_)
    folder = report_dir or Path("reports") / file.stem
    kwargs = {"ray": ray, "jobs": jobs, "workdir": workdir, "report_dir": folder, "rerun": tuple(rerun or ())}
    if log_format == "json":
        result = run_matrix(file, view=JsonView(), overrides=overrides, **kwargs)
    else:
        from rich.console import Console

        console = Console()
        console = console if console.is_terminal else Console(width=200)  # a CI log: one line per cell
        with LiveView(console) as view:
            result = run_matrix(file, view=view, overrides=overrides, **kwargs)
    typer.echo(f"report: {', '.join(str(p) for p in result.report_files)}", err=True)
    if result.interrupted:
        done = sum(c.status not in ("interrupted", "waiting") for c in result.cells)
        typer.echo(
            f"interrupted: {done} of {len(result.cells)} cells finished and are kept; rerun to continue", err=True
        )
        raise KeyboardInterrupt
    if result.exit_code:
        bad = [c for c in result.cells if c.exit_code]
        raise _MATRIX_ERRORS.get(result.exit_code, InternalError)(
            f"{len(bad)} of {len(result.cells)} cells did not pass; first: {bad[0].id}: {bad[0].status}"
            + (f" ({bad[0].error.splitlines()[0]})" if bad[0].error else ""),
            hint=f"see {folder / 'summary.md'}",
        )


@app.command()
def stack(
    file: Annotated[Path, typer.Argument(help="stack.yaml: models with rates, deadlines and chains")],
    workdir: opt.Workdir = Path(".deploykit"),
    duration: Annotated[
        Optional[float],
        typer.Option("--duration", help="Seconds with every model together (sets duration_s; a soak when long)."),
    ] = None,
    alone: Annotated[
        Optional[float], typer.Option("--alone", help="Seconds each model runs alone first (sets alone_s; 0 skips).")
    ] = None,
    report_dir: Annotated[
        Optional[Path], typer.Option("--report-dir", help="Write stack.json, junit.xml, summary.md, report.html here.")
    ] = None,
    trace: opt.Trace = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Run several models together on one device at their rates; per model: rate, latency, deadline misses,
    slow-down vs alone; per chain: end to end."""
    from deploykit.errors import TargetMissed
    from deploykit.stack import views
    from deploykit.stack.run import run_stack

    with _tracing(trace):
        result = run_stack(file, workdir=workdir, duration_s=duration, alone_s=alone, report_dir=report_dir)
    if log_format == "json":
        typer.echo(views.to_json(result), nl=False)
    else:
        for line in views.verdict_lines(result):
            typer.echo(line)
    if report_dir is not None:
        typer.echo(f"report: {report_dir}", err=True)
    if result.failed_checks:
        first = result.failed_checks[0]
        raise TargetMissed(
            f"stack failed: {first.message}",
            hint=f"see {report_dir / 'summary.md'}" if report_dir else "--report-dir DIR writes the reports",
        )


def _matrix_errors() -> dict[int, type[DeployKitError]]:
    from deploykit import errors

    return {
        e.exit_code: e
        for e in (
            errors.GateFailed,
            errors.UsageError,
            errors.EnvironmentProblem,
            errors.InvalidInput,
            errors.InternalError,
        )
    }


_MATRIX_ERRORS = _matrix_errors()


@app.command()
def doctor(
    plugins: Annotated[Optional[list[str]], typer.Option("--plugins", help="Plugin library to check.")] = None,
    as_json: opt.Json = False,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Report what this machine can do: ONNX Runtime providers, TensorRT, CUDA, GPUs, plugin libraries."""
    from rich.markup import escape

    from deploykit.cli import doctor as doctor_module
    from deploykit.report import terminal

    report = doctor_module.collect(plugin_paths=plugins or ())
    if ending.json_output(log_format, as_json):
        ending.emit_json(json.loads(report.to_json()))
        return
    table = terminal.table("deploykit doctor", ["component", "status", "detail"])
    colour = {"ok": "green", "warn": "yellow", "missing": "red"}
    for row in report.rows:
        table.add_row(escape(row.component), f"[{colour.get(row.status, 'white')}]{row.status}[/]", escape(row.detail))
    terminal.print_table(terminal.console(), table)


app.add_typer(plugins_cli.app, name="plugins")
app.command("inspect")(inspect_cli.command)


@app.command()
def report(
    run: Annotated[
        str,
        typer.Argument(
            help="A run name (the config's name), a record identity "
            "(name.precision.backend[.flavour]) or an artifact digest."
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
    workdir: opt.Workdir = Path(".deploykit"),
    precision: opt.PrecisionOpt = None,
    backend: opt.BackendOpt = None,
    plots: Annotated[bool, typer.Option(help="Embed plots (needs matplotlib).")] = True,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Write one self-contained HTML report: verdicts, stages, lineage, parity, latency, platform and tools."""
    from deploykit.report import write_html
    from deploykit.stages import default_stages

    as_json = ending.json_output(log_format)
    path, note = write_html(
        workdir, run, output, default_stages(), with_plots=plots, precision=precision, backend=backend
    )
    if note:
        typer.echo(f"note: {note}", err=True)
    if as_json:
        ending.emit_json({"wrote": str(path), "note": note})
    else:
        typer.echo(f"wrote {path}")


@config_app.command("show")
def config_show(
    config: Annotated[
        Path, typer.Argument(help="deploykit.yaml, or an .onnx file (the config deploykit makes for it)")
    ],
    set_: opt.Sets = None,
    dim: opt.Dims = None,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Print the fully resolved config (every default filled in)."""
    import yaml

    from deploykit.api import resolve_config
    from deploykit.api.args import config_raw

    as_json = ending.json_output(log_format)
    resolved = config_raw(resolve_config(config, parse_sets(set_), parse_dims(dim)))  # the file's keys, in order
    if as_json:
        ending.emit_json(resolved)
    else:
        typer.echo(yaml.safe_dump(resolved, sort_keys=False))


@artifacts_app.command("ls")
def artifacts_ls(
    workdir: opt.Workdir = Path(".deploykit"), as_json: opt.Json = False, log_format: ending.LogFormatOpt = "human"
) -> None:
    """List artifacts, oldest first; one that does not verify is listed as corrupt (exit 4)."""
    from rich.markup import escape

    from deploykit.errors import ArtifactCorrupt
    from deploykit.report import terminal
    from deploykit.store.artifacts import Store

    with Store(workdir) as store:
        good, problems = store.scan()
    rows = [
        {
            "digest": a.digest,
            "kind": a.manifest.kind,
            "stage": a.manifest.stage,
            "created": a.manifest.created,
            "parents": dict(a.manifest.parents),
        }
        for a in good
    ]
    if ending.json_output(log_format, as_json):
        ending.emit_json(rows + [{"corrupt": line} for line in problems])
    else:
        table = terminal.table("", ["digest", "kind", "stage", "created", "parents"])
        for r in rows:
            table.add_row(
                r["digest"][:12],
                r["kind"],
                r["stage"],
                r["created"],
                " ".join(f"{role}:{d[:8]}" for role, d in r["parents"].items()),
            )
        for line in problems:
            table.add_row("[red]corrupt[/]", "", "", "", escape(line))
        terminal.print_table(terminal.console(), table)
    if problems:
        raise ArtifactCorrupt(
            f"{len(problems)} artifact(s) in {workdir} do not verify; first: {problems[0]}",
            hint="see `deploykit artifacts verify`; delete what it names and rerun",
        )


@artifacts_app.command("verify")
def artifacts_verify(workdir: opt.Workdir = Path(".deploykit"), log_format: ending.LogFormatOpt = "human") -> None:
    """Re-hash every object and check every manifest, recipe and run record (exit 4 on any problem)."""
    from deploykit.errors import ArtifactCorrupt
    from deploykit.record.collect import verify_records
    from deploykit.stages import default_stages
    from deploykit.store.artifacts import Store
    from deploykit.store.check import verify

    with Store(workdir) as store:
        report = verify(store)
        n_records, bad_records = verify_records(store, default_stages())
    report.problems += bad_records
    if ending.json_output(log_format):
        ending.emit_json(
            {
                "objects": report.objects,
                "recipes": report.recipes,
                "runs": report.runs,
                "records": n_records,
                "problems": report.problems,
                "ok": not report.problems,
            }
        )
    else:
        for line in report.problems:
            typer.echo(f"problem: {line}")
        typer.echo(
            f"checked {report.objects} objects, {report.recipes} recipes, {report.runs} runs, "
            f"{n_records} run records: {len(report.problems)} problem(s)"
        )
    if report.problems:
        raise ArtifactCorrupt(
            f"{workdir}: {len(report.problems)} problem(s); first: {report.problems[0]}",
            hint="delete what is named and rerun; `deploykit artifacts gc` removes unreferenced objects",
        )


@artifacts_app.command("gc")
def artifacts_gc(
    workdir: opt.Workdir = Path(".deploykit"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go; remove nothing.")] = False,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Remove objects no recipe or run names (parents of named ones are kept), and stale temporaries."""
    from deploykit.store.artifacts import Store
    from deploykit.store.check import gc

    as_json = ending.json_output(log_format)
    with Store(workdir) as store:
        report = gc(store, dry_run=dry_run)
    if as_json:
        from dataclasses import asdict

        ending.emit_json({"dry_run": dry_run, **asdict(report)})
        return
    verb = "would remove" if dry_run else "removed"
    for digest in report.removed_objects:
        typer.echo(f"{verb} object {digest}")
    typer.echo(
        f"{verb} {len(report.removed_objects)} unreferenced object(s), {len(report.removed_recipes)} "
        f"dangling recipe(s), {len(report.removed_temporaries)} stale temporary folder(s); kept {report.kept}"
    )


@artifacts_app.command("show")
def artifacts_show(
    digest: str, workdir: opt.Workdir = Path(".deploykit"), log_format: ending.LogFormatOpt = "human"
) -> None:
    """Print an artifact's manifest (verified against its files)."""
    from dataclasses import asdict

    from deploykit.store.artifacts import Store

    ending.json_output(log_format)  # the manifest is printed as JSON either way
    with Store(workdir) as store:
        artifact = store.get(digest)
    ending.emit_json({"path": str(artifact.path), **asdict(artifact.manifest)}, sort_keys=True)


@artifacts_app.command("lineage")
def artifacts_lineage(
    digest: str,
    workdir: opt.Workdir = Path(".deploykit"),
    as_json: opt.Json = False,
    log_format: ending.LogFormatOpt = "human",
) -> None:
    """Print the chain of artifacts an artifact was made from."""
    from deploykit.store.artifacts import Store

    store = Store(workdir)  # closed when the command returns (the process ends)
    rows: list[dict[str, Any]] = []

    def walk(d: str, role: str, depth: int) -> None:
        a = store.get(d)
        rows.append(
            {
                "depth": depth,
                "role": role,
                "digest": a.digest,
                "kind": a.kind,
                "stage": a.manifest.stage,
                "version": a.manifest.stage_version,
                "created": a.manifest.created,
            }
        )
        for r, parent in sorted(a.manifest.parents.items()):
            walk(parent, r, depth + 1)

    as_json = ending.json_output(log_format, as_json)
    walk(digest, "", 0)
    if as_json:
        ending.emit_json(rows)
        return
    for r in rows:
        typer.echo(
            f"{'  ' * r['depth']}{r['role'] + ': ' if r['role'] else ''}{r['digest'][:12]} {r['kind']} "
            f"(stage {r['stage']} v{r['version']}, {r['created']})"
        )


def main() -> None:
    """Entry point: map every failure class to its exit code and one clear line (JSON with --log-format
    json); never a traceback, and (supervised) never a signal or a hang either."""
    from deploykit.safety import supervise

    _STATE["json"] = opt.wants_json(sys.argv[1:])
    if supervise.wanted():
        supervise.run(_main, json_errors=_STATE["json"])
    _main()


def _main() -> None:
    from deploykit.config.surface import command_line

    _quiet_hooks()
    _wide_help_when_piped()
    try:
        with command_line():  # messages name flags (--dim), not the API's parameters (dims=)
            code = app(standalone_mode=False)  # typer turns Ctrl-C into Exit(130) and returns its code here
    except DeployKitError as e:
        _fail(e)
    except (typer.Abort, KeyboardInterrupt):
        _fail(UsageError("interrupted"), code=130)
    except Exception as e:  # the parser's own usage errors first, then the machine, then genuine bugs
        if isinstance(e, typer.TyperException) and type(e).__name__ == "NoArgsIsHelpError":
            typer.echo(e.ctx.get_help())  # type: ignore[attr-defined]  # bare `deploykit`: the help, exit 2
            sys.exit(UsageError.exit_code)
        _fail(_last_resort(e))
    sys.exit(code if isinstance(code, int) else 0)


def _last_resort(e: Exception) -> DeployKitError:
    """The DeployKitError an exception that reached the top stands for."""
    from deploykit.errors import EnvironmentProblem, disk_full, first_line, is_disk_full

    # typer >= 0.29 vendors click: its ClickException derives from typer.TyperException, and
    # `import click` fails on a fresh install.
    if isinstance(e, typer.TyperException) and hasattr(e, "format_message"):
        return opt.usage_error(e)
    if is_disk_full(e):
        return disk_full(e)
    if isinstance(e, MemoryError):
        return EnvironmentProblem("out of memory", hint="free memory, or lower the dims, batches or sample counts")
    if isinstance(e, OSError) and e.filename:  # e.g. an --output folder that cannot be written
        return EnvironmentProblem(
            f"{e.filename}: {e.strerror or type(e).__name__}", hint="check the path and its permissions"
        )
    if os.environ.get("DEPLOYKIT_DEBUG"):
        raise e
    return InternalError(
        f"internal error: {type(e).__name__}: {first_line(e)}",
        hint="rerun with DEPLOYKIT_DEBUG=1 for the traceback and report it",
    )


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


def _wide_help_when_piped() -> None:
    """``--help`` in a CI log or a pipe is not cut at 80 columns mid-choice (typer's TERMINAL_WIDTH)."""
    from typer import rich_utils

    if getattr(rich_utils, "MAX_WIDTH", 0) is None and not sys.stdout.isatty():
        rich_utils.MAX_WIDTH = 160


def _fail(e: DeployKitError, code: int | None = None) -> None:
    code = e.exit_code if code is None else code
    if type(e) is UsageError and not e.hint and e.message.startswith("--"):  # a flag's value: say where help is
        command = next((a for a in sys.argv[1:2] if not a.startswith("-")), "")
        e.hint = f"see `deploykit {command + ' ' if command else ''}--help`"
    with contextlib.suppress(Exception):
        if _STATE["json"]:
            error = {"error": e.message, "hint": e.hint, "exit_code": code, "kind": type(e).__name__}
            sys.stderr.write(json.dumps({"event": "error", **error}) + "\n")
            if not _STATE["result_printed"]:  # stdout always ends with one result object
                sys.stdout.write(json.dumps({"schema": "deploykit.error/1", **error}) + "\n")
        else:
            from rich.markup import escape

            from deploykit.report.terminal import console

            out = console(stderr=True)  # messages quote shapes and extras like [tensorrt]: never read them as markup
            out.print(f"[bold red]error:[/] {escape(e.message)}", highlight=False, soft_wrap=True)
            if e.hint:
                out.print(f"[yellow]hint:[/] {escape(e.hint)}", highlight=False, soft_wrap=True)
    sys.exit(code)
