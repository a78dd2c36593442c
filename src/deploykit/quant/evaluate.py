"""Run a (quantized) ONNX graph on the CPU: as written, or as ONNX Runtime's fast kernels compute it.

Two evaluators, because ONNX Runtime's CPU kernels do not faithfully execute every Q/DQ graph
(measured: an FP16 + INT8 ModelOpt graph ran with rel-L2 0.12-0.24 in ORT against 0.004 with
``onnx.reference``; the ORT optimizer rewrites Relu -> FP8 QuantizeLinear wrongly):

* **as written** (:func:`open_as_written`) predicts TensorRT, which executes the graph's
  precision exactly. FP32-high-precision graphs run in ONNX Runtime with every graph optimization
  off, so each Q/DQ node runs as the reference kernel it is. Graphs with FP16/BF16 tensors run
  *emulated*: the graph is rewritten to FP32 and every FP16 tensor goes through a Cast pair that
  rounds it to FP16 (overflow to inf included), i.e. FP32 accumulation with FP16 storage, as
  TensorRT's FP16 kernels do. ``onnx.reference`` gives the same numbers but took ~250 s for one
  128x128 sample of the example detector; the emulation takes milliseconds.
* **as ONNX Runtime computes** (:func:`open_as_ort_computes`) is what the ``onnxruntime`` CPU
  target ships: the session at the build's optimization level, with the optimizer rules that are
  wrong for FP8 graphs (:data:`FP8_UNSAFE_OPTIMIZERS`) disabled.

Every session carries ``evaluator``, a sentence reports print.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.backends.base import TensorSpec
from deploykit.errors import ModelError

if TYPE_CHECKING:
    import onnx

# ORT's level-2 rule "ReluQuantRewrite" drops a Relu in front of a QuantizeLinear, valid only for
# asymmetric integer types where the zero point clamps; for FP8 it changed cosine 0.997 -> 0.57.
FP8_UNSAFE_OPTIMIZERS = ("ReluQuantRewrite",)
_LOW = {10: np.float16, 16: None}  # FLOAT16, BFLOAT16 (numpy has no bfloat16: ml_dtypes does)
_FLOAT8 = {17, 18, 19, 20}  # FLOAT8E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ
_LEVELS = ("disabled", "basic", "extended", "all")


class GraphSession:
    """A CPU session over an ONNX graph, with the backends' Session interface.

    Inputs declared FP16 are fed to an emulated graph as FP32 (exact), outputs declared FP16 come
    back as FP16 (already rounded), so callers see the graph's own signature.
    """

    def __init__(self, session: Any, evaluator: str, declared: dict[str, str]) -> None:
        self._session = session
        self.evaluator = evaluator
        self._declared = declared  # tensor name -> numpy dtype name the original graph declares
        self._output_names = [o.name for o in session.get_outputs()]
        self._feed_types = {i.name: i.type for i in session.get_inputs()}

    @property
    def inputs(self) -> list[TensorSpec]:
        return [self._spec(i) for i in self._session.get_inputs()]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [self._spec(o) for o in self._session.get_outputs()]

    def _spec(self, arg: Any) -> TensorSpec:
        shape = tuple(d if isinstance(d, int) else str(d) for d in (arg.shape or ()))
        return TensorSpec(arg.name, self._declared.get(arg.name, arg.type), shape)

    def _feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: v.astype(np.float32) if self._feed_types.get(k) == "tensor(float)" and v.dtype != np.float32
                else v for k, v in feeds.items() if k in self._feed_types}

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self._session.run(self._output_names, self._feeds(feeds))
        out = {}
        for name, value in zip(self._output_names, values, strict=True):
            want = self._declared.get(name)
            out[name] = value.astype(want) if want and value.dtype.name != want else value
        return out

    def run_all(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs without converting back to the declared dtype (taps read intermediates this way)."""
        return dict(zip(self._output_names, self._session.run(self._output_names, self._feeds(feeds)), strict=True))

    def timed_runner(self, feeds: dict[str, np.ndarray]) -> Any:
        run, names, prepared = self._session.run, self._output_names, self._feeds(feeds)
        return lambda: run(names, prepared)


