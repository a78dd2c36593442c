"""The ``onnxruntime`` flavour: QDQ that ONNX Runtime's CPU kernels run fast (ORT's own quantizer).

INT8: unsigned asymmetric activations (measured about 10x more accurate than symmetric on a small
CNN), signed symmetric per-channel weights, ``reduce_range`` on CPUs without VNNI (their u8s8
kernels saturate otherwise: rel-L2 0.19 as computed vs 0.016 as written). The activation ranges
are deploykit's streamed ranges, handed over as ``TensorQuantOverrides`` (rmin/rmax), so ORT
derives scales, zero points and the int32 bias scales consistently from them; its own calibration
runs on one replayed sample only. ORT drops a Relu in front of an asymmetric uint8 QuantizeLinear,
which is exact there (the zero point clamps); for a symmetric FP8 type it would not be, which is
one reason FP8 exists only as the tensorrt flavour (the other: ORT's QLinearConv rejects float8).

ModelOpt patches ``onnxruntime.quantization`` process-wide (its registries and calibrators), and
code outside deploykit may call it without restoring anything; this flavour therefore runs on a
private import of the package (:func:`private_ort_quantization`) that no patch reaches, so its
result does not depend on what ran before it in the process.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.choices import Evaluator, Flavour
from deploykit.errors import ConfigError, ModelError, first_line
from deploykit.graph.proto import copy_model
from deploykit.quant.float_source import bring_initializers, float_source
from deploykit.quant.ort_quicker import install as _quicker
from deploykit.quant.ort_quicker import preprocess_in_memory
from deploykit.quant.ranges import TensorRange

if TYPE_CHECKING:
    from collections.abc import Mapping

    import onnx

    from deploykit.config import QuantizeConfig
    from deploykit.quant.flavours import Placed
    from deploykit.quant.groups import Group
    from deploykit.quant.latency_cost import Costs
    from deploykit.quant.reasons import Reason


def resolve_reduce_range(setting: str) -> bool:
    """``on``/``off`` as given; ``auto``: on for x86 CPUs without VNNI (AVX2-only u8s8 saturates)."""
    if setting != "auto":
        return setting == "on"
    from deploykit.store.environment import cpu_info

    info = cpu_info()
    features = set(info["features"])  # type: ignore[arg-type]
    x86 = str(info["machine"]).lower() in ("x86_64", "amd64", "i686", "x86")
    return x86 and not features & {"avx512_vnni", "avx_vnni", "amx_int8"}


@functools.cache
def private_ort_quantization() -> ModuleType:
    """A fresh import of ``onnxruntime.quantization``, kept out of ``sys.modules`` (and so out of
    reach of ModelOpt's monkey patches); the public package is left exactly as it was."""
    import onnxruntime

    def ours(name: str) -> bool:
        return name == "onnxruntime.quantization" or name.startswith("onnxruntime.quantization.")

    public = {k: v for k, v in sys.modules.items() if ours(k)}
    attribute = getattr(onnxruntime, "quantization", None)
    for name in public:
        del sys.modules[name]
    try:
        fresh = importlib.import_module("onnxruntime.quantization")
    finally:
        for name in [k for k in sys.modules if ours(k)]:
            del sys.modules[name]
        sys.modules.update(public)
        if attribute is not None:
            onnxruntime.quantization = attribute
        elif hasattr(onnxruntime, "quantization"):
            del onnxruntime.quantization
    _quicker(fresh)
    return fresh


@contextlib.contextmanager
def _quiet_shapes() -> Iterator[None]:
    """Symbolic shape inference logs "unsupported broadcast between batch + 12 4" for dims it leaves
    unmerged, which it handles; a user reads it as a deploykit error. Failures still raise."""
    log = logging.getLogger("onnxruntime.tools.symbolic_shape_infer")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def preprocess(model: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    """ORT's quant_pre_process (symbolic shapes, basic graph fusions); symbolic inference is
    skipped where it fails (dims it cannot merge), and the note says so. It is not skipped where
    ONNX's shape inference already ranked every tensor: with its shapes ORT's optimizer folds the
    shape arithmetic (a real recognizer: 124 nodes with it, 302 without; a ViT 696 against 1055).

    Its steps run in memory (:func:`~deploykit.quant.ort_quicker.preprocess_in_memory`), where ORT's
    own function saves and reads the model five times; a model that takes ORT's other branches (opset
    10 or lower, a failed symbolic inference or optimization, 1 GiB or more) goes through ORT's function."""
    with _quiet_shapes():
        done = preprocess_in_memory(private_ort_quantization(), model)
    return done if done is not None else _preprocess_by_file(model, notes)


def _preprocess_by_file(model: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    import onnx

    quant_pre_process = private_ort_quantization().quant_pre_process
    with tempfile.TemporaryDirectory(prefix="deploykit-ortq-") as tmp, contextlib.chdir(tmp), _quiet_shapes():
        # ORT's symbolic shape inference writes sym_shape_infer_temp.onnx into the working directory.
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        onnx.save_model(model, str(src))
        try:
            quant_pre_process(str(src), str(dst))
        except Exception as e:  # symbolic shape inference raises on shapes it cannot complete
            notes.append(f"symbolic shape inference failed ({first_line(e, limit=120)}); pre-processed without it")
            try:
                quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
            except Exception as e2:
                raise ModelError(
                    f"ONNX Runtime cannot pre-process the model for quantization: {first_line(e2)}"
                ) from e2
        return onnx.load(str(dst))


def quantize(
    model: onnx.ModelProto,
    sample: dict[str, np.ndarray],
    ranges: dict[str, TensorRange],
    *,
    exclude: list[str],
    per_channel: bool,
    reduce_range: bool,
) -> onnx.ModelProto:
    """An INT8 QDQ graph from ``onnxruntime.quantization.quantize_static`` with deploykit's ranges.

    Args:
        model: the pre-processed FP32 graph the ranges were computed on.
        sample: one calibration sample (ORT insists on calibrating; the ranges override it).
        ranges: calibrated ranges by tensor name.
        exclude: node names left unquantized.
        per_channel: per-channel weight scales.
        reduce_range: 7-bit weights (see :func:`resolve_reduce_range`).
    """
    import onnx

    from deploykit.quant.ort_quicker import handed
    from deploykit.quant.reader import replay_reader

    ortq = private_ort_quantization()
    quantize_static, QuantType = ortq.quantize_static, ortq.QuantType  # noqa: N806 (ORT's enum)
    with tempfile.TemporaryDirectory(prefix="deploykit-ortq-") as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        try:
            with handed(src, model, quantize_static), _calibrated_by(quantize_static, ranges):
                quantize_static(
                    str(src),
                    str(dst),
                    replay_reader([sample]),
                    quant_format=ortq.QuantFormat.QDQ,
                    per_channel=per_channel,
                    reduce_range=reduce_range,
                    activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    nodes_to_exclude=list(exclude),
                    extra_options=overrides(ranges, model),
                    calibrate_method=ortq.CalibrationMethod.MinMax,
                    calibration_providers=["CPUExecutionProvider"],
                )
        except Exception as e:  # ORT raises bare ValueError/RuntimeError
            first = first_line(e)
            raise ModelError(
                f"ONNX Runtime's quantizer failed: {first}",
                hint="exclude the node it names (quantize.exclude_nodes) or try --target tensorrt",
            ) from e
        out = onnx.load(str(dst))
    read_float_inputs(out, model, exclude)
    return out


@contextlib.contextmanager
def _calibrated_by(quantize_static: Any, ranges: dict[str, TensorRange]) -> Iterator[None]:
    """Within this block the (private) ``quantize_static`` takes ``ranges`` as its calibration
    result instead of running a calibrator: deploykit has calibrated already, and ORT's own
    calibration (an augmented graph with a ReduceMin/ReduceMax per tensor, built and run even for
    one sample) took 4 of its 13 s on a real text detector. The ranges also go in as
    ``TensorQuantOverrides`` (:func:`overrides`); this only removes the work whose result they override."""
    namespace = quantize_static.__globals__  # the private onnxruntime.quantization.quantize module
    calibrate = namespace["create_calibrator"].__globals__  # ... and its calibrate module
    tensors = {
        name: calibrate["TensorData"](lowest=np.float32(r.lo), highest=np.float32(r.hi)) for name, r in ranges.items()
    }
    data = calibrate["TensorsData"](calibrate["CalibrationMethod"].MinMax, tensors)

    class Calibrated:
        def collect_data(self, reader: Any) -> None:
            return None

        def compute_data(self) -> Any:
            return data

    real = namespace["create_calibrator"]
    namespace["create_calibrator"] = lambda *a, **k: Calibrated()
    try:
        yield
    finally:
        namespace["create_calibrator"] = real


def rescale(
    model: onnx.ModelProto,
    reference: onnx.ModelProto,
    ranges: dict[str, TensorRange],
    placed_with: dict[str, TensorRange] | None = None,
) -> onnx.ModelProto | None:
    """A copy of ORT's QDQ ``model`` with its activation scales, zero points and int32 biases
    recomputed from ``ranges``, as :func:`quantize` would write them; None where that cannot be
    done exactly (another activation type, a bias whose float value ``reference`` lacks, a bias
    near the int32 limit, where ORT would have adjusted the weight scale), so the caller requantizes.
    ``placed_with``: the ranges ``model`` was quantized with. Where one of its quantizers does not
    hold its own tensor's parameters from them, ORT gave it another tensor's (it shares one scale
    along Reshape/Transpose/Slice chains: 11 quantizers of the planner example, whose scores went to
    rel-L2 0.41 rescaled tensor by tensor): None.

    Choosing among range sets then costs one quantizer run, not one per set (about 6 s each on a
    464-node text detector).
    """
    import onnx
    from onnx import numpy_helper

    from deploykit.quant.scales import activation_quantizers

    out = copy_model(model)
    inits = {i.name: i for i in out.graph.initializer}
    new: dict[str, np.ndarray] = {}
    donors = _Donors(placed_with, ranges) if placed_with is not None else None
    quantizers = [
        (q, source if source in ranges else source.removesuffix("_QuantizeLinear_Input"))
        for q, source in activation_quantizers(out)
    ]
    # ORT shares a quantizer's scale and zero point initializers along a chain (a Split's or MaxPool's outputs
    # take their input's) and names them after the tensor that owns them
    owners = {q.input[1]: name for q, name in quantizers if q.input[1] == f"{name}_scale"}
    for q, name in quantizers:
        zp = inits.get(q.input[2]) if len(q.input) > 2 else None
        if zp is None or zp.data_type != onnx.TensorProto.UINT8:
            return None
        if owners.get(q.input[1], name) != name:
            name = owners[q.input[1]]  # its initializers are another tensor's: that tensor's range, whatever this holds
        elif donors is not None and not _holds(inits, q, placed_with.get(name)):
            name = donors.of(inits, q)  # the tensor whose range ORT gave this quantizer, if one can tell
        r = ranges.get(name) if name else None
        if r is None:
            return None
        new[q.input[2]], new[q.input[1]] = _uint8_params(r)
    if not _requantize_biases(out, reference, inits, new):
        return None
    for name, value in new.items():
        inits[name].CopyFrom(numpy_helper.from_array(value.reshape(tuple(inits[name].dims)), name))
    return out


class _Donors:
    """Tensors by the quantization parameters their placement ranges give: a quantizer ORT gave another
    tensor's parameters (a shared scale) takes that tensor's new range, where every tensor holding
    those parameters has one new range (a pooled recognizer's pool -> Squeeze -> Unsqueeze chain
    shares one scale; without this the quantizer ran again for every range set, 7.5 s each)."""

    def __init__(self, placed_with: dict[str, TensorRange], ranges: dict[str, TensorRange]) -> None:
        self.ranges = ranges
        self.by_params: dict[bytes, list[str]] = {}
        for name, r in placed_with.items():
            zp, scale = _uint8_params(r)
            self.by_params.setdefault(zp.tobytes() + scale.tobytes(), []).append(name)  # the order `of` reads

    def of(self, inits: dict[str, Any], q: onnx.NodeProto) -> str:
        """The tensor whose new range quantizer ``q`` takes, or "" where it is not one range."""
        from onnx import numpy_helper

        held = (
            numpy_helper.to_array(inits[q.input[2]]).astype(np.uint8).tobytes()
            + numpy_helper.to_array(inits[q.input[1]]).astype(np.float32).tobytes()
        )
        names = self.by_params.get(held, [])
        if not names or any(n not in self.ranges for n in names):
            return ""
        new = {b"".join(a.tobytes() for a in _uint8_params(self.ranges[n])) for n in names}
        return names[0] if len(new) == 1 else ""


def _holds(inits: dict[str, Any], q: onnx.NodeProto, r: TensorRange | None) -> bool:
    """Whether quantizer ``q`` holds the parameters :func:`_uint8_params` gives ``r``."""
    from onnx import numpy_helper

    if r is None:
        return False
    zp, scale = _uint8_params(r)
    return bool(
        np.array_equal(numpy_helper.to_array(inits[q.input[2]]), zp)
        and np.array_equal(numpy_helper.to_array(inits[q.input[1]]), scale)
    )


def _uint8_params(r: TensorRange) -> tuple[np.ndarray, np.ndarray]:
    """(zero point, scale) as ORT's ``compute_scale_zp`` gives them for [rmin, rmax] on uint8."""
    rmin, rmax = np.float32(min(r.lo, 0.0)), np.float32(max(r.hi, 0.0))
    scale = np.float64(rmax - rmin) / 255.0
    if scale < np.finfo(np.float32).tiny:
        return np.array(0, np.uint8), np.array(1.0, np.float32)
    return np.array(np.round(0 - rmin / scale), np.uint8), np.array(scale, np.float32)


INT32_SAFE = 2.0**30  # ORT raises a weight scale when a bias would overflow int32; stay far from it


def _requantize_biases(
    model: onnx.ModelProto, reference: onnx.ModelProto, inits: dict[str, Any], new: dict[str, np.ndarray]
) -> bool:
    """Add to ``new`` each int32 bias (and its scale) for the new input scales: bias / (s_in * s_w)."""
    from onnx import numpy_helper

    from deploykit.graph.proto import consumers, producers

    floats = {i.name: i for i in reference.graph.initializer}
    made_by, readers = producers(model), consumers(model)
    for dq in model.graph.node:
        if dq.op_type != "DequantizeLinear" or dq.input[0] not in inits or inits[dq.input[0]].data_type != 6:
            continue  # INT32 initializers are biases
        users = readers.get(dq.output[0], [])
        if len(users) != 1 or dq.output[0] not in floats:
            return False
        node = users[0]
        in_dq, w_dq = made_by.get(node.input[0]), made_by.get(node.input[1])
        if in_dq is None or w_dq is None or in_dq.op_type != "DequantizeLinear" or w_dq.op_type != "DequantizeLinear":
            return False
        s_in = new.get(in_dq.input[1])
        if s_in is None:
            s_in = numpy_helper.to_array(inits[in_dq.input[1]])
        s_w = numpy_helper.to_array(inits[w_dq.input[1]])
        beta = next((a.f for a in node.attribute if a.name == "beta"), 1.0) if node.op_type == "Gemm" else 1.0
        bias = numpy_helper.to_array(floats[dq.output[0]])
        bias_scale = s_in * s_w * beta if beta != 1.0 else s_in * s_w
        q = np.round(np.asarray(bias, np.float64) / np.asarray(bias_scale, np.float64))
        old = numpy_helper.to_array(inits[dq.input[0]])
        if np.any(np.abs(q) >= INT32_SAFE) or np.any(np.abs(old) >= INT32_SAFE):
            return False
        new[dq.input[0]] = q.astype(np.int32)
        new[dq.input[1]] = np.asarray(bias_scale, bias.dtype).reshape(-1)
    return True


def read_float_inputs(model: onnx.ModelProto, reference: onnx.ModelProto, nodes: list[str]) -> int:
    """Rewire ``nodes`` of the quantized ``model`` to read float tensors where they read Q/DQ pairs;
    ``reference`` is the FP32 graph it was quantized from. Return the inputs rewired.

    ORT's ``nodes_to_exclude`` only keeps a node's weights and its own fusion out: a Q/DQ pair its
    quantized neighbours put on a shared tensor still feeds it (an excluded Conv between SiLUs read
    and wrote uint8-rounded tensors, so excluding it removed almost no error). Here an excluded node
    computes on the float tensor, as in the tensorrt flavour; other readers keep the Q/DQ pair.
    ORT drops a Relu/Clip in front of a uint8 QuantizeLinear (the zero point clamps) and hands its
    output name to the producer, so the float tensor may hold pre-activation values: the activation
    is copied back from ``reference`` for the excluded node. Pairs nobody reads are removed.
    """
    from deploykit.graph.proto import producers

    wanted = {n.name: n for n in reference.graph.node if n.name in set(nodes)}
    if not wanted:
        return 0
    made_by, made_in_reference = producers(model), producers(reference)
    rewired = 0
    out: list[onnx.NodeProto] = []
    for node in model.graph.node:
        original = wanted.get(node.name)
        for i, name in enumerate(node.input if original is not None and len(original.input) == len(node.input) else ()):
            dq = made_by.get(name)
            q = made_by.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
            if q is None or q.op_type != "QuantizeLinear":
                continue
            source = float_source(q.input[0], original.input[i], made_by, made_in_reference)
            if source is None:
                continue  # cannot tell what it held in FP32: the node keeps reading the quantized tensor
            tensor, activation = source
            if activation is not None and all(activation.output[0] not in n.output for n in out):
                if not bring_initializers(activation, model, reference):
                    continue
                out.append(activation)
            node.input[i] = activation.output[0] if activation is not None else tensor
            rewired += 1
        out.append(node)
    del model.graph.node[:]
    model.graph.node.extend(out)
    _drop_unread_qdq(model)
    return rewired


def _drop_unread_qdq(model: onnx.ModelProto) -> None:
    """Remove Q/DQ nodes whose outputs nothing reads (DQ first, then the Q that fed only it), and
    the scales and zero points only they used."""
    outputs = {o.name for o in model.graph.output}
    dropped: set[str] = set()
    for op in ("DequantizeLinear", "QuantizeLinear"):
        read = {i for n in model.graph.node for i in n.input} | outputs
        unread = [n.op_type == op and not any(o in read for o in n.output) for n in model.graph.node]
        if any(unread):
            dropped |= {i for n, u in zip(model.graph.node, unread, strict=True) if u for i in n.input[1:]}
            keep = [n for n, u in zip(model.graph.node, unread, strict=True) if not u]
            del model.graph.node[:]
            model.graph.node.extend(keep)
    unused = dropped - {i for n in model.graph.node for i in n.input}
    inits = [t for t in model.graph.initializer if t.name not in unused]
    if len(inits) != len(model.graph.initializer):
        del model.graph.initializer[:]
        model.graph.initializer.extend(inits)


# ORT quantizes a normalization's 1-D scale per channel along axis 1 by default, which a rank-1
# tensor lacks: it logged "Axis 1 is out-of-range for weight ..." for every such node on every
# quantize call (a dozen times per run) and fell back to one scale for all channels. Axis 0 is
# the channel axis of those scales.
NORM_SCALE_AXIS = {"BatchNormalization": 0, "InstanceNormalization": 0, "LayerNormalization": 0}


def overrides(ranges: dict[str, TensorRange], model: onnx.ModelProto) -> dict[str, Any]:
    """ORT's extra_options: asymmetric activations whose ranges are deploykit's (rmin <= 0 <= rmax)."""
    inits = {i.name for i in model.graph.initializer}
    per_tensor = {
        name: [{"rmin": np.float32(min(r.lo, 0.0)), "rmax": np.float32(max(r.hi, 0.0))}]
        for name, r in ranges.items()
        if name not in inits
    }
    return {
        "TensorQuantOverrides": per_tensor,
        "ActivationSymmetric": False,
        "WeightSymmetric": True,
        "QDQOpTypePerChannelSupportToAxis": dict(NORM_SCALE_AXIS),
    }


class OnnxRuntimeFlavour:
    """The ``onnxruntime`` flavour's answers (:class:`deploykit.quant.flavours.QuantFlavour`): INT8
    QDQ from ORT's quantizer (FP16 by conversion), the rest FP32, checked as the CPU kernels compute
    at the build's level, latencies a CPU roofline, the answer timed on this CPU."""

    name: Flavour = "onnxruntime"
    tool = "ONNX Runtime's quantizer"
    evaluator: Evaluator = "onnxruntime"
    precisions = ("int8", "fp16")
    measures_latency = True
    calibration_cache = False
    configurable_rest = False
    holds_weights = True

    def check(self, precision: str) -> None:
        if precision not in self.precisions:
            raise ConfigError(
                f"quantize.precision {precision} with target onnxruntime: ONNX Runtime's CPU "
                f"kernels have no {precision.upper()} convolution (QLinearConv rejects float8 "
                "inputs at optimization level extended), so the model would be slower and not "
                "run as built",
                hint="use quantize.target: tensorrt (auto picks it for fp8/int4); deploykit "
                "checks that graph as written on the CPU",
            )

    def needs_modelopt(self, precision: str) -> bool:
        return not _quantizes(precision)  # FP16 is ModelOpt's AutoCast

    def key(self, cfg: QuantizeConfig, level: str) -> dict[str, Any]:
        from deploykit.store.environment import cpu_info

        # this CPU's integer kernels: nodes they compute wrong are kept in float (kernel_check)
        return {
            "reduce_range": self.reduce_range(cfg.reduce_range),
            "cpu_features": cpu_info()["features"],
            "ort_level": level,
        }

    def level(self, level: str) -> str | None:
        return level

    def reduce_range(self, setting: str) -> bool:
        return resolve_reduce_range(setting)

    def prepare(self, model: onnx.ModelProto, cfg: QuantizeConfig, where: str) -> tuple[onnx.ModelProto, Any]:
        from deploykit.quant.prepare import prepare

        return prepare(model, 13, where)  # per-channel Q/DQ (and AutoCast) need 13

    def preprocess(self, model: onnx.ModelProto, precision: str, notes: list[str]) -> onnx.ModelProto:
        if not _quantizes(precision):
            return model
        from deploykit.quant.prepare import infer_shapes, name_nodes

        model = infer_shapes(preprocess(model, notes))
        name_nodes(model)  # pre-processing inlines functions (HardSwish) into unnamed nodes
        return model

    def exclusions(self, model: onnx.ModelProto, precision: str) -> dict[str, Reason]:
        from deploykit.quant.exclusions import output_tail

        return output_tail(model) if _quantizes(precision) else {}

    def checks_kernels(self, precision: str) -> bool:
        return _quantizes(precision)

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
        """ORT's scales recomputed exactly as its quantizer would (:func:`rescale`), else it runs again."""

        from deploykit.quant.flavours import Placed

        out = rescale(placed.qdq, model, ranges, placed.ranges) if placed is not None else None
        if out is not None:
            return out, None
        out = quantize(model, sample, ranges, exclude=exclude, per_channel=cfg.per_channel, reduce_range=reduce_range)
        return out, Placed(model, copy_model(out), ranges)

    def high_precision(self, cfg: QuantizeConfig) -> str:
        return "fp32"

    def fp16_rest(self, cfg: QuantizeConfig) -> bool:
        return not _quantizes(cfg.precision)

    def finish(self, qdq: onnx.ModelProto, keep_fp32: list[str], cfg: QuantizeConfig) -> onnx.ModelProto:
        return qdq

    def ladder(self, precision: str, high_precision: str, opset: int) -> tuple[str, ...]:
        """The base and FP32: ONNX Runtime's x86 CPU kernels have no fast FP16 convolution, so an FP16
        layer would only add Casts."""
        return (precision, "fp32")

    def latency_costs(
        self,
        reference: onnx.ModelProto,
        base: onnx.ModelProto,
        groups: Mapping[str, Group],
        ladder: tuple[str, ...],
        precision: str,
        high_precision: str,
    ) -> Costs:
        """A CPU roofline of ORT's kernels (INT8 against FP32), the answer then timed on this CPU."""
        from deploykit.quant import latency_cost

        return latency_cost.cpu_estimate(reference, base, groups, ladder)

    def foreign(self, backend: str) -> bool:
        return False  # any backend computes an ORT-flavour QDQ graph as written


def _quantizes(precision: str) -> bool:
    """Whether ORT's quantizer writes the graph (INT8), rather than an FP16 conversion."""
    return precision == "int8"


FLAVOUR = OnnxRuntimeFlavour()
