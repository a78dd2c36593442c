"""The Python API: ``convert`` runs every stage; ``export`` ... ``gate`` run up to one stage.

Each takes a ``deploykit.yaml`` path, a :class:`Config`, or an ``.onnx`` file (then the inputs come
from the model, with dynamic dims set by ``dims={"batch": (1, 1, 8)}``), plus config overrides: a
mapping of dotted fields, ``overrides={"gate.iterations": 50}`` (what ``--set`` gives the CLI), or
the same as keywords with double underscores, ``convert("deploykit.yaml", gate__iterations=50)``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from deploykit.api.args import PythonArgs, onnx_config_dict  # noqa: F401  (onnx_config_dict: used from here too)
from deploykit.choices import Precision, listed
from deploykit.config import Config
from deploykit.config.load import merged_overrides
from deploykit.config.surface import spelled
from deploykit.errors import DeployKitError, UsageError
from deploykit.pipeline.result import Report, RunResult
from deploykit.progress import Reporter
from deploykit.store.artifacts import Store

DEFAULT_WORKDIR = ".deploykit"
PRECISION_PARAM = "precision='int8'"


Shapes = dict[str, dict[str, tuple[int, ...]]]  # input -> {"min" | "opt" | "max": shape}


def resolve_config(
    source: Any,
    overrides: dict[str, Any] | None = None,
    dims: Mapping[str, Any] | None = None,
    shapes: Shapes | None = None,
    args: PythonArgs | None = None,
) -> Config:
    """A validated Config from any source the API takes (a YAML or ONNX path, a Config, a mapping, a
    ``torch.nn.Module`` or ``onnx.ModelProto``), with ``overrides`` and the named ``args`` applied.

    ``dims`` set named dims (an ONNX model's dynamic dims, a module's, or a config's); ``shapes``
    (trtexec's ``--shapes``/``--min-shapes``...) set the named dims of each input's shape.
    """
    from deploykit.api.args import DATA, data_fields, dim_fields, source_raw
    from deploykit.config import config_from_raw

    args = args or PythonArgs()
    base = source_raw(source, dims, args)
    named, spellings = args.fields(model_source=base.inputs_in_raw)
    fields = merged_overrides(overrides, {k.replace(".", "__"): v for k, v in named.items()})
    if dims and not base.dims_in_raw:
        fields |= dim_fields(dims, base.raw.get("dims") or {})
    # calibration.* / validation.* beside calibration= / validation= apply to the section those make
    given = [f"{what}." for what in DATA if getattr(args, what) is not None]
    of_data = {k: v for k, v in fields.items() if k.startswith(tuple(given))} if given else {}
    fields = {k: v for k, v in fields.items() if k not in of_data}
    config = config_from_raw(base.raw, fields, base.base_dir, base.where, spellings)
    if shapes:
        found = shape_dims(config, shapes)
        fields |= {f"dims.{d}": dict(zip(("min", "opt", "max"), v, strict=True)) for d, v in found.items()}
        config = config_from_raw(base.raw, fields, base.base_dir, base.where, spellings)
    data = data_fields(config, of_data, args)
    if data:
        config = config_from_raw(base.raw, {**fields, **data}, base.base_dir, base.where, spellings)
    return config


def shape_dims(config: Config, shapes: Shapes) -> dict[str, tuple[int, int, int]]:
    """The (min, opt, max) of every named dim the given input shapes fix; fixed axes must agree."""
    specs = {s.name: s for s in config.inputs}
    flag = spelled("shapes=", "--shapes")
    got: dict[str, dict[str, int]] = {}
    for name, by_which in shapes.items():
        spec = specs.get(name)
        if spec is None:
            raise UsageError(f"{flag} {name}: no input named {name!r}; the inputs are {', '.join(specs)}")
        for which, shape in by_which.items():
            text = f"{name}:{'x'.join(map(str, shape))}"
            if len(shape) != len(spec.shape):
                raise UsageError(
                    f"{spelled(f'shapes={{{name!r}: {{{which!r}: ...}}}}', f'--{which}-shapes')} "
                    f"{text}: input {name!r} has {len(spec.shape)} axes "
                    f"({list(spec.shape)})"
                )
            for axis, (want, dim) in enumerate(zip(shape, spec.shape, strict=True)):
                if isinstance(dim, int) and dim != want:
                    raise UsageError(
                        f"{flag} {text}: axis {axis} of {name!r} is fixed at {dim}",
                        hint="only named (dynamic) dims can change; see `deploykit config show`",
                    )
                if isinstance(dim, str):
                    if got.setdefault(dim, {}).setdefault(which, want) != want:
                        raise UsageError(f"{flag} {text}: dim {dim!r} is {got[dim][which]} in another input")
    out = {}
    for dim, values in got.items():
        base = config.dims[dim]
        lo, opt, hi = (values.get(k, getattr(base, k)) for k in ("min", "opt", "max"))
        if not lo <= opt <= hi:
            raise UsageError(
                f"{flag}: dim {dim!r} would be min {lo}, opt {opt}, max {hi}",
                hint=spelled(
                    "give min, opt and max together",
                    "give --min-shapes, --opt-shapes and --max-shapes together, or --shapes alone",
                ),
            )
        out[dim] = (lo, opt, hi)
    return out


def convert(
    source: Any,
    *,
    workdir: str | Path = DEFAULT_WORKDIR,
    until: str | None = None,
    rerun: tuple[str, ...] = (),
    report_dir: str | Path | None = None,
    reporter: Reporter | None = None,
    progress: bool | None = None,
    inputs: Any = None,
    dims: Mapping[str, Any] | None = None,
    shapes: Shapes | None = None,
    outputs: Any = None,
    name: str | None = None,
    precision: str | None = None,
    calibration: Any = None,
    validation: Any = None,
    tasks: Any = None,
    targets: Any = None,
    overrides: Mapping[str, Any] | None = None,
    **fields: Any,
) -> RunResult:
    """Run the pipeline; return the result, or raise (GateFailed and others carry ``.result``).

    Args:
        source: a deploykit.yaml path, an .onnx path, a Config, a mapping written as the YAML is, or a
            model object: a ``torch.nn.Module`` (give ``inputs``) or an ``onnx.ModelProto``. An object's
            artifacts are keyed by what it exports (the ONNX bytes and the weights' digest): a rerun with
            the same model reuses them.
        workdir: the artifact store; reruns reuse what it holds.
        until: stop after this stage.
        rerun: stages to run even when their artifact exists.
        report_dir: where to copy parity/gate reports (JSON, JUnit XML, Markdown).
        reporter: progress and events (default: chosen by ``progress``).
        progress: None shows progress where the user is (a notebook: a live block; a terminal: bars;
            otherwise, such as a CI log: a plain line per stage), False shows none.
        inputs: a module's inputs: ``{"images": (1, 3, 640, 640)}``, named dims
            ``{"images": ("batch", 3, 640, 640)}`` (with ``dims``), or example tensors/arrays.
        dims: named dims as (min, opt, max) or one size: ``{"batch": (1, 1, 8)}``.
        shapes: input -> {"min"/"opt"/"max": shape}, setting the named dims those shapes fix.
        outputs: names for a module's exported outputs.
        name: the run's name (default: the config's, or the module's class name).
        precision: ``quantize.precision`` (fp32, fp16, int8, fp8, int4).
        calibration: samples for quantization: an iterable of arrays or tensors (tuples or dicts for
            several inputs; a DataLoader's ``(images, labels)`` feeds the images), a DataLoader, one
            array stacked on its first axis, a folder or file path, or a section mapping as the YAML
            writes it. At most ``calibration.samples`` (64) are read.
        validation: samples parity compares on, in the same forms.
        tasks: ``parity.tasks``, as the YAML writes it (``{"classification": [{"output": "logits"}]}``).
        targets: ``gate.targets`` (``{"default": {"fps": 30}}``), or a number: the default FPS target.
        overrides: config fields by dotted name (``{"gate.iterations": 50}``).
        **fields: config fields, dots written as ``__`` (``gate__iterations=50``).
    """
    args = PythonArgs(
        inputs=inputs,
        outputs=outputs,
        name=name,
        precision=precision,
        calibration=calibration,
        validation=validation,
        tasks=tasks,
        targets=targets,
    )
    config = resolve_config(source, merged_overrides(overrides, fields), dims, shapes, args)
    if until == "quantize" and not config.quantize.enabled:
        raise UsageError(
            "quantize needs a precision: the config says quantize.precision fp32",
            hint=f"pass {spelled(PRECISION_PARAM, '--precision int8')} ({listed(Precision, without=('fp32',))})",
        )
    return _convert(config, workdir, until, rerun, report_dir, reporter, progress)


def _convert(
    config: Config,
    workdir: str | Path,
    until: str | None,
    rerun: tuple[str, ...],
    report_dir: str | Path | None,
    reporter: Reporter | None,
    progress: bool | None,
) -> RunResult:
    from deploykit.pipeline.runner import run_pipeline
    from deploykit.progress import reporting
    from deploykit.stages import default_stages

    if report_dir is not None:
        _check_report_dir(Path(report_dir))
    with reporting(reporter, progress) as shown, _eval_mode(config), Store(workdir) as store, store.tempdir():
        try:  # every temporary of the run lives in the store
            result = run_pipeline(config, store, default_stages(), reporter=shown, until=until, rerun=rerun)
        except Exception as e:
            if isinstance(e, DeployKitError):
                from deploykit.pipeline.fallback import explain_with_other_exporter

                explain_with_other_exporter(e, config, store, default_stages())
            if report_dir is not None and getattr(e, "result", None) is not None:
                copy_reports(e.result, Path(report_dir))  # type: ignore[attr-defined]
            raise
    if report_dir is not None:
        copy_reports(result, Path(report_dir))
    return result


@contextlib.contextmanager
def _eval_mode(config: Config) -> Iterator[None]:
    """A module passed in memory runs in eval mode for the run (export, torch reference), then gets
    its own mode back: the notebook may go on training it."""
    memory = config.source.memory
    if memory is None or memory.kind != "torch":
        yield
        return
    module = memory.object
    training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(training)


def matrix(
    source: str | Path,
    *,
    ray: str | None = None,
    jobs: int | None = None,
    workdir: str | Path | None = None,
    report_dir: str | Path | None = None,
    rerun: tuple[str, ...] = (),
    view: Any = None,
    overrides: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Any:
    """Run a build matrix (models x precisions x targets); return a MatrixResult (a table, HTML in notebooks).

    See :func:`deploykit.matrix.run_matrix` for the arguments; ``deploykit.matrix(...)`` is the same call.
    """
    from deploykit.matrix import run_matrix

    return run_matrix(
        source,
        ray=ray,
        jobs=jobs,
        workdir=workdir,
        report_dir=report_dir,
        rerun=rerun,
        view=view,
        overrides=overrides,
        **fields,
    )


def _check_report_dir(report_dir: Path) -> None:
    """Refuse a report folder that cannot be one before any stage runs."""
    for p in (report_dir, *report_dir.parents):
        if p.exists():
            if not p.is_dir():
                raise UsageError(
                    f"{spelled('report_dir=', '--report-dir')} {report_dir}: {p} is a file, not a folder",
                    hint="give a folder (it is created when missing)",
                )
            return


RECORD_FILES = ("run.json", "junit.xml", "summary.md")  # what --report-dir holds beside the stages' JSON reports


def copy_reports(result: RunResult, report_dir: Path) -> list[Path]:
    """Write the run's reports to a stable folder CI can pick up: each stage's JSON report (each stage
    names its own), and the run record as ``run.json``, ``junit.xml`` and ``summary.md``."""
    from deploykit.errors import os_error
    from deploykit.report import junit, markdown
    from deploykit.stages import report_files
    from deploykit.store import jsonio

    files = report_files()
    written = []
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        for record in result.stages:
            for name in files.get(record.stage, ()) if record.artifact else ():
                shutil.copyfile(record.artifact.file(name), report_dir / name)
                written.append(report_dir / name)
        rendered = (jsonio.dumps(result.record.to_dict()), junit.render(result.record), markdown.render(result.record))
        for name, text in zip(RECORD_FILES, rendered, strict=True):
            (report_dir / name).write_text(text, encoding="utf-8")
            written.append(report_dir / name)
    except OSError as e:
        raise os_error(e, report_dir, "write the reports") from e
    return written


def write_report(
    ref: str,
    output: str | Path = "report.html",
    *,
    workdir: str | Path = DEFAULT_WORKDIR,
    with_plots: bool = True,
    precision: str | None = None,
    backend: str | None = None,
) -> Path:
    """Write the HTML report of a run (its name or record identity) or an artifact (a digest) from the
    store; return its path. A name with several recorded runs gives the newest (or the one of
    ``precision`` / ``backend``); :func:`deploykit.report.write_html` also returns a note naming the others."""
    from deploykit.report import write_html
    from deploykit.stages import default_stages

    return write_html(
        workdir, ref, output, default_stages(), with_plots=with_plots, precision=precision, backend=backend
    )[0]


def report(
    run: RunResult | str,
    output: str | Path | None = None,
    *,
    workdir: str | Path = DEFAULT_WORKDIR,
    with_plots: bool = True,
    precision: str | None = None,
    backend: str | None = None,
) -> Report:
    """The HTML report of a run: shown inline in a notebook, written to ``output`` as one
    self-contained page when given (what ``deploykit report RUN -o report.html`` writes).

    Args:
        run: a :class:`RunResult`, or what ``deploykit report`` takes from the store at ``workdir``: a
            run name (the config's ``name``), a record identity (``name.precision.backend[.flavour]``)
            or an artifact digest.
        output: the HTML file to write (none: only rendered).
        workdir: the artifact store (for a name or digest).
        with_plots: embed plots (needs matplotlib; without it the page says so).
        precision: pick the run of this precision when the name has several.
        backend: pick the run of this backend when the name has several.
    """
    note = ""
    if isinstance(run, RunResult):
        record = run.record
    elif isinstance(run, str):
        from deploykit.record.collect import from_store
        from deploykit.stages import default_stages

        record, note = from_store(str(workdir), run, default_stages(), precision=precision, backend=backend)
    else:
        raise UsageError(
            f"report: expected a RunResult or a run name, got {type(run).__name__}",
            hint="pass what deploykit.convert returned, or the config's name",
        )
    path = None
    if output is not None:
        from deploykit.errors import os_error
        from deploykit.report.html import render_page

        path = Path(output)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render_page(record, with_plots), encoding="utf-8")
        except OSError as e:
            raise os_error(e, path, "write the report") from e
    return Report(record, with_plots, path, note)


def save_tensors(
    result: RunResult, *, inputs: str | Path | None = None, outputs: str | Path | None = None
) -> list[Path]:
    """Write the samples a run's parity compared on (``inputs``) and what each side computed on them
    (``outputs``: the candidate, the FP32 ONNX and torch), as .npz or .json (see :mod:`deploykit.data.feedfile`)."""
    from deploykit.data import feedfile
    from deploykit.progress import SilentReporter
    from deploykit.stages.base import StageContext
    from deploykit.stages.parity import runners
    from deploykit.stages.validation import parity_samples

    if result.config is None or "engine" not in result.artifacts:
        raise UsageError("save_tensors: the run did not build an engine", hint="run up to parity first")
    samples = list(parity_samples(result.config)[0])
    written = []
    if inputs is not None:
        written.append(feedfile.save_inputs(Path(inputs), samples))
    if outputs is not None:
        with Store(result.workdir) as store:
            run = runners(StageContext(result.config, store, SilentReporter()), result.artifacts)
            outs = {name: [infer(s) for s in samples] for name, infer in run.items()}
        written.append(feedfile.save_runs(Path(outputs), outs))
    return written


def compare(
    a: str | Path,
    b: str | Path,
    *,
    dims: Mapping[str, int] | None = None,
    samples: Any = None,
    count: int = 4,
    seed: int = 1,
    precision: str = "fp32",
    overrides: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Any:
    """Compare two models or engine folders on the same inputs (``deploykit parity A B``); A is the reference.

    Args:
        a: the reference: an .onnx file or an engine folder (``deploykit build -o DIR``).
        b: the candidate, the same.
        dims: sizes of A's named dims (default 1).
        samples: the inputs: a list of ``{input: array}``, or a .npz/.json file ``--save-inputs`` wrote
            (default: ``count`` random samples from ``seed``).
        count: random samples, when no ``samples`` are given.
        seed: of the random samples.
        precision: the tolerance preset B is judged by (fp32: strict; int8: rel-L2 0.1, cosine 0.995 ...).
        overrides: parity fields by dotted name: ``{"parity.default.atol": 1e-3, "parity.outputs.y.rtol": 1e-2}``.
        **fields: the same, dots written as ``__``.

    Returns:
        A :class:`deploykit.api.pair.PairResult` (``.record`` renders like a run's; ``.passed``).
    """
    from deploykit.api.pair import compare_pair
    from deploykit.config import ParityConfig, QuantizeConfig, apply_overrides, parity_preset
    from deploykit.config.typed import from_value
    from deploykit.data import feedfile

    fields_ = merged_overrides(overrides, fields)
    unknown = [k for k in fields_ if not k.startswith("parity.")]
    if unknown:
        raise UsageError(f"{unknown[0]}: only parity.* fields apply to a comparison of two models")
    parity = from_value(ParityConfig, apply_overrides({"parity": {}}, fields_)["parity"], "parity")
    preset = parity_preset(from_value(QuantizeConfig, {"precision": precision}, "precision"))
    if isinstance(samples, (str, Path)):
        samples = feedfile.load_inputs(Path(samples))
    return compare_pair(
        Path(a),
        Path(b),
        parity=parity,
        preset=preset,
        precision=precision,
        dims=dims,
        samples=samples,
        count=count,
        seed=seed,
    )


def _stage_function(stage: str) -> Any:
    def run(source: Any, **kwargs: Any) -> RunResult:
        return convert(source, until=stage, **kwargs)

    run.__name__ = stage
    run.__doc__ = f"Run the pipeline up to and including the {stage!r} stage (see :func:`convert`)."
    return run


export = _stage_function("export")
surgery = _stage_function("surgery")
build = _stage_function("build")
parity = _stage_function("parity")
gate = _stage_function("gate")


def quantize(source: Any, *, calib_data: str | Path | None = None, **kwargs: Any) -> RunResult:
    """Run the pipeline up to and including the quantize stage; the artifact is ``result.artifacts["model"]``.

    Takes what :func:`convert` takes (``precision="int8"``, ``calibration=`` samples ...); ``calib_data``
    is a folder of images or .npy/.npz files, or one such file (what ``--calib-data`` gives: the
    same as ``calibration=`` with a path).
    """
    if calib_data is not None:
        if kwargs.get("calibration") is not None:
            raise UsageError("quantize: give calib_data= or calibration=, not both")
        kwargs["calibration"] = calib_data
    return convert(source, until="quantize", **kwargs)


def profile(
    source: str | Path | Config,
    *,
    workdir: str | Path = DEFAULT_WORKDIR,
    batch: int | None = None,
    dims: dict[str, tuple[int, int, int]] | None = None,
    options: Any = None,
    reporter: Reporter | None = None,
    overrides: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """Per-layer profile of an engine, with the roofline columns (see :mod:`deploykit.profiling`).

    Args:
        source: an engine folder (``deploykit build -o DIR``), or what :func:`convert` takes (the pipeline
            then runs up to the build, reusing the store).
        workdir: the artifact store; this machine's measured peaks are cached in ``WORKDIR/peaks``.
        batch: the batch to profile at (default: the opt shape of the dims; 1 for an engine folder).
        dims: min/opt/max of named dims (an engine folder uses the opt values).
        options: a :class:`deploykit.profiling.ProfileOptions` (iterations, warm-up, top-N, roofline).
        reporter: progress and events of the build (silent by default).
        overrides: config fields by dotted name (``{"build.backend": "onnxruntime"}``).
        **fields: config fields, dots written as ``__``.

    Returns:
        The profile report (``schema`` ``deploykit.profile/1``).
    """
    import numpy as np

    from deploykit.graph.feeds import random_feeds
    from deploykit.profiling.peaks import CACHE_DIR
    from deploykit.profiling.run import ProfileOptions, engine_feeds, profile_engine

    options = options or ProfileOptions()
    overrides = merged_overrides(overrides, fields)
    path = Path(source) if not isinstance(source, Config) else None
    peaks_dir = Store(workdir).root / CACHE_DIR
    if path is not None and path.is_dir():
        if overrides:
            raise UsageError("config overrides do not apply to an engine folder")
        opt = {name: values[1] for name, values in (dims or {}).items()}
        feeds = engine_feeds(path, opt, batch=batch)  # a batch the engine cannot take is refused here
        return profile_engine(
            path, feeds, options, peaks_dir=peaks_dir, model=path.name, source=str(path), batch=batch or 1
        )
    config = resolve_config(source, overrides, dims)
    if batch is not None:
        from deploykit.stages.gate import check_batch  # the gate's own rule for a target's batch

        check_batch(config, "--batch", batch)
    result = convert(config, workdir=workdir, until="build", reporter=reporter)
    engine = result.artifacts["engine"]
    feeds = random_feeds(config, "opt", np.random.default_rng(0), batch=batch)
    first = next(iter(feeds.values()))
    return profile_engine(
        engine.path,
        feeds,
        options,
        peaks_dir=peaks_dir,
        model=config.name,
        source=str(source if path is None else path),
        engine=engine.digest,
        batch=int(first.shape[0]) if first.ndim else 1,
    )


def lint(
    source: str | Path | Config,
    *,
    versions: tuple[str, ...] | list[str] | None = None,
    plugins: tuple[str | Path, ...] | list[str | Path] | None = None,
    workdir: str | Path = DEFAULT_WORKDIR,
    dims: dict[str, tuple[int, int, int]] | None = None,
    shapes: Shapes | None = None,
    reporter: Reporter | None = None,
    overrides: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Any:
    """What TensorRT's parser and builder would refuse, without TensorRT (a :class:`deploykit.lint.LintReport`).

    An ``.onnx`` file is linted as it is, with the profiles ``convert`` would build it with (its dynamic
    dims from ``dims``/``shapes``, else 1). For a config, the graph is the one its TensorRT build would
    get: export, surgery and quantize run first (or are reused from ``workdir``), then the lint stage.

    Args:
        source: a deploykit.yaml path, an .onnx path, or a Config.
        versions: TensorRT versions (``"10.13"``, ``"11"``); default ``lint.versions`` (every supported one).
        plugins: plugin libraries TensorRT would load (default ``build.plugins``); read, never loaded.
        workdir: the artifact store (config sources).
        dims: min/opt/max for an ONNX source's dynamic dims.
        shapes: input -> {"min"/"opt"/"max": shape}, setting the named dims those shapes fix.
        reporter: progress and events of the stages (silent by default).
        overrides: config fields by dotted name.
        **fields: config fields, dots written as ``__``.
    """
    from deploykit.errors import GateFailed
    from deploykit.lint.findings import LintReport

    extra = merged_overrides(overrides, fields) | {"lint.run": "always"}
    if versions:
        extra["lint.versions"] = list(versions)
    if plugins:
        extra["build.plugins"] = [str(Path(p).resolve()) for p in plugins]
    if isinstance(source, Config) or Path(source).suffix != ".onnx":
        if isinstance(source, Config):
            raise UsageError("lint takes a deploykit.yaml or .onnx path (overrides apply to the file)")
        try:
            result = convert(
                source, workdir=workdir, until="lint", reporter=reporter, dims=dims, shapes=shapes, overrides=extra
            )
        except GateFailed as e:  # a failed lint (or quantize check) still wrote its report
            result = e.result  # type: ignore[attr-defined]
        artifact = result.artifacts.get("lint")
        if artifact is None:
            raise UsageError(f"{source}: the pipeline stopped before the lint", hint="see the stage table")
        return LintReport.from_dict(json.loads(artifact.file("lint.json").read_text()))
    return _lint_file(Path(source), resolve_config(source, extra, dims, shapes))


def _lint_file(path: Path, config: Config) -> Any:
    from deploykit.backends.base import profiles_from_config
    from deploykit.lint import LintOptions, lint_file

    options = LintOptions(
        versions=tuple(config.lint.versions),
        plugins=tuple(config.path(p) for p in config.build.plugins),
        profiles=profiles_from_config(config),
    )
    report = lint_file(path, options)
    fixed = [f"{d} = {v.min}" for d, v in config.dims.items() if v.min == v.max]
    if fixed:
        import dataclasses

        note = (
            f"the profile fixes {', '.join(fixed)} (the model's dynamic dims, as `deploykit build` would "
            "build them without --dim or --shapes)"
        )
        report = dataclasses.replace(report, notes=(*report.notes, note))
    return report
