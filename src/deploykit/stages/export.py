"""export: torch factory -> ONNX, checked against torch on random inputs."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.config import Config
from deploykit.errors import ModelError
from deploykit.graph.feeds import distinct_shapes, random_feeds
from deploykit.graph.files import save_model
from deploykit.graph.run import session_from_onnx
from deploykit.source import export_hooks
from deploykit.source.factory import build_model, run_torch, source_fingerprint, torch_name
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.store.artifacts import Artifact
from deploykit.store.environment import tool_versions
from deploykit.store.hashing import digest_file

MODEL = "model.onnx"


@dataclass(frozen=True)
class ExportCheck(Summary):
    """ONNX Runtime against torch at export: the worst difference, where it was."""

    evaluator: str = ""
    shapes: list[str] = field(default_factory=list)  # the distinct min/opt/max shapes checked
    samples: int = 0  # per shape
    max_abs: float = 0.0
    output: str = ""  # the output of the worst difference ("" when every output matched exactly)
    shape: str = ""  # min | opt | max


@dataclass(frozen=True)
class ExportSummary(Summary):
    exporter: str = ""  # the exporter that succeeded
    fallback_reason: str = ""  # why the ones tried before it failed ("" when the first worked)
    opset: int = 0
    nodes: int = 0
    check: ExportCheck = ExportCheck()


class ExportStage(Stage):
    name = "export"
    version = 1
    inputs: dict[str, str] = {}
    output_kind = "onnx"
    output_roles = ("reference", "model")
    summary_type = ExportSummary

    def applies(self, ctx: StageContext) -> bool:
        return ctx.config.source.is_torch

    def key_config(self, ctx: StageContext) -> Any:
        c = ctx.config
        source = source_fingerprint(c)
        if c.source.memory is not None:  # keyed by what it exports: its code is in no file to hash
            source = {**source, "onnx": _exported_in_memory(c)[3]}
        return {"source": source, "inputs": c.inputs, "dims": c.dims, "outputs": c.outputs, "export": c.export}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        # The plugin ops' export code shapes the ONNX of any model that uses them. Hash the files, not
        # the registered hooks: those exist only once the factory has run, and the key comes first.
        from deploykit.plugins import export_code_files

        return {
            "torch": tool_versions().get("torch", "absent"),
            "plugin_export_code": {f.name: digest_file(f) for f in export_code_files()},
        }

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> ExportSummary:
        cfg = ctx.config
        model = ctx.torch_model = build_model(cfg)  # parity's torch reference in this run: built once
        if cfg.source.memory is not None:
            exported, exporter, fallback_reason, _ = _exported_in_memory(cfg)
            onnx_model = type(exported)()
            onnx_model.CopyFrom(exported)  # the hooks below may edit it in place; the cached one stays
        else:
            onnx_model, exporter, fallback_reason = export_model(model, cfg)
        for hook in export_hooks.model_hooks():  # outside export_model: a hook's error is not an exporter's
            onnx_model = hook(onnx_model)
        save_model(onnx_model, out / MODEL)
        check = check_against_torch(model, cfg, out / MODEL)
        return ExportSummary(exporter, fallback_reason, cfg.export.opset, len(onnx_model.graph.node), check)


def _exported_in_memory(cfg: Config) -> tuple[Any, str, str, str]:
    """The in-memory module's export for this recipe (once per process), and its ONNX bytes' sha256."""
    from deploykit.store.hashing import digest_value

    recipe = digest_value({"inputs": cfg.inputs, "dims": cfg.dims, "outputs": cfg.outputs, "export": cfg.export})
    return cfg.source.memory.exported(recipe, lambda: export_model(build_model(cfg), cfg))  # type: ignore[union-attr]


def export_model(model: Any, cfg: Config) -> tuple[Any, str, str]:
    """Export with the configured exporter; ``auto`` tries dynamo, then TorchScript. Returns (model, exporter, why)."""
    order = {"auto": ["dynamo", "torchscript"], "dynamo": ["dynamo"], "torchscript": ["torchscript"]}[
        cfg.export.exporter
    ]
    errors: list[str] = []
    for exporter in order:
        try:
            return _export_with(model, cfg, exporter), exporter, "; ".join(errors)
        except Exception as e:  # each exporter fails in its own way; keep the first line of each
            errors.append(f"{exporter} exporter failed: {_cause(e)}")
    raise ModelError(
        f"{torch_name(cfg)}: export failed. " + " | ".join(errors),
        hint="try export.exporter: torchscript or dynamo, or simplify data-dependent code",
    )


def _export_with(model: Any, cfg: Config, exporter: str) -> Any:
    import onnx
    import torch

    example = _example_inputs(cfg)
    names = [s.name for s in cfg.inputs]
    outputs = list(cfg.outputs) or None
    buf = io.BytesIO()
    with _quiet_exporter(), torch.no_grad():
        if exporter == "dynamo":
            program = torch.onnx.export(
                model,
                example,
                dynamo=True,
                input_names=names,
                output_names=outputs,
                opset_version=cfg.export.opset,
                dynamic_shapes=_dynamo_shapes(cfg),
                external_data=False,
                verbose=False,
                custom_translation_table=export_hooks.dynamo_translations() or None,
            )
            return program.model_proto
        torch.onnx.export(
            model,
            example,
            buf,
            dynamo=False,
            input_names=names,
            output_names=outputs,
            opset_version=cfg.export.opset,
            dynamic_axes=_dynamic_axes(cfg) or None,
        )
    return onnx.load_model_from_string(buf.getvalue())


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporters print progress, warn about torchvision and log at DEBUG; keep our output readable."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "torch.fx")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        # stderr too: torch.export prints the whole traced graph there when it fails (27 kB for
        # the NMS detector), which `auto` then handles by falling back
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _example_inputs(cfg: Config) -> tuple[Any, ...]:
    import torch

    feeds = random_feeds(cfg, "opt", np.random.default_rng(cfg.export.seed))
    tensors = []
    for spec in cfg.inputs:
        arr = feeds[spec.name]
        # torch.export specialises dims of size 1; trace a dynamic dim at >= 2 when its range allows.
        shape = [
            max(arr.shape[i], min(2, cfg.dims[d].max)) if isinstance(d, str) else arr.shape[i]
            for i, d in enumerate(spec.shape)
        ]
        tensors.append(torch.from_numpy(np.resize(arr, shape)))
    return tuple(tensors)


def _dynamo_shapes(cfg: Config) -> tuple[dict[int, Any], ...] | None:
    from torch.export import Dim

    dims = {name: Dim(name, min=d.min, max=d.max) for name, d in cfg.dims.items() if d.max > d.min}
    shapes = tuple({i: dims[d] for i, d in enumerate(s.shape) if isinstance(d, str) and d in dims} for s in cfg.inputs)
    return shapes if any(shapes) else None


def _dynamic_axes(cfg: Config) -> dict[str, dict[int, str]]:
    return {
        s.name: {i: d for i, d in enumerate(s.shape) if isinstance(d, str) and cfg.dims[d].max > cfg.dims[d].min}
        for s in cfg.inputs
        if any(isinstance(d, str) for d in s.shape)
    }


def check_against_torch(model: Any, cfg: Config, path: Path) -> ExportCheck:
    """ONNX Runtime vs torch on random inputs at each distinct min/opt/max shape; raise if they differ."""
    session = session_from_onnx(path, "onnxruntime", level="disabled")  # the graph's nodes one by one
    names = [o.name for o in session.outputs]
    rng = np.random.default_rng(cfg.export.seed + 1)
    worst = {"max_abs": 0.0, "output": "", "shape": ""}
    for which in distinct_shapes(cfg):
        for _ in range(cfg.export.check_samples):
            feeds = random_feeds(cfg, which, rng)
            expected = run_torch(model, feeds, [s.name for s in cfg.inputs])
            got = session.infer(feeds)
            for name, ref in zip(names, expected, strict=True):
                err = float(np.max(np.abs(got[name].astype(np.float64) - ref))) if ref.size else 0.0
                if err > worst["max_abs"]:
                    worst = {"max_abs": err, "output": name, "shape": which}
                if not np.allclose(got[name], ref, atol=cfg.export.check_atol, rtol=cfg.export.check_rtol):
                    raise ModelError(
                        f"{path}: exported output {name!r} differs from torch by up to {err:.3g} at "
                        f"the {which} shape (tolerance atol={cfg.export.check_atol}, rtol={cfg.export.check_rtol})",
                        hint="try the other exporter (export.exporter) or check for randomness in forward()",
                    )
    return ExportCheck(session.evaluator, distinct_shapes(cfg), cfg.export.check_samples, **worst)


def _cause(e: BaseException) -> str:
    """Why an exporter failed, in one line: the innermost cause (torch.export wraps the real error in a
    generic "Failed to export ... step 1/3" with colour codes), and where in the model it was."""
    import re

    while e.__cause__ is not None:
        e = e.__cause__
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines() if ln.strip()]
    where = next((ln for ln in lines if ln.startswith("Caused by:")), "")
    return f"{type(e).__name__}: {lines[0] if lines else ''}{' ' + where if where else ''}"[:300]
