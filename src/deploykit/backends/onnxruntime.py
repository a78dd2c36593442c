"""ONNX Runtime on the CPU: the embedded default backend that runs everywhere.

The engine is the offline-optimized model plus ``engine.json`` holding the session options it was
optimized for; loading it runs that graph as saved, with no further graph rewrites.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.base import Availability, TensorSpec
from deploykit.config import BuildConfig
from deploykit.environment import device_fingerprint, onnxruntime_version
from deploykit.errors import BackendUnavailable, ModelError, first_line

ENGINE_MODEL = "model.onnx"
ENGINE_JSON = "engine.json"
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}
_ORT_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int64)": "int64",
               "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool",
               "tensor(double)": "float64"}


@functools.cache
def provider_status(provider: str) -> Availability:
    """Whether an execution provider really starts here.

    onnxruntime-gpu lists the CUDA and TensorRT providers even where their libraries or the GPU are
    missing, then silently falls back to the CPU; so start a one-node session and see what it got.
    """
    import onnxruntime as ort

    name = PROVIDERS[provider]
    if name not in ort.get_available_providers():
        return Availability(False, f"this onnxruntime build has no {name} (install onnxruntime-gpu)")
    if provider == "cpu":
        return Availability(True, version=ort.__version__)
    with _captured_stderr() as log, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        session = ort.InferenceSession(_identity_model(), providers=[name, "CPUExecutionProvider"])
    if session.get_providers()[0] == name:
        return Availability(True, version=ort.__version__)
    lines = [ln for ln in log[0].splitlines() if "error" in ln.lower()]
    detail = re.sub(r"\x1b\[[0-9;]*m", "", lines[0]).split("FAIL : ")[-1].strip() if lines else "it did not start"
    return Availability(False, f"{name} cannot start: {detail[:300]}")


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


def session_options(level: str, threads: int = 0) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3  # ORT's warnings go to stderr and drown our own output
    return opts


def open_session(path: Path, level: str = "disabled", threads: int = 0, provider: str = "cpu") -> Any:
    """An ONNX Runtime session; errors name the file and say what ORT rejected."""
    import onnxruntime as ort

    providers = [PROVIDERS[provider]] + (["CPUExecutionProvider"] if provider != "cpu" else [])
    try:
        return ort.InferenceSession(str(path), session_options(level, threads), providers=providers)
    except Exception as e:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"{path}: ONNX Runtime cannot load the model: {first}",
                         hint="check the opset and custom ops with `deploykit inspect`") from e


class OnnxRuntimeSession:
    def __init__(self, session: Any, evaluator: str) -> None:
        self._session = session
        self.evaluator = evaluator
        self._output_names = [o.name for o in session.get_outputs()]

    @property
    def inputs(self) -> list[TensorSpec]:
        return [_spec(i) for i in self._session.get_inputs()]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [_spec(o) for o in self._session.get_outputs()]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outputs = self._session.run(self._output_names, feeds)
        except Exception as e:  # ORT's Fail/InvalidArgument/RuntimeException name the node that failed
            raise ModelError(f"ONNX Runtime failed to run the model on inputs {_describe(feeds)}: {first_line(e)}",
                             hint="`deploykit inspect` shows the graph; check the dims the config allows") from e
        return dict(zip(self._output_names, outputs, strict=True))

    def timed_runner(self, feeds: dict[str, np.ndarray]) -> Any:
        self.infer(feeds)  # a failure is a clean error here, never inside a timing loop
        run, names = self._session.run, self._output_names
        return lambda: run(names, feeds)


def _describe(feeds: dict[str, np.ndarray]) -> str:
    return ", ".join(f"{k}={list(getattr(v, 'shape', ()))} {getattr(v, 'dtype', type(v).__name__)}"
                     for k, v in feeds.items())


class OnnxRuntimeBackend:
    name = "onnxruntime"
    device_specific = False  # except at level "all": see build_fingerprint

    def availability(self) -> Availability:
        try:
            import onnxruntime as ort
        except ImportError as e:
            return Availability(False, f"onnxruntime is not importable ({e}); reinstall deploykit")
        return Availability(True, version=ort.__version__)

    def build_fingerprint(self, options: BuildConfig) -> dict[str, Any]:
        status = provider_status(options.provider)
        if not status.available:
            raise BackendUnavailable(f"onnxruntime provider {options.provider!r}: {status.reason}",
                                     hint="use build.provider: cpu, or run `deploykit doctor`")
        env: dict[str, Any] = {"onnxruntime": onnxruntime_version(), "provider": options.provider}
        if options.optimization_level == "all":
            # ORT_ENABLE_ALL writes layout (NCHWc) nodes chosen for this CPU: not portable.
            env["device"] = device_fingerprint()
        return env

    def build(self, onnx_path: Path, options: BuildConfig, out_dir: Path) -> dict[str, Any]:
        import onnxruntime as ort

        # GPU providers rewrite the graph for themselves at load time: save only portable rewrites.
        level = options.optimization_level if options.provider == "cpu" else "basic"
        opts = session_options(level, options.intra_op_threads)
        opts.optimized_model_filepath = str(out_dir / ENGINE_MODEL)
        disabled = _unsafe_optimizers(onnx_path)
        try:
            ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=list(disabled))
        except Exception as e:
            first = first_line(e)
            raise ModelError(f"{onnx_path}: ONNX Runtime cannot build the model: {first}",
                             hint="check the opset and custom ops with `deploykit inspect`") from e
        engine = {"backend": self.name, "onnxruntime": ort.__version__, "provider": options.provider,
                  "optimization_level": level, "intra_op_threads": options.intra_op_threads,
                  "disabled_optimizers": list(disabled)}
        (out_dir / ENGINE_JSON).write_text(json.dumps(engine, indent=2, sort_keys=True))
        return engine

    def load(self, engine_dir: Path) -> OnnxRuntimeSession:
        engine = json.loads((engine_dir / ENGINE_JSON).read_text())
        provider = engine["provider"]
        if provider == "cpu":  # the saved graph is already optimized: run it as written
            session = open_session(engine_dir / ENGINE_MODEL, "disabled", engine["intra_op_threads"])
        else:
            status = provider_status(provider)
            if not status.available:
                raise BackendUnavailable(f"{engine_dir}: engine needs onnxruntime provider {provider!r}: {status.reason}")
            session = open_session(engine_dir / ENGINE_MODEL, "all", engine["intra_op_threads"], provider)
        return OnnxRuntimeSession(session, f"onnxruntime {engine['onnxruntime']} {PROVIDERS[provider]} "
                                           f"(optimized offline at {engine['optimization_level']})")


def _unsafe_optimizers(onnx_path: Path) -> tuple[str, ...]:
    """ORT rewrites that compute FP8 graphs wrongly (ReluQuantRewrite drops a Relu before an FP8 quantizer)."""
    import onnx

    from deploykit.quant.evaluate import ort_disabled_optimizers

    return ort_disabled_optimizers(onnx.load(str(onnx_path), load_external_data=False))


def reference_session(path: Path) -> OnnxRuntimeSession:
    """The graph evaluated as written (no graph optimizations): the FP32 reference."""
    import onnxruntime as ort

    return OnnxRuntimeSession(open_session(path, "disabled"), f"onnxruntime {ort.__version__} CPU, optimizations off")


def _spec(arg: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) else str(d) for d in (arg.shape or ()))
    return TensorSpec(arg.name, _ORT_DTYPES.get(arg.type, arg.type), shape)