def load(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:

    if isinstance(model, (str, Path)):
        from deploykit.onnxio import load_model

        return load_model(Path(model))
    return model


def has_low_precision_float(model: onnx.ModelProto) -> bool:
    """Whether any tensor of the graph is FP16/BF16 (then :func:`open_as_written` emulates)."""
    from deploykit.quant.graph import infer_shapes, tensor_types

    if any(t in _LOW for t in tensor_types(model).values()):
        return True
    return any(t in _LOW for t in tensor_types(infer_shapes(model)).values())


def has_float8(model: onnx.ModelProto) -> bool:
    """Whether the graph quantizes to an FP8 type (zero points or Q output_dtype)."""
    inits = {i.name: i.data_type for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 2:
            if inits.get(node.input[2]) in _FLOAT8:
                return True
        if any(a.name == "output_dtype" and a.i in _FLOAT8 for a in node.attribute):
            return True
    return False


def open_as_written(model: onnx.ModelProto | str | Path, threads: int = 0, *, expose: tuple[str, ...] = ()
                    ) -> GraphSession:
    """The graph's own numerics (what TensorRT computes, up to kernel rounding); see the module doc.

    Args:
        model: an ONNX model or the path of one.
        threads: intra-op threads (0: ONNX Runtime's choice).
        expose: intermediate tensors to add as outputs (per-layer diagnosis reads them).
    """
    import onnxruntime as ort

    model = load(model)
    declared = _declared_dtypes(model)
    emulate = has_low_precision_float(model)
    graph = emulate_fp16(model) if emulate else model
    if expose:
        graph = expose_tensors(graph, expose)
    how = "FP16 tensors emulated (FP32 compute, each FP16 tensor rounded to FP16)" if emulate else "FP32 graph"
    return GraphSession(_session(graph, "disabled", threads, ()),
                        f"as written: {how}; onnxruntime {ort.__version__} CPU, graph optimizations off", declared)


def open_as_ort_computes(model: onnx.ModelProto | str | Path, level: str = "extended", threads: int = 0,
                         *, expose: tuple[str, ...] = ()) -> GraphSession:
    """What ONNX Runtime's CPU kernels compute at ``level``, FP8-unsafe rewrites disabled."""
    import onnxruntime as ort

    model = load(model)
    disabled = ort_disabled_optimizers(model)
    graph = expose_tensors(model, expose) if expose else model
    note = f", {', '.join(disabled)} disabled (FP8 graph)" if disabled else ""
    return GraphSession(_session(graph, level, threads, disabled),
                        f"onnxruntime {ort.__version__} CPU kernels at optimization level {level}{note}",
                        _declared_dtypes(model))


def open_for_target(model: onnx.ModelProto | str | Path, flavour: str, level: str = "extended",
                    threads: int = 0) -> GraphSession:
    """The evaluator parity should use for a quantized graph of a target flavour.

    ``tensorrt``: as written (what TensorRT computes); ``onnxruntime``: what ORT's CPU kernels compute
    at the build's optimization ``level``. The quantize artifact's summary names its flavour
    (``summary["flavour"]``) and this choice (``summary["evaluate"]``).
    """
    if flavour == "tensorrt":
        return open_as_written(model, threads)
    return open_as_ort_computes(model, level, threads)


def ort_disabled_optimizers(model: onnx.ModelProto) -> tuple[str, ...]:
    """The ORT optimizer rules any session over this graph must disable (FP8 graphs: ReluQuantRewrite).

    Pass them as ``onnxruntime.InferenceSession(..., disabled_optimizers=list(...))``; the build stage
    of the onnxruntime backend needs this for FP8 graphs too.
    """
    return FP8_UNSAFE_OPTIMIZERS if has_float8(model) else ()


def _session(model: onnx.ModelProto, level: str, threads: int, disabled: tuple[str, ...]) -> Any:
    import onnxruntime as ort

    from deploykit.backends.onnxruntime import session_options

    if level not in _LEVELS:
        raise ValueError(f"optimization level {level!r} is not one of {_LEVELS}")
    if model.ByteSize() >= 2**31 - 1:
        raise ModelError("models over 2 GB cannot be evaluated in memory", hint="quantize a smaller model")
    try:
        return ort.InferenceSession(model.SerializeToString(), session_options(level, threads),
                                    providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled))
    except Exception as e:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"ONNX Runtime cannot run the quantized graph: {first}",
                         hint="exclude the node it names (quantize.exclude_nodes) or keep it in FP32") from e


