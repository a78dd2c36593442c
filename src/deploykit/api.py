"""The Python API: ``convert`` runs every stage; ``export`` ... ``gate`` run up to one stage.

Each takes a ``deploykit.yaml`` path, a :class:`Config`, or an ``.onnx`` file (then the inputs come
from the model, with dynamic dims set by ``dims={"batch": (1, 1, 8)}``), plus dotted overrides
written with double underscores: ``convert("deploykit.yaml", gate__iterations=50)``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from deploykit.artifacts import Store
from deploykit.config import Config, config_from_dict, load_config
from deploykit.errors import ConfigError, ModelError, UsageError
from deploykit.progress import Reporter
from deploykit.result import RunResult

DEFAULT_WORKDIR = ".deploykit"
REPORT_FILES = {"parity": ["parity.json"], "gate": ["gate.json", "junit.xml", "summary.md"]}


def resolve_config(source: str | Path | Config, overrides: dict[str, Any] | None = None,
                   dims: dict[str, tuple[int, int, int]] | None = None) -> Config:
    """A validated Config from a YAML path, an ONNX path, or a Config (overrides applied)."""
    overrides = overrides or {}
    if isinstance(source, Config):
        if overrides:
            raise UsageError("overrides apply to a config file; change the Config object with dataclasses.replace")
        return source
    path = Path(source)
    if path.suffix == ".onnx":
        from deploykit.config import apply_overrides
        from deploykit.onnxio import load_model

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
            dims: dict[str, tuple[int, int, int]] | None = None, **overrides: Any) -> RunResult:
    """Run the pipeline; return the result, or raise (GateFailed and others carry ``.result``).

    Args:
        source: a deploykit.yaml path, an .onnx path, or a Config.
        workdir: the artifact store; reruns reuse what it holds.
        until: stop after this stage.
        rerun: stages to run even when their artifact exists.
        report_dir: where to copy parity/gate reports (JSON, JUnit XML, Markdown).
        reporter: progress and events (silent by default).
        dims: min/opt/max for an ONNX source's dynamic dims.
        **overrides: config fields, dots written as ``__`` (``gate__iterations=50``).
    """
    from deploykit.pipeline import run_pipeline
    from deploykit.stages import default_stages

    config = resolve_config(source, {k.replace("__", "."): v for k, v in overrides.items()}, dims)
    if report_dir is not None:
        _check_report_dir(Path(report_dir))
    with Store(workdir) as store, store.tempdir():  # every temporary of the run lives in the store
        try:
            result = run_pipeline(config, store, default_stages(), reporter=reporter, until=until, rerun=rerun)
        except Exception as e:
            if report_dir is not None and getattr(e, "result", None) is not None:
                copy_reports(e.result, Path(report_dir))  # type: ignore[attr-defined]
            raise
    if report_dir is not None:
        copy_reports(result, Path(report_dir))
    return result


def _check_report_dir(report_dir: Path) -> None:
    """Refuse a report folder that cannot be one before any stage runs."""
    for p in (report_dir, *report_dir.parents):
        if p.exists():
            if not p.is_dir():
                raise UsageError(f"--report-dir {report_dir}: {p} is a file, not a folder",
                                 hint="give a folder (it is created when missing)")
            return


def copy_reports(result: RunResult, report_dir: Path) -> list[Path]:
    """Copy the run's reports to a stable folder CI can pick up."""
    from deploykit.errors import os_error

    written = []
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        for role, names in REPORT_FILES.items():
            artifact = result.artifacts.get(role)
            for name in names if artifact else ():
                shutil.copyfile(artifact.file(name), report_dir / name)
                written.append(report_dir / name)
    except OSError as e:
        raise os_error(e, report_dir, "write the reports") from e
    return written


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
             dims: dict[str, tuple[int, int, int]] | None = None, **overrides: Any) -> RunResult:
    """Run the pipeline up to and including the quantize stage; the artifact is ``result.artifacts["model"]``.

    Args:
        source: a deploykit.yaml path, an .onnx path, or a Config.
        calib_data: a folder of images or .npy/.npz files, or one such file (sets ``calibration``).
        workdir: the artifact store.
        rerun: stages to run even when their artifact exists.
        reporter: progress and events (silent by default).
        dims: min/opt/max for an ONNX source's dynamic dims.
        **overrides: config fields, dots written as ``__`` (``quantize__precision="int8"``).
    """
    config = _quantize_config(source, {k.replace("__", "."): v for k, v in overrides.items()}, dims, calib_data)
    return convert(config, workdir=workdir, until="quantize", rerun=rerun, reporter=reporter)


def _quantize_config(source: str | Path | Config, overrides: dict[str, Any], dims: Any, calib_data: Any) -> Config:
    if calib_data is not None:
        from deploykit.config import apply_overrides
        from deploykit.quant.calib_source import calibration_section

        calib = {k: v for k, v in overrides.items() if k.startswith("calibration.")}
        rest = {k: v for k, v in overrides.items() if k not in calib}
        section = calibration_section(Path(calib_data), resolve_config(source, rest, dims))
        overrides = {**rest, "calibration": apply_overrides({"calibration": section}, calib)["calibration"]}
    config = resolve_config(source, overrides, dims)
    if not config.quantize.enabled:
        raise UsageError("quantize needs a precision: the config says quantize.precision fp32",
                         hint="pass --precision int8 (or fp16, fp8, int4)")
    return config
