"""Every ONNX Runtime session deploykit makes is made here, and every session is a :class:`Session`.

Makers are named by what goes in and what comes out (Polygraphy's ``SessionFromOnnx`` style):

* :func:`session_from_onnx` — a graph (a model, or the path of one) on the CPU, computed the way an
  **evaluator** says (:data:`~deploykit.choices.Evaluator`):

  - ``as_written``: the graph's own numerics, which is what TensorRT computes up to kernel
    rounding. ONNX Runtime runs with every graph optimization off, so each Q/DQ node runs as the
    reference kernel it is; graphs with FP16/BF16 tensors run emulated (:mod:`deploykit.graph.emulate`).
  - ``onnxruntime``: what ONNX Runtime's CPU kernels compute at an optimization level (what the
    ``onnxruntime`` CPU target ships), with the rewrites that are wrong for FP8 graphs disabled.

  A quantization flavour names its evaluator (``deploykit.quant.flavours.QuantFlavour.evaluator``).
* :func:`session_from_engine` — the onnxruntime backend's saved model on an execution provider.
* :func:`optimize_offline` — ONNX Runtime's offline-optimized graph written to a file (the build).
* :func:`provider_problem` — whether an execution provider really starts here.

Feeds are checked once for every backend (:func:`check_feeds`; the TensorRT session is a
:class:`Session` too): names, dtypes, ranks and fixed dims against the declared specs, with a
:class:`~deploykit.errors.DataError` naming the tensor.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.choices import Evaluator, OptimizationLevel, Provider, listed, values
from deploykit.errors import DataError, ModelError, UsageError, first_line

if TYPE_CHECKING:
    import onnx

PROVIDERS: dict[str, str] = dict(
    zip(values(Provider), ("CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"), strict=True)
)
_LEVELS = dict(
    zip(
        values(OptimizationLevel),
        ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"),
        strict=True,
    )
)
_ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint64)": "uint64",
    "tensor(uint32)": "uint32",
    "tensor(uint16)": "uint16",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}
_CPU = ["CPUExecutionProvider"]


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its name, numpy dtype name (or the runtime's own type name), and shape
    (a fixed size per axis, or the name of a dynamic dim)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]


class SessionError(ModelError):
    """ONNX Runtime refused a graph; ``detail`` is the first line of what it said."""

    def __init__(self, message: str, *, hint: str = "", detail: str = "") -> None:
        super().__init__(message, hint=hint)
        self.detail = detail


def check_feeds(
    specs: Sequence[TensorSpec], feeds: Mapping[str, Any], subject: str = "the engine", *, extra_ok: bool = False
) -> None:
    """Raise a DataError naming the tensor when ``feeds`` do not fit ``specs``.

    Checked: every input is fed (and nothing else, unless ``extra_ok``); each array's dtype, rank
    and fixed dims. Values that are not arrays (sequences, optionals) and types numpy cannot name
    are left to the runtime; so is the rank of an input whose shape the runtime does not know.
    """
    expected = {s.name for s in specs}
    if not expected <= set(feeds) or (not extra_ok and set(feeds) != expected):
        raise DataError(
            f"feeds {sorted(feeds)} do not match {subject}'s inputs {sorted(expected)}",
            hint=f"pass exactly one array per input of {subject}",
        )
    for spec in specs:
        value = feeds[spec.name]
        if not isinstance(value, np.ndarray):
            continue
        want = _numpy_dtype(spec.dtype)
        if want is not None and value.dtype != want:
            raise DataError(
                f"input {spec.name!r} is {value.dtype}, {subject} expects {want}",
                hint=f"convert the feed (numpy .astype) to {subject}'s input dtype",
            )
        if not spec.shape:
            continue  # a scalar, or a rank the runtime does not know
        if value.ndim != len(spec.shape):
            raise DataError(
                f"input {spec.name!r} has shape {list(value.shape)}, {subject} expects rank "
                f"{len(spec.shape)} ({list(spec.shape)})"
            )
        for axis, (size, dim) in enumerate(zip(value.shape, spec.shape, strict=True)):
            if isinstance(dim, int) and dim >= 0 and size != dim:
                raise DataError(f"input {spec.name!r} axis {axis} is {size}, {subject} was built for {dim}")


def _numpy_dtype(name: str) -> np.dtype | None:
    try:
        return np.dtype(name)
    except TypeError:
        return None  # BF16, FP8, "tensor(string)": nothing numpy can compare with


class Session:
    """A loaded graph or engine, ready to run (what parity, gate and the quantizer talk to).

    ``inputs``/``outputs`` give the specs, :meth:`check_feeds` validates feeds against them,
    ``infer`` runs once, ``timed_runner`` returns a zero-argument callable for the gate's timing
    loop. :class:`OrtSession` implements it for ONNX Runtime; the TensorRT backend's session too.
    """

    evaluator: str = ""  # what computes the numbers, for reports ("onnxruntime 1.24 CPUExecutionProvider")
    subject: str = "the engine"  # how feed errors name what was fed
    extra_feeds_ok: bool = False  # whether feeds may hold arrays the session does not take

    @property
    def inputs(self) -> list[TensorSpec]:
        raise NotImplementedError

    @property
    def outputs(self) -> list[TensorSpec]:
        raise NotImplementedError

    def check_feeds(self, feeds: Mapping[str, Any]) -> None:
        """Raise a DataError naming the tensor when ``feeds`` do not fit :attr:`inputs`."""
        check_feeds(self.inputs, feeds, self.subject, extra_ok=self.extra_feeds_ok)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; outputs by name, as host numpy arrays."""
        raise NotImplementedError

    def timed_runner(self, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
        """A zero-argument callable that runs one inference on ``feeds`` with the least overhead."""
        raise NotImplementedError


class OrtSession(Session):
    """An ONNX Runtime session behind the :class:`Session` interface.

    ``declared`` (tensor -> numpy dtype) is the signature of the graph as the caller wrote it: an
    emulated graph takes FP16 inputs as FP32 (exact) and gives FP16 outputs back as FP16 (already
    rounded), so callers see the graph's own types.
    """

    def __init__(
        self,
        session: Any,
        evaluator: str,
        *,
        declared: Mapping[str, str] | None = None,
        subject: str = "the model",
        extra_feeds_ok: bool = False,
    ) -> None:
        self._session = session
        self.evaluator, self.subject, self.extra_feeds_ok = evaluator, subject, extra_feeds_ok
        self._declared = dict(declared or {})
        self._output_names = [o.name for o in session.get_outputs()]
        self._feed_types = {i.name: i.type for i in session.get_inputs()}
        self._inputs = [self._spec(i) for i in session.get_inputs()]
        self._outputs = [self._spec(o) for o in session.get_outputs()]

    @property
    def inputs(self) -> list[TensorSpec]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[TensorSpec]:
        return list(self._outputs)

    def _spec(self, arg: Any) -> TensorSpec:
        shape = tuple(d if isinstance(d, int) else str(d) for d in (arg.shape or ()))
        return TensorSpec(arg.name, self._declared.get(arg.name) or _ORT_DTYPES.get(arg.type, arg.type), shape)

    def _feeds(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Checked feeds for the session; FP16 feeds of an emulated graph become FP32 (exact)."""
        self.check_feeds(feeds)
        return {
            k: v.astype(np.float32)
            if self._feed_types[k] == "tensor(float)" and isinstance(v, np.ndarray) and v.dtype != np.float32
            else v
            for k, v in feeds.items()
            if k in self._feed_types
        }

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for name, value in self.run_all(feeds).items():
            want = self._declared.get(name)
            out[name] = (
                value.astype(want) if want and isinstance(value, np.ndarray) and value.dtype.name != want else value
            )
        return out

    def run_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Outputs without converting back to the declared dtype (taps read intermediates this way)."""
        prepared = self._feeds(feeds)
        try:
            values_ = self._session.run(self._output_names, prepared)
        except Exception as e:  # ORT's Fail/InvalidArgument/RuntimeException name the node that failed
            raise ModelError(
                f"ONNX Runtime failed to run {self.subject} on inputs {_describe(prepared)}: {first_line(e)}",
                hint="`deploykit inspect` shows the graph; check the dims the config allows",
            ) from e
        return dict(zip(self._output_names, values_, strict=True))

    def timed_runner(self, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
        self.run_all(feeds)  # a failure is a clean error here, never inside a timing loop
        run, names, prepared = self._session.run, self._output_names, self._feeds(feeds)
        return lambda: run(names, prepared)

    def end_profiling(self) -> str:
        """Stop ONNX Runtime's profiler (a session made with ``profile_prefix``); return its JSON file."""
        return str(self._session.end_profiling())


def _describe(feeds: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{k}={list(getattr(v, 'shape', ()))} {getattr(v, 'dtype', type(v).__name__)}" for k, v in feeds.items()
    )


# -- making sessions -----------------------------------------------------------------------------


def session_from_onnx(
    model: onnx.ModelProto | str | Path,
    evaluator: Evaluator = "as_written",
    *,
    level: OptimizationLevel = "extended",
    threads: int = 0,
    expose: Iterable[str] = (),
    quiet: bool = False,
    failure: str = "",
    hint: str = "",
    profile_prefix: str | None = None,
    spin: bool = True,
) -> OrtSession:
    """A CPU session computing ``model`` the way ``evaluator`` says (see the module docstring).

    Args:
        model: an ONNX model, or the path of one (its external data beside it).
        evaluator: ``as_written`` or ``onnxruntime``.
        level: the optimization level of the ``onnxruntime`` evaluator (``as_written`` runs with every
            optimization off); at ``disabled`` it runs the graph's nodes one by one, as the reference.
        threads: intra-op threads (0: ONNX Runtime's choice).
        expose: intermediate tensors to add as outputs (taps and per-layer diagnoses read them).
        quiet: silence ONNX Runtime's own log (probing nodes that are expected to fail).
        failure: how a refusal starts (default: the path, or "ONNX Runtime cannot run the graph").
        hint: what a refusal tells the user to do.
        profile_prefix: ONNX Runtime records a per-node profile of every run to
            ``<prefix>_<time>.json`` (:meth:`OrtSession.end_profiling` returns the path); the
            ``onnxruntime`` evaluator only (the per-kernel times of what ships).
        spin: the intra-op threads spin-wait for the next run (ONNX Runtime's default: the lowest
            latency back to back, what timing measures). Off for sessions whose runs alternate with
            Python work (calibration taps, quantization judges): the spinning threads take the core
            numpy needs (a 2-core VM under load: metrics between inferences 1.7x slower, inferences too).

    Raises:
        SessionError: ONNX Runtime refused the graph.
    """
    if evaluator not in values(Evaluator):
        raise UsageError(f"evaluator {evaluator!r}: use {listed(Evaluator)}")
    if level not in _LEVELS:
        raise UsageError(f"optimization level {level!r}: use {listed(OptimizationLevel)}")
    default = (
        f"{model}: ONNX Runtime cannot load the model"
        if isinstance(model, (str, Path))
        else "ONNX Runtime cannot run the graph"
    )
    refusal = (failure or default, hint or "check the opset and custom ops with `deploykit inspect`")
    expose = tuple(expose)
    if evaluator == "as_written":
        if profile_prefix is not None:
            raise UsageError("profile_prefix: profiling times ONNX Runtime's kernels, use the onnxruntime evaluator")
        return _as_written(_proto(model), threads, expose, quiet, refusal, spin)
    return _as_ort_computes(model, level, threads, expose, quiet, refusal, profile_prefix, spin)


def _as_written(
    model: onnx.ModelProto,
    threads: int,
    expose: tuple[str, ...],
    quiet: bool,
    refusal: tuple[str, str],
    spin: bool = True,
) -> OrtSession:
    import onnxruntime as ort

    from deploykit.graph.emulate import (
        declared_dtypes,
        emulate_fp16,
        has_float8,
        has_low_precision_float,
        move_float8_as_float,
    )
    from deploykit.graph.fold import fold_constant_chains
    from deploykit.graph.proto import expose_tensors

    emulate = has_low_precision_float(model)
    graph = emulate_fp16(model) if emulate else model
    if has_float8(graph):
        graph = move_float8_as_float(graph)
    graph, _ = fold_constant_chains(graph, keep=expose)
    if expose:
        graph = expose_tensors(graph, expose)
    how = "FP16 tensors emulated (FP32 compute, each FP16 tensor rounded to FP16)" if emulate else "FP32 graph"
    session = _from_proto(graph, session_options("disabled", threads, quiet=quiet, spin=spin), (), refusal)
    return OrtSession(
        session,
        f"as written: {how}; onnxruntime {ort.__version__} CPU, graph optimizations off",
        declared=declared_dtypes(model),
        extra_feeds_ok=True,
    )


def _as_ort_computes(
    model: onnx.ModelProto | str | Path,
    level: str,
    threads: int,
    expose: tuple[str, ...],
    quiet: bool,
    refusal: tuple[str, str],
    profile_prefix: str | None = None,
    spin: bool = True,
) -> OrtSession:
    import onnxruntime as ort

    from deploykit.graph.emulate import ort_disabled_optimizers
    from deploykit.graph.proto import expose_tensors

    options = session_options(level, threads, quiet=quiet, spin=spin)
    if profile_prefix is not None:
        options.enable_profiling, options.profile_file_prefix = True, profile_prefix
    if isinstance(model, (str, Path)) and not expose and level == "disabled":
        # The reference: no optimizer runs, so none needs disabling; ONNX Runtime reads the file itself.
        session, disabled = _inference_session(str(model), options, _CPU, (), refusal), ()
    else:
        proto = _proto(model)
        disabled = ort_disabled_optimizers(proto)
        session = _from_proto(expose_tensors(proto, expose) if expose else proto, options, disabled, refusal)
    if level == "disabled":
        evaluator = f"onnxruntime {ort.__version__} CPU, optimizations off"
    else:
        note = f", {', '.join(disabled)} disabled (FP8 graph)" if disabled else ""
        evaluator = f"onnxruntime {ort.__version__} CPU kernels at optimization level {level}{note}"
    return OrtSession(session, evaluator, extra_feeds_ok=True)


def session_from_engine(
    path: Path,
    evaluator: str,
    *,
    provider: Provider = "cpu",
    level: OptimizationLevel = "disabled",
    threads: int = 0,
    profile_prefix: str | None = None,
) -> OrtSession:
    """The onnxruntime backend's saved model at ``path``, on ``provider`` (CPU as fallback), at ``level``.

    ``profile_prefix``: ONNX Runtime records a per-node profile of every run to ``<prefix>_<time>.json``
    (:meth:`OrtSession.end_profiling` returns the path).
    """
    providers = [PROVIDERS[provider]] + (_CPU if provider != "cpu" else [])
    options = session_options(level, threads)
    if profile_prefix is not None:
        options.enable_profiling, options.profile_file_prefix = True, profile_prefix
    session = _inference_session(
        str(path),
        options,
        providers,
        (),
        (f"{path}: ONNX Runtime cannot load the model", "check the opset and custom ops with `deploykit inspect`"),
    )
    return OrtSession(session, evaluator, subject="the engine")


def optimize_offline(onnx_path: Path, out_path: Path, *, level: OptimizationLevel, threads: int = 0) -> tuple[str, ...]:
    """Write ONNX Runtime's CPU-optimized graph of ``onnx_path`` at ``level`` to ``out_path``.

    Returns the optimizer rules it disabled (FP8 graphs: ``ReluQuantRewrite``, which computes them wrongly).
    """
    import onnx

    from deploykit.graph.emulate import ort_disabled_optimizers

    disabled = ort_disabled_optimizers(onnx.load(str(onnx_path), load_external_data=False))
    options = session_options(level, threads)
    options.optimized_model_filepath = str(out_path)
    _inference_session(
        str(onnx_path),
        options,
        _CPU,
        disabled,
        (
            f"{onnx_path}: ONNX Runtime cannot build the model",
            "check the opset and custom ops with `deploykit inspect`",
        ),
    )
    return disabled


# Intra-op threads of every session made without a count: several jobs sharing a machine's cores (CI
# runners, parallel test workers) each take a share instead of one thread per core each.
THREADS_ENV = "DEPLOYKIT_ORT_THREADS"


def default_threads() -> int:
    """``$DEPLOYKIT_ORT_THREADS`` (unset or 0: ONNX Runtime's choice, one per core)."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or int(raw) > 1024:
        raise UsageError(
            f"{THREADS_ENV}={raw!r}: expected a thread count from 0 to 1024",
            hint="0 (or unset) lets ONNX Runtime use one thread per core",
        )
    return int(raw)


def session_options(level: OptimizationLevel, threads: int = 0, *, quiet: bool = False, spin: bool = True) -> Any:
    """ONNX Runtime session options at an optimization level; ORT's own warnings off (``quiet``: all of it).
    ``threads`` 0: :func:`default_threads`; ``spin``: see :func:`session_from_onnx`."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
    opts.intra_op_num_threads = threads or default_threads()
    opts.log_severity_level = 4 if quiet else 3  # ORT's warnings go to stderr and drown our own output
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


def _proto(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    if isinstance(model, (str, Path)):
        from deploykit.graph.files import load_model

        return load_model(Path(model))
    return model


def _from_proto(model: onnx.ModelProto, options: Any, disabled: tuple[str, ...], refusal: tuple[str, str]) -> Any:
    """A session over an in-memory model, its large weights handed over as arrays beside the graph's
    bytes (:func:`~deploykit.graph.files.session_source`); one marked for external data or too large
    for protobuf goes through a temporary file."""
    import onnxruntime as ort

    from deploykit.graph.files import as_file, session_source

    data, weights = session_source(model)
    if data is None:
        with as_file(model) as path:
            return _inference_session(str(path), options, _CPU, disabled, refusal)
    if weights:
        options.add_external_initializers(
            list(weights), [ort.OrtValue.ortvalue_from_numpy(w) for w in weights.values()]
        )
    return _inference_session(data, options, _CPU, disabled, refusal)


def _inference_session(
    source: str | bytes, options: Any, providers: list[str], disabled: tuple[str, ...], refusal: tuple[str, str]
) -> Any:
    """The one place an ``onnxruntime.InferenceSession`` over a model is made (:mod:`deploykit.graph.fold`
    opens its own over a weight subgraph, apart from the evaluators it serves)."""
    import onnxruntime as ort

    try:
        return ort.InferenceSession(source, options, providers=providers, disabled_optimizers=list(disabled))
    except Exception as e:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
        detail = first_line(e)
        raise SessionError(f"{refusal[0]}: {detail}", hint=refusal[1], detail=detail) from e


# -- execution providers -------------------------------------------------------------------------


@functools.cache
def provider_problem(provider: Provider) -> str:
    """Why ONNX Runtime's ``provider`` cannot run here, or "" when it really starts.

    onnxruntime-gpu lists the CUDA and TensorRT providers even where their libraries or the GPU are
    missing, then silently falls back to the CPU; so start a one-node session and see what it got.
    """
    import onnxruntime as ort

    name = PROVIDERS[provider]
    if name not in ort.get_available_providers():
        return f"this onnxruntime build has no {name} (install onnxruntime-gpu)"
    if provider == "cpu":
        return ""
    try:
        with (
            _captured_stderr() as log,
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            session = _inference_session(_identity_model(), None, [name, *_CPU], (), (name, ""))
    except SessionError as e:
        return f"{name} cannot start: {e.detail[:300]}"
    if session.get_providers()[0] == name:
        return ""
    lines = [ln for ln in log[0].splitlines() if "error" in ln.lower()]
    detail = re.sub(r"\x1b\[[0-9;]*m", "", lines[0]).split("FAIL : ")[-1].strip() if lines else "it did not start"
    return f"{name} cannot start: {detail[:300]}"


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """ORT's C++ logger writes to file descriptor 2; capture it to read the reason a provider failed."""
    out: list[str] = []
    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            out.append(f.read().decode(errors="replace"))


def _identity_model() -> bytes:
    from onnx import TensorProto, helper

    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in ("x", "y")]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", vi[:1], vi[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


__all__ = [
    "PROVIDERS",
    "OrtSession",
    "Session",
    "SessionError",
    "TensorSpec",
    "check_feeds",
    "optimize_offline",
    "provider_problem",
    "session_from_engine",
    "session_from_onnx",
    "session_options",
]