def _declared_dtypes(model: onnx.ModelProto) -> dict[str, str]:
    from onnx import helper

    out = {}
    for v in [*model.graph.input, *model.graph.output]:
        t = v.type.tensor_type.elem_type
        if t:
            try:
                out[v.name] = np.dtype(helper.tensor_dtype_to_np_dtype(t)).name
            except (KeyError, TypeError):
                continue
    return out


def expose_tensors(model: onnx.ModelProto, names: tuple[str, ...] | list[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose outputs also include ``names`` (intermediate tensors)."""
    import onnx
    from onnx import helper

    from deploykit.quant.graph import tensor_types

    out = onnx.ModelProto.FromString(model.SerializeToString())
    types = tensor_types(out)
    present = {o.name for o in out.graph.output}
    for name in names:
        if name not in present:
            out.graph.output.append(helper.make_tensor_value_info(name, types.get(name, 1), None))
            present.add(name)
    return out


def emulate_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """An FP32 graph computing what ``model`` computes with its FP16/BF16 tensors rounded.

    Each node output of a 16-bit float type keeps its name but is produced by a Cast pair
    (FP32 -> FP16 -> FP32) after the node, so names still align with the original graph.
    """
    import onnx
    from onnx import TensorProto, helper

    from deploykit.quant.graph import infer_shapes, tensor_types

    m = infer_shapes(onnx.ModelProto.FromString(model.SerializeToString()))
    types = tensor_types(m)
    g = m.graph
    for init in g.initializer:
        if init.data_type in _LOW:
            init.CopyFrom(_to_fp32(init))
    nodes = []
    for node in g.node:
        _widen_attributes(node)
        nodes.append(node)
        for i, name in enumerate(node.output):
            low = types.get(name)
            if not name or low not in _LOW:
                if name and low is None and node.op_type not in ("QuantizeLinear",) and _touches_low(node, types):
                    raise ModelError(f"cannot evaluate node {node.name!r} as written: the type of {name!r} is unknown",
                                     hint="run shape inference on the model (surgery 'sanitize')")
                continue
            node.output[i] = f"{name}__fp32"
            nodes.append(helper.make_node("Cast", [f"{name}__fp32"], [f"{name}__low"], to=low,
                                          name=f"{node.name}__round_{i}"))
            nodes.append(helper.make_node("Cast", [f"{name}__low"], [name], to=TensorProto.FLOAT,
                                          name=f"{node.name}__widen_{i}"))
    del g.node[:]
    g.node.extend(nodes)
    for v in [*g.input, *g.output]:
        if v.type.tensor_type.elem_type in _LOW:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    del g.value_info[:]
    return m


def _touches_low(node: onnx.NodeProto, types: dict[str, int]) -> bool:
    return any(types.get(i) in _LOW for i in node.input if i)


def _widen_attributes(node: onnx.NodeProto) -> None:
    """Cast targets and constant-valued attributes of 16-bit float type become FP32."""
    from onnx import AttributeProto, TensorProto

    for attr in node.attribute:
        if node.op_type == "Cast" and attr.name == "to" and attr.i in _LOW:
            attr.i = TensorProto.FLOAT  # the Cast pair added after the node does the rounding
        elif attr.type == AttributeProto.TENSOR and attr.t.data_type in _LOW:
            if node.op_type not in ("Constant", "ConstantOfShape"):
                raise ModelError(f"cannot evaluate node {node.name!r} ({node.op_type}) as written: "
                                 f"FP16 attribute {attr.name!r}", hint="keep this node in FP32")
            attr.t.CopyFrom(_to_fp32(attr.t))
        elif attr.name == "dtype" and attr.i in _LOW:
            raise ModelError(f"cannot evaluate node {node.name!r} ({node.op_type}) as written: FP16 dtype attribute",
                             hint="keep this node in FP32")


def _to_fp32(tensor: onnx.TensorProto) -> onnx.TensorProto:
    from onnx import numpy_helper

    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)
