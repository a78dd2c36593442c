"""The ``tensorrt`` flavour: NVIDIA ModelOpt's ONNX PTQ places the Q/DQ nodes TensorRT fuses.

ModelOpt runs on the CPU (``calibration_eps=['cpu']``) and emits symmetric INT8 (per-channel
weights, per-tensor activations, no bias quantization) or FP8 E4M3 at opset >= 19. deploykit asks
it for an FP32-high-precision graph calibrated on one replayed sample, then writes its own streamed
ranges into the activation scales (:mod:`deploykit.quant.scales`) and does the FP16 conversion
itself (:mod:`deploykit.quant.fp16`), so overflowing nodes can be kept in FP32 by name.

ModelOpt patches ONNX Runtime's quantization modules process-wide (it deletes Relu, Sigmoid and
others from ORT's QDQ registry and replaces calibrator methods); every call runs inside
:func:`deploykit.quant.modelopt_guard.ort_patch_guard`, which restores them, so the ``onnxruntime``
flavour gives the same result whether ModelOpt ran before it or not.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.choices import Evaluator, Flavour
from deploykit.errors import ModelError, first_line
from deploykit.graph.proto import copy_model
from deploykit.quant.modelopt_guard import ort_patch_guard, quiet

if TYPE_CHECKING:
    from collections.abc import Mapping

    import onnx

    from deploykit.config import QuantizeConfig
    from deploykit.quant.flavours import Placed
    from deploykit.quant.groups import Group
    from deploykit.quant.latency_cost import Costs
    from deploykit.quant.ranges import TensorRange
    from deploykit.quant.reasons import Reason


def quantize(
    model: onnx.ModelProto, mode: str, sample: dict[str, np.ndarray], *, exclude: list[str], block_size: int = 128
) -> onnx.ModelProto:
    """A Q/DQ graph (FP32 elsewhere) from ModelOpt; ``exclude`` are node names left unquantized.

    Args:
        model: the prepared FP32 graph (opset >= 19 for int8/fp8, 21 for int4).
        mode: ``int8``, ``fp8`` or ``int4`` (weight-only MatMul/Gemm, round-to-nearest, DQ-only).
        sample: one calibration sample; the activation scales are overwritten afterwards.
        exclude: exact node names.
        block_size: the INT4 block size.
    """
    import onnx

    from deploykit.quant.reader import replay_reader

    with tempfile.TemporaryDirectory(prefix="deploykit-modelopt-") as tmp:
        src, dst = Path(tmp) / "model.onnx", Path(tmp) / "quantized.onnx"
        onnx.save_model(model, str(src))  # ModelOpt writes intermediates beside its input
        kwargs: dict[str, Any] = {
            "quantize_mode": mode,
            "calibration_eps": ["cpu"],
            "output_path": str(dst),
            "nodes_to_exclude": [f"{re.escape(n)}$" for n in exclude],
            "high_precision_dtype": "fp32",
            "log_level": "CRITICAL",
        }
        if mode == "int4":
            # DQ-only (INT4 weights + DequantizeLinear with axis/block_size): ModelOpt 0.47's Q/DQ
            # variant writes blocked scales without the block_size attribute, an invalid graph.
            kwargs.update(
                calibration_method="rtn_dq", block_size=block_size, calibration_data_reader=replay_reader([sample])
            )
        else:
            kwargs.update(calibration_method="max", calibration_data_reader=replay_reader([sample]))
        _run(str(src), kwargs)
        if not dst.is_file():
            raise ModelError("ModelOpt wrote no quantized model", hint="rerun with DEPLOYKIT_DEBUG=1 and report it")
        return onnx.load(str(dst))


def _run(path: str, kwargs: dict[str, Any]) -> None:
    from modelopt.onnx.quantization import quantize as modelopt_quantize

    with ort_patch_guard(), quiet():
        try:
            modelopt_quantize(path, **kwargs)
        except Exception as e:  # ModelOpt raises bare ValueError/AssertionError/RuntimeError
            first = first_line(e)
            raise ModelError(
                f"ModelOpt could not quantize the model: {first}",
                hint="exclude the node it names (quantize.exclude_nodes) or try --target onnxruntime",
            ) from e


FP8_LAYERS_OPSET = 21  # FP8 Q/DQ with FP16 scales (the ONNX parser takes them from opset 21)


class TensorRTFlavour:
    """The ``tensorrt`` flavour's answers (:class:`deploykit.quant.flavours.QuantFlavour`): ModelOpt's
    symmetric Q/DQ (INT8, FP8, INT4 weights) with deploykit's ranges in the scales, the rest in
    ``quantize.high_precision``, checked as written, latencies estimated (TensorRT is not here to time)."""

    name: Flavour = "tensorrt"
    tool = "ModelOpt"
    evaluator: Evaluator = "as_written"
    precisions = ("int8", "fp8", "int4", "fp16")
    measures_latency = False
    calibration_cache = True
    configurable_rest = True
    holds_weights = False

    def check(self, precision: str) -> None:
        return None  # every quantize precision exists for TensorRT

    def needs_modelopt(self, precision: str) -> bool:
        return True

    def key(self, cfg: QuantizeConfig, level: str) -> dict[str, Any]:
        return {"reduce_range": None, "cpu_features": None, "ort_level": None}  # the graph as written

    def level(self, level: str) -> str | None:
        return None

    def reduce_range(self, setting: str) -> bool:
        return False

    def prepare(self, model: onnx.ModelProto, cfg: QuantizeConfig, where: str) -> tuple[onnx.ModelProto, Any]:
        """At TensorRT's opset (19; INT4 21). With the search and FP16 elsewhere: 21, whose FP16 scales
        the search's FP8 layers need; given up, with a note, where the opset converter cannot reach it."""
        from deploykit.quant.prepare import prepare

        p = cfg.precision
        if p != "int8" or not (cfg.repair.enabled and cfg.high_precision == "fp16"):
            opset = 21 if p == "int4" else 13 if p == "fp16" else 19  # fp16: AutoCast needs 13
            return prepare(model, opset, where)
        try:
            model, prep = prepare(model, FP8_LAYERS_OPSET, where)
        except ModelError:
            model, prep = prepare(model, 19, where)
            prep.notes.append("the opset converter cannot reach 21: the mixed-precision search offers no FP8 layers")
            return model, prep
        prep.notes = [
            n.replace("(per-channel Q/DQ needs it)", "(the search's FP8 layers need FP16 scales)") for n in prep.notes
        ]
        return model, prep

    def preprocess(self, model: onnx.ModelProto, precision: str, notes: list[str]) -> onnx.ModelProto:
        return model

    def exclusions(self, model: onnx.ModelProto, precision: str) -> dict[str, Reason]:
        return {}

    def checks_kernels(self, precision: str) -> bool:
        return False  # TensorRT's kernels are not on this machine to check

    def place(
        self,
        model: onnx.ModelProto,
        ranges: dict[str, TensorRange],
        exclude: list[str],
        sample: dict[str, np.ndarray],
        cfg: QuantizeConfig,
        reduce_range: bool,
        placed: Placed | None,
    ) -> tuple[onnx.ModelProto, Placed | None]:
        """ModelOpt places once per exclusion set; its activation scales are overwritten with ``ranges``."""

        from deploykit.quant.flavours import Placed
        from deploykit.quant.scales import FP16_MIN_NORMAL, set_activation_scales

        new = None
        if placed is None:
            qdq = quantize(model, cfg.precision, sample, exclude=exclude, block_size=cfg.int4_block_size)
            placed = new = Placed(model, qdq, ranges)
        out = copy_model(placed.qdq)
        if cfg.precision != "int4":  # INT4 quantizes weights only
            low = FP16_MIN_NORMAL if cfg.high_precision == "fp16" else 1e-30
            set_activation_scales(out, ranges, min_scale=low)
        return out, new

    def high_precision(self, cfg: QuantizeConfig) -> str:
        return cfg.high_precision

    def fp16_rest(self, cfg: QuantizeConfig) -> bool:
        p = cfg.precision
        return p == "fp16" or (p in ("int8", "fp8") and cfg.high_precision == "fp16")

    def finish(self, qdq: onnx.ModelProto, keep_fp32: list[str], cfg: QuantizeConfig) -> onnx.ModelProto:
        if cfg.precision == "int4" or cfg.high_precision != "fp16":
            return qdq
        from deploykit.quant.fp16 import to_fp16

        # TensorRT takes FP8 with FP16 scales from opset 21 (the ONNX parser's operator docs).
        return to_fp16(qdq, keep_fp32, opset=FP8_LAYERS_OPSET if cfg.precision == "fp8" else None)

    def ladder(self, precision: str, high_precision: str, opset: int) -> tuple[str, ...]:
        """FP8 for an INT8 base (its FP16 scales need opset 21), then the float rest's precision, then
        FP32 above FP16."""
        steps = [precision]
        if precision == "int8" and (high_precision == "fp32" or opset >= FP8_LAYERS_OPSET):
            steps.append("fp8")
        steps.append(high_precision)
        if high_precision == "fp16":
            steps.append("fp32")
        return tuple(steps)

    def latency_costs(
        self,
        reference: onnx.ModelProto,
        base: onnx.ModelProto,
        groups: Mapping[str, Group],
        ladder: tuple[str, ...],
        precision: str,
        high_precision: str,
    ) -> Costs:
        """A GPU roofline at datasheet rates (no TensorRT here to time)."""
        from deploykit.quant import latency_cost

        return latency_cost.roofline(reference, groups, ladder, precision, high_precision, base)

    def foreign(self, backend: str) -> bool:
        """ONNX Runtime's CPU kernels do not compute such a graph as written (FP16 + INT8 measured at
        rel-L2 0.12 where the graph gives 0.013), nor at TensorRT's speed."""
        return backend != self.name


FLAVOUR = TensorRTFlavour()
