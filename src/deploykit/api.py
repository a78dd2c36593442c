"""The Python API: ``convert`` runs every stage; ``export`` ... ``gate`` run up to one stage.

Each takes a ``deploykit.yaml`` path, a :class:`Config`, or an ``.onnx`` file (then the inputs come
from the model, with dynamic dims set by ``dims={"batch": (1, 1, 8)}``), plus config overrides: a
mapping of dotted fields, ``overrides={"gate.iterations": 50}`` (what ``--set`` gives the CLI), or
the same as keywords with double underscores, ``convert("deploykit.yaml", gate__iterations=50)``.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploykit.artifacts import Store
from deploykit.choices import Precision, listed
from deploykit.config import Config, config_from_dict, load_config
from deploykit.config_load import merged_overrides
from deploykit.errors import ConfigError, DeployKitError, ModelError, UsageError
from deploykit.progress import Reporter
from deploykit.result import RunResult

DEFAULT_WORKDIR = ".deploykit"


Shapes = dict[str, dict[str, tuple[int, ...]]]  # input -> {"min" | "opt" | "max": shape}


def resolve_config(source: str | Path | Config, overrides: dict[str, Any] | None = None,
                   dims: dict[str, tuple[int, int, int]] | None = None, shapes: Shapes | None = None) -> Config:
    """A validated Config from a YAML path, an ONNX path, or a Config (overrides applied).

    ``shapes`` (trtexec's ``--shapes``/``--min-shapes``...) set the named dims of each input's shape.
    """
    overrides = overrides or {}
    if isinstance(source, Config):
        if overrides or shapes:
            raise UsageError("overrides apply to a config file; change the Config object with dataclasses.replace")
        return source
    if shapes:
        found = shape_dims(_resolve(source, overrides, dims), shapes)
        if Path(source).suffix == ".onnx":
            return _resolve(source, overrides, {**(dims or {}), **found})
        return _resolve(source, {**overrides, **{f"dims.{d}": dict(zip(("min", "opt", "max"), v, strict=True))
                                                  for d, v in found.items()}}, dims)
    return _resolve(source, overrides, dims)


def shape_dims(config: Config, shapes: Shapes) -> dict[str, tuple[int, int, int]]:
    """The (min, opt, max) of every named dim the given input shapes fix; fixed axes must agree."""
    specs = {s.name: s for s in config.inputs}
    got: dict[str, dict[str, int]] = {}
    for name, by_which in shapes.items():
        spec = specs.get(name)
        if spec is None:
            raise UsageError(f"--shapes {name}: no input named {name!r}; the inputs are {', '.join(specs)}")
        for which, shape in by_which.items():
            text = f"{name}:{'x'.join(map(str, shape))}"
            if len(shape) != len(spec.shape):
                raise UsageError(f"--{which}-shapes {text}: input {name!r} has {len(spec.shape)} axes "
                                 f"({list(spec.shape)})")
            for axis, (want, dim) in enumerate(zip(shape, spec.shape, strict=True)):
                if isinstance(dim, int) and dim != want:
                    raise UsageError(f"--shapes {text}: axis {axis} of {name!r} is fixed at {dim}",
                                     hint="only named (dynamic) dims can change; see `deploykit config show`")
                if isinstance(dim, str):
                    if got.setdefault(dim, {}).setdefault(which, want) != want:
                        raise UsageError(f"--shapes {text}: dim {dim!r} is {got[dim][which]} in another input")
    out = {}
    for dim, values in got.items():
        base = config.dims[dim]
        lo, opt, hi = (values.get(k, getattr(base, k)) for k in ("min", "opt", "max"))
        if not lo <= opt <= hi:
            raise UsageError(f"--shapes: dim {dim!r} would be min {lo}, opt {opt}, max {hi}",
                             hint="give --min-shapes, --opt-shapes and --max-shapes together, or --shapes alone")
        out[dim] = (lo, opt, hi)
    return out


def _resolve(source: str | Path, overrides: dict[str, Any], dims: dict[str, tuple[int, int, int]] | None) -> Config:
    path = Path(source)
    if path.suffix == ".onnx":
        from deploykit.config import apply_overrides
        from deploykit.graph.files import load_model

        raw = apply_overrides(onnx_config_dict(load_model(path, load_external=False), path, dims or {}), overrides)
        try:
            return config_from_dict(raw, Path.cwd())
        except ConfigError as e:
            raise ConfigError(f"{path}: {e.message}", hint=e.hint) from e
    return load_config(path, overrides)


def onnx_config_dict(model: Any, path: Path, dims: dict[str, tuple[int, int, int]]) -> dict[str, Any]:
    """A config for a bare ONNX file: inputs as the model declares them; unnamed dynamic dims get names."""
    from onnx import helper

    from deploykit.config_load import MAX_DIM
    from deploykit.onnxguard import check_io
    from deploykit.onnxio import NP_DTYPES

    check_io(model, path)
    inputs, used = [], {}
    initializers = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        shape = []
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                if d.dim_value > MAX_DIM:
                    raise ModelError(f"{path}: input {vi.name!r} axis {axis} is fixed to {d.dim_value}, above "
                                     f"{MAX_DIM}", hint="re-export the model with sane dims")
                shape.append(d.dim_value)
                continue
            name = d.dim_param or f"{vi.name}_dim{axis}"
            lo, opt, hi = dims.get(name, (1, 1, 1))
            used[name] = {"min": lo, "opt": opt, "max": hi}
            shape.append(name)
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name
        if dtype not in NP_DTYPES:
            raise ModelError(f"{path}: input {vi.name!r} is a {dtype} tensor; deploykit feeds "
                             f"{', '.join(NP_DTYPES)}", hint="export the model with an input of one of those types")
        inputs.append({"name": vi.name, "shape": shape, "dtype": dtype})
    unknown = set(dims) - set(used)
    if unknown:
        raise UsageError(f"{path}: --dim names {', '.join(sorted(unknown))}, which the model does not have; "
                         f"its dynamic dims are: {', '.join(used) or 'none'}")
    return {"name": path.stem, "source": {"onnx": str(path.resolve())}, "inputs": inputs, "dims": used,
            "gate": {"allow_missing_target": True}}


def convert(source: str | Path | Config, *, workdir: str | Path = DEFAULT_WORKDIR, until: str | None = None,
            rerun: tuple[str, ...] = (), report_dir: str | Path | None = None, reporter: Reporter | None = None,
            dims: dict[str, tuple[int, int, int]] | None = None, shapes: Shapes | None = None,
            overrides: Mapping[str, Any] | None = None, **fields: Any) -> RunResult:
    """Run the pipeline; return the result, or raise (GateFailed and others carry ``.result``).

    Args:
        source: a deploykit.yaml path, an .onnx path, or a Config.
        workdir: the artifact store; reruns reuse what it holds.
        until: stop after this stage.
        rerun: stages to run even when their artifact exists.
        report_dir: where to copy parity/gate reports (JSON, JUnit XML, Markdown).
        reporter: progress and events (silent by default).
        dims: min/opt/max for an ONNX source's dynamic dims.
        shapes: input -> {"min"/"opt"/"max": shape}, setting the named dims those shapes fix.
        overrides: config fields by dotted name (``{"gate.iterations": 50}``).
        **fields: config fields, dots written as ``__`` (``gate__iterations=50``).
    """
    from deploykit.pipeline import run_pipeline
    from deploykit.stages import default_stages

    config = resolve_config(source, merged_overrides(overrides, fields), dims, shapes)
    if report_dir is not None:
        _check_report_dir(Path(report_dir))
    with Store(workdir) as store, store.tempdir():  # every temporary of the run lives in the store
        try:
            result = run_pipeline(config, store, default_stages(), reporter=reporter, until=until, rerun=rerun)
        except Exception as e:
            if isinstance(e, DeployKitError):
                from deploykit.exporter_fallback import explain_with_other_exporter

                explain_with_other_exporter(e, config, store, default_stages())
            if report_dir is not None and getattr(e, "result", None) is not None:
                copy_reports(e.result, Path(report_dir))  # type: ignore[attr-defined]
            raise
    if report_dir is not None:
        copy_reports(result, Path(report_dir))
    return result


def matrix(source: str | Path, *, ray: str | None = None, jobs: int | None = None,
           workdir: str | Path | None = None, report_dir: str | Path | None = None, rerun: tuple[str, ...] = (),
           view: Any = None, overrides: Mapping[str, Any] | None = None, **fields: Any) -> Any:
    """Run a build matrix (models x precisions x targets); return a MatrixResult (a table, HTML in notebooks).

    See :func:`deploykit.matrix.run_matrix` for the arguments; ``deploykit.matrix(...)`` is the same call.
    """
    from deploykit.matrix import run_matrix

    return run_matrix(source, ray=ray, jobs=jobs, workdir=workdir, report_dir=report_dir, rerun=rerun, view=view,
                      overrides=overrides, **fields)


def _check_report_dir(report_dir: Path) -> None:
    """Refuse a report folder that cannot be one before any stage runs."""
    for p in (report_dir, *report_dir.parents):
        if p.exists():
            if not p.is_dir():
                raise UsageError(f"--report-dir {report_dir}: {p} is a file, not a folder",
                                 hint="give a folder (it is created when missing)")
            return


RECORD_FILES = ("run.json", "junit.xml", "summary.md")  # what --report-dir holds beside the stages' JSON reports


def copy_reports(result: RunResult, report_dir: Path) -> list[Path]:
    """Write the run's reports to a stable folder CI can pick up: each stage's JSON report (each stage
    names its own), and the run record as ``run.json``, ``junit.xml`` and ``summary.md``."""
    from deploykit.errors import os_error
    from deploykit.report import jsonio, junit, markdown
    from deploykit.stages import report_files

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


def write_report(ref: str, output: str | Path = "report.html", *, workdir: str | Path = DEFAULT_WORKDIR,
                 with_plots: bool = True, precision: str | None = None, backend: str | None = None) -> Path:
    """Write the HTML report of a run (its name or record identity) or an artifact (a digest) from the
    store; return its path. A name with several recorded runs gives the newest (or the one of
    ``precision`` / ``backend``); :func:`deploykit.report.write_html` also returns a note naming the others."""
    from deploykit.report import write_html
    from deploykit.stages import default_stages

    return write_html(workdir, ref, output, default_stages(), with_plots=with_plots, precision=precision,
                      backend=backend)[0]


def _stage_function(stage: str) -> Any:
    def run(source: str | Path | Config, **kwargs: Any) -> RunResult:
        return convert(source, until=stage, **kwargs)

    run.__name__ = stage
    run.__doc__ = f"Run the pipeline up to and including the {stage!r} stage (see :func:`convert`)."
    return run


export = _stage_function("export")
surgery = _stage_function("surgery")
build = _stage_function("build")
parity = _stage_function("parity")
gate = _stage_function("gate")


def quantize(source: str | Path | Config, *, calib_data: str | Path | None = None, workdir: str | Path = DEFAULT_WORKDIR,
             rerun: tuple[str, ...] = (), reporter: Reporter | None = None,
             dims: dict[str, tuple[int, int, int]] | None = None, shapes: Shapes | None = None,
             overrides: Mapping[str, Any] | None = None, **fields: Any) -> RunResult:
    """Run the pipeline up to and including the quantize stage; the artifact is ``result.artifacts["model"]``.

    Args:
        source: a deploykit.yaml path, an .onnx path, or a Config.
        calib_data: a folder of images or .npy/.npz files, or one such file (sets ``calibration``).
        workdir: the artifact store.
        rerun: stages to run even when their artifact exists.
        reporter: progress and events (silent by default).
        dims: min/opt/max for an ONNX source's dynamic dims.
        shapes: input -> {"min"/"opt"/"max": shape}, setting the named dims those shapes fix.
        overrides: config fields by dotted name (``{"quantize.precision": "int8"}``).
        **fields: config fields, dots written as ``__`` (``quantize__precision="int8"``).
    """
    config = _quantize_config(source, merged_overrides(overrides, fields), dims, calib_data, shapes)
    return convert(config, workdir=workdir, until="quantize", rerun=rerun, reporter=reporter)


def _quantize_config(source: str | Path | Config, overrides: dict[str, Any], dims: Any, calib_data: Any,
                     shapes: Shapes | None = None) -> Config:
    if calib_data is not None:
        from deploykit.config import apply_overrides
        from deploykit.quant.calib_source import calibration_section

        calib = {k: v for k, v in overrides.items() if k.startswith("calibration.")}
        rest = {k: v for k, v in overrides.items() if k not in calib}
        section = calibration_section(Path(calib_data), resolve_config(source, rest, dims, shapes))
        overrides = {**rest, "calibration": apply_overrides({"calibration": section}, calib)["calibration"]}
    config = resolve_config(source, overrides, dims, shapes)
    if not config.quantize.enabled:
        raise UsageError("quantize needs a precision: the config says quantize.precision fp32",
                         hint=f"pass --precision int8 ({listed(Precision, without=('fp32',))})")
    return config


def profile(source: str | Path | Config, *, workdir: str | Path = DEFAULT_WORKDIR, batch: int | None = None,
            dims: dict[str, tuple[int, int, int]] | None = None, options: Any = None, reporter: Reporter | None = None,
            overrides: Mapping[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
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

    from deploykit.onnxio import random_feeds
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
        return profile_engine(path, feeds, options, peaks_dir=peaks_dir, model=path.name,
                              source=str(path), batch=batch or 1)
    config = resolve_config(source, overrides, dims)
    if batch is not None:
        from deploykit.stages.gate import _check_batch  # the gate's own rule for a target's batch

        _check_batch(config, "--batch", batch)
    result = convert(config, workdir=workdir, until="build", reporter=reporter)
    engine = result.artifacts["engine"]
    feeds = random_feeds(config, "opt", np.random.default_rng(0), batch=batch)
    first = next(iter(feeds.values()))
    return profile_engine(engine.path, feeds, options, peaks_dir=peaks_dir, model=config.name,
                          source=str(source if path is None else path), engine=engine.digest,
                          batch=int(first.shape[0]) if first.ndim else 1)
