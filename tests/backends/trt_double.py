"""TEST DOUBLES of the small TensorRT and cuda-python surfaces deploykit uses. Not TensorRT.

``FakeTensorRT`` stands in for the ``tensorrt`` module and records every call the backend makes
(``fake.calls``), so tests can check how a config is translated into builder settings and how
failures are reported. ``FakeCudart`` stands in for ``cuda.bindings.runtime``: "device" memory is
ordinary host memory, and the fake engine computes ``y = 2 * x``. Nothing here builds or runs a
TensorRT engine; a test that passes with these doubles says nothing about TensorRT's behaviour,
only about deploykit's code around it. Tests against real TensorRT are marked ``tensorrt``.
"""

from __future__ import annotations

import ctypes
import enum
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

INSPECTOR_10 = {
    "Layers": [
        {
            "Name": "conv1",
            "LayerType": "CaskConvolution",
            "Inputs": [{"Name": "x", "Format/Datatype": "Row major linear FP32"}],
            "Outputs": [{"Name": "y", "Format/Datatype": "Row major linear FP32"}],
            "TacticName": "sm80_xmma",
        }
    ],
    "Bindings": ["x", "y"],
}


class Severity(enum.IntEnum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


def _enum(name: str, *members: str) -> type[enum.IntEnum]:
    return enum.IntEnum(name, {m: i for i, m in enumerate(members)})


@dataclass
class Scenario:
    """What the fake TensorRT does; tests change fields to provoke each path."""

    version: str = "10.13.3.9"
    inputs: dict[str, list[int]] = field(default_factory=lambda: {"x": [-1, 3, 8, 8]})
    shape_tensor_inputs: tuple[str, ...] = ()
    parse_errors: list[dict[str, Any]] = field(default_factory=list)  # non-empty: parse_from_file fails
    unsupported: list[int] = field(default_factory=list)  # node indices supports_model_v2 rejects
    build_log: list[tuple[int, str]] = field(default_factory=list)  # messages logged during the build
    build_fails: bool = False
    cache_accepted: bool = True
    inspector: dict[str, Any] = field(default_factory=lambda: INSPECTOR_10)
    deserialize_fails_with: str = ""  # a log message; non-empty: deserialize_cuda_engine returns None
    data_dependent_output: bool = False
    shape_output: bool = False  # a second output ``y_shape`` (INT64, host-located): x's shape, as TensorRT writes it
    capture_fails: bool = False
    plugin_library_creators: tuple[tuple[str, str, str], ...] = ()  # what ctypes-loading a library registers
    vc_plugin_libraries: tuple[str, ...] = ()  # what parser.get_used_vc_plugin_libraries() returns
    # report_to_profiler: layer name -> ms reported per run (run i reports ms * (1 + i / 100)), as IProfiler would
    layer_ms: dict[str, float] = field(default_factory=lambda: {"conv1": 0.5})


class FakeTensorRT:
    """A recording stand-in for the ``tensorrt`` module (see the module docstring: not TensorRT)."""

    ILogger = type("ILogger", (), {"__init__": lambda self: None})
    IProfiler = type("IProfiler", (), {"__init__": lambda self: None})
    IOutputAllocator = type("IOutputAllocator", (), {"__init__": lambda self: None})
    NetworkDefinitionCreationFlag = _enum("NetworkDefinitionCreationFlag", "EXPLICIT_BATCH", "STRONGLY_TYPED")
    MemoryPoolType = _enum("MemoryPoolType", "WORKSPACE")
    HardwareCompatibilityLevel = _enum("HardwareCompatibilityLevel", "NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY")
    ProfilingVerbosity = _enum("ProfilingVerbosity", "LAYER_NAMES_ONLY", "NONE", "DETAILED")
    BuilderFlag = _enum(
        "BuilderFlag",
        "TF32",
        "REFIT",
        "SPARSE_WEIGHTS",
        "VERSION_COMPATIBLE",
        "EXCLUDE_LEAN_RUNTIME",
        "STRIP_PLAN",
        "REFIT_IDENTICAL",
        "ERROR_ON_TIMING_CACHE_MISS",
    )
    TensorIOMode = _enum("TensorIOMode", "NONE", "INPUT", "OUTPUT")
    LayerInformationFormat = _enum("LayerInformationFormat", "ONELINE", "JSON")
    DataType = _enum("DataType", "FLOAT", "HALF", "INT8", "INT32", "BF16", "INT64")
    TensorLocation = _enum("TensorLocation", "DEVICE", "HOST")

    def __init__(self, scenario: Scenario | None = None) -> None:
        self.scenario = scenario or Scenario()
        self.__version__ = self.scenario.version
        self.calls: list[tuple[Any, ...]] = []
        self.registry = FakeRegistry(self)
        self.cudart = FakeCudart()  # the fake engine "runs" in this fake CUDA runtime
        self.last_context: FakeContext | None = None

    def record(self, *call: Any) -> None:
        self.calls.append(call)

    def called(self, name: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == name]

    # module-level functions
    def Builder(self, logger: Any) -> FakeBuilder:  # noqa: N802 - mirrors tensorrt.Builder
        self.record("Builder")
        return FakeBuilder(self, logger)

    def OnnxParser(self, network: Any, logger: Any) -> FakeParser:  # noqa: N802
        return FakeParser(self, logger)

    def Runtime(self, logger: Any) -> FakeRuntime:  # noqa: N802
        return FakeRuntime(self, logger)

    def get_plugin_registry(self) -> FakeRegistry:
        return self.registry

    def init_libnvinfer_plugins(self, logger: Any, namespace: str) -> bool:
        self.record("init_libnvinfer_plugins", namespace)
        return True

    def nptype(self, dtype: Any) -> type:
        table = {
            self.DataType.FLOAT: np.float32,
            self.DataType.HALF: np.float16,
            self.DataType.INT8: np.int8,
            self.DataType.INT32: np.int32,
            self.DataType.INT64: np.int64,
        }
        if dtype not in table:
            raise TypeError(f"Could not resolve TensorRT datatype to an equivalent numpy datatype: {dtype}")
        return table[dtype]


@dataclass
class Creator:
    name: str
    plugin_version: str
    plugin_namespace: str


class FakeRegistry:
    def __init__(self, trt: FakeTensorRT) -> None:
        self._trt = trt
        self.all_creators: list[Creator] = [Creator("ROIAlign_TRT", "2", "")]

    def load_library(self, path: str) -> Any:
        self._trt.record("load_library", path)
        return None


class FakeTensor:
    def __init__(self, name: str, shape: list[int], is_shape_tensor: bool) -> None:
        self.name, self.shape, self.is_shape_tensor = name, shape, is_shape_tensor


class FakeNetwork:
    def __init__(self, trt: FakeTensorRT) -> None:
        sc = trt.scenario
        self._inputs = [FakeTensor(n, s, n in sc.shape_tensor_inputs) for n, s in sc.inputs.items()]
        self.num_inputs = len(self._inputs)

    def get_input(self, i: int) -> FakeTensor:
        return self._inputs[i]


class FakeBuilder:
    def __init__(self, trt: FakeTensorRT, logger: Any) -> None:
        self._trt, self._logger = trt, logger

    def create_network(self, flags: int) -> FakeNetwork:
        self._trt.record("create_network", flags)
        return FakeNetwork(self._trt)

    def create_builder_config(self) -> FakeConfig:
        return FakeConfig(self._trt)

    def create_optimization_profile(self) -> FakeProfile:
        return FakeProfile(self._trt)

    def build_serialized_network(self, network: Any, config: FakeConfig) -> bytes | None:
        sc = self._trt.scenario
        self._trt.record("build_serialized_network")
        for severity, msg in sc.build_log:
            self._logger.log(Severity(severity), msg)
        if sc.build_fails:
            return None
        config.timing_cache_entries += 1
        return b"FAKE-PLAN-NOT-A-TENSORRT-ENGINE"


class FakeTimingCache:
    def __init__(self, data: bytes, entries: int = 0) -> None:
        self.data, self.entries = data, entries

    def serialize(self) -> bytes:
        return self.data + b"+entry" * self.entries


class FakeConfig:
    def __init__(self, trt: FakeTensorRT) -> None:
        self._trt = trt
        self.flags: set[Any] = {trt.BuilderFlag.TF32}  # TensorRT enables TF32 by default
        self.timing_cache: FakeTimingCache | None = None
        self.timing_cache_entries = 0
        self.profiles: list[FakeProfile] = []

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name not in ("flags", "timing_cache", "timing_cache_entries", "profiles"):
            self._trt.record("config." + name, value)
        super().__setattr__(name, value)

    def set_memory_pool_limit(self, pool: Any, size: int) -> None:
        self._trt.record("set_memory_pool_limit", pool, size)

    def set_flag(self, flag: Any) -> None:
        self._trt.record("set_flag", flag)
        self.flags.add(flag)

    def clear_flag(self, flag: Any) -> None:
        self._trt.record("clear_flag", flag)
        self.flags.discard(flag)

    def get_flag(self, flag: Any) -> bool:
        return flag in self.flags

    def add_optimization_profile(self, profile: FakeProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, data: bytes) -> FakeTimingCache:
        self._trt.record("create_timing_cache", bytes(data))
        if data.startswith(b"CORRUPT"):
            raise RuntimeError("invalid timing cache")
        return FakeTimingCache(bytes(data))

    def set_timing_cache(self, cache: FakeTimingCache, ignore_mismatch: bool) -> bool:
        self._trt.record("set_timing_cache", cache.data, ignore_mismatch)
        if cache.data and not self._trt.scenario.cache_accepted:
            return False
        self.timing_cache = cache
        return True

    def get_timing_cache(self) -> FakeTimingCache:
        assert self.timing_cache is not None
        return FakeTimingCache(self.timing_cache.data, self.timing_cache_entries)


class FakeProfile:
    def __init__(self, trt: FakeTensorRT) -> None:
        self._trt = trt

    def set_shape(self, name: str, lo: Any, opt: Any, hi: Any) -> None:
        self._trt.record("set_shape", name, tuple(lo), tuple(opt), tuple(hi))


@dataclass
class FakeParserError:
    index: int
    name: str
    op: str
    error_code: str
    text: str

    def node(self) -> int:
        return self.index

    def node_name(self) -> str:
        return self.name

    def node_operator(self) -> str:
        return self.op

    def code(self) -> str:
        return f"ErrorCode.{self.error_code}"

    def desc(self) -> str:
        return self.text


class FakeParser:
    def __init__(self, trt: FakeTensorRT, logger: Any) -> None:
        self._trt, self._errors = trt, []
        self.num_subgraphs = 0
        self._subgraphs: list[tuple[list[int], bool]] = []

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, i: int) -> FakeParserError:
        return self._errors[i]

    def parse_from_file(self, path: str) -> bool:
        self._trt.record("parse_from_file", path)
        self._errors = [FakeParserError(**e) for e in self._trt.scenario.parse_errors]
        return not self._errors

    def get_used_vc_plugin_libraries(self) -> list[str]:
        self._trt.record("get_used_vc_plugin_libraries")
        return list(self._trt.scenario.vc_plugin_libraries)

    def supports_model_v2(self, data: bytes, path: str) -> bool:
        self._trt.record("supports_model_v2", path)
        bad = self._trt.scenario.unsupported
        self._subgraphs = [(bad, False)] if bad else []
        self.num_subgraphs = len(self._subgraphs)
        return not bad

    def is_subgraph_supported(self, i: int) -> bool:
        return self._subgraphs[i][1]

    def get_subgraph_nodes(self, i: int) -> list[int]:
        return self._subgraphs[i][0]


class FakeRuntime:
    def __init__(self, trt: FakeTensorRT, logger: Any) -> None:
        self._trt, self._logger = trt, logger
        self.engine_host_code_allowed = False

    def deserialize_cuda_engine(self, plan: bytes) -> FakeEngine | None:
        self._trt.record("deserialize_cuda_engine", len(plan), self.engine_host_code_allowed)
        if self._trt.scenario.deserialize_fails_with:
            self._logger.log(Severity.ERROR, self._trt.scenario.deserialize_fails_with)
            return None
        return FakeEngine(self._trt)


class FakeInspector:
    def __init__(self, trt: FakeTensorRT) -> None:
        self._trt = trt
        self.execution_context: Any = None

    def get_engine_information(self, fmt: Any) -> str:
        self._trt.record("get_engine_information", self.execution_context is not None)
        return json.dumps(self._trt.scenario.inspector)


class FakeEngine:
    """One input ``x`` (dynamic batch, profile 1..8) and one output ``y = 2 * x``, both float32; with
    ``shape_output``, also ``y_shape`` (INT64, in host memory), as a Shape node's output is in TensorRT."""

    def __init__(self, trt: FakeTensorRT) -> None:
        self._trt = trt
        self._names = ["x", "y"] + (["y_shape"] if trt.scenario.shape_output else [])
        self.num_io_tensors = len(self._names)

    def create_engine_inspector(self) -> FakeInspector:
        return FakeInspector(self._trt)

    def get_tensor_name(self, i: int) -> str:
        return self._names[i]

    def get_tensor_mode(self, name: str) -> Any:
        return self._trt.TensorIOMode.INPUT if name == "x" else self._trt.TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> Any:
        return self._trt.DataType.INT64 if name == "y_shape" else self._trt.DataType.FLOAT

    def get_tensor_shape(self, name: str) -> list[int]:
        if name == "y_shape":
            return [4]
        return [-1, 3, 8, 8] if name == "x" else ([-1] if self._trt.scenario.data_dependent_output else [-1, 3, 8, 8])

    def is_shape_inference_io(self, name: str) -> bool:
        return name == "y_shape"

    def get_tensor_location(self, name: str) -> Any:
        return self._trt.TensorLocation.HOST if name == "y_shape" else self._trt.TensorLocation.DEVICE

    def get_tensor_profile_shape(self, name: str, profile: int) -> list[list[int]]:
        return [[1, 3, 8, 8], [4, 3, 8, 8], [8, 3, 8, 8]]

    def create_execution_context(self) -> FakeContext:
        self._trt.last_context = FakeContext(self._trt)
        return self._trt.last_context


class FakeContext:
    """Computes ``y = 2 * x`` on the host; with ``data_dependent_output``, ``y`` holds only the positive results."""

    def __init__(self, trt: FakeTensorRT) -> None:
        self._trt = trt
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.allocators: dict[str, Any] = {}
        self.enqueues = 0
        self.profiler: Any = None
        self.enqueue_emits_profile = True
        self._reported = 0

    def report_to_profiler(self) -> bool:
        """One report per call of every layer's time (TensorRT reports the last enqueue's)."""
        assert self.profiler is not None and not self.enqueue_emits_profile, "report_to_profiler without a profiler"
        for name, ms in self._trt.scenario.layer_ms.items():
            self.profiler.report_layer_time(name, ms * (1 + self._reported / 100))
        self._reported += 1
        return True

    def set_input_shape(self, name: str, shape: Any) -> bool:
        self._trt.record("set_input_shape", name, tuple(shape))
        if len(shape) != 4 or not 1 <= shape[0] <= 8:
            return False
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name: str) -> list[int]:
        if name == "y_shape":
            return [4]
        if name == "y" and self._trt.scenario.data_dependent_output:
            return [-1]
        return list(self.shapes.get("x", (-1, 3, 8, 8)))

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        self.addresses[name] = ptr
        return True

    def set_output_allocator(self, name: str, allocator: Any) -> bool:
        self.allocators[name] = allocator
        return True

    def execute_async_v3(self, stream: int) -> bool:
        cudart = self._trt.cudart
        if cudart.capturing:
            if self._trt.scenario.capture_fails:
                cudart.capture_broken = True
                return False
            cudart.captured.append(self._run)
            return True
        self._run()
        return True

    def _run(self) -> None:
        self.enqueues += 1
        shape = self.shapes["x"]
        count = int(np.prod(shape))
        x = np.frombuffer((ctypes.c_float * count).from_address(self.addresses["x"]), dtype=np.float32)
        y = 2 * x
        if self._trt.scenario.data_dependent_output:
            y = y[y > 0]
            allocator = self.allocators["y"]
            ptr = allocator.reallocate_output_async("y", 0, max(y.nbytes, 1), 256, 0)
            allocator.notify_shape("y", (y.size,))
        else:
            ptr = self.addresses["y"]
        result = np.ascontiguousarray(y, dtype=np.float32)  # held: memmove must not read a freed temporary
        ctypes.memmove(ptr, result.ctypes.data, result.nbytes)
        if "y_shape" in self.addresses:
            # TensorRT writes a host-located output through a host pointer; given a device address it would
            # write to the wrong memory (a crash on a GPU): the double refuses a device address.
            address = self.addresses["y_shape"]
            if address in self._trt.cudart.device_addresses:
                raise AssertionError("y_shape is host-located but was bound to a device buffer")
            values = np.asarray(shape, dtype=np.int64)
            ctypes.memmove(address, values.ctypes.data, values.nbytes)


class FakeCudart:
    """A stand-in for ``cuda.bindings.runtime``: calls return ``(err, value...)``; device memory is host memory."""

    cudaStreamNonBlocking = 1
    cudaMemcpyKind = _enum(
        "cudaMemcpyKind",
        "cudaMemcpyHostToHost",
        "cudaMemcpyHostToDevice",
        "cudaMemcpyDeviceToHost",
        "cudaMemcpyDeviceToDevice",
    )
    cudaStreamCaptureMode = _enum(
        "cudaStreamCaptureMode",
        "cudaStreamCaptureModeGlobal",
        "cudaStreamCaptureModeThreadLocal",
        "cudaStreamCaptureModeRelaxed",
    )

    def __init__(self) -> None:
        self._buffers: dict[int, Any] = {}
        self._device: set[int] = set()  # addresses handed out by cudaMalloc (the rest is host memory)
        self.capturing = False
        self.capture_broken = False
        self.captured: list[Any] = []
        self.calls: list[str] = []
        self.live_graphs = 0

    def _alloc(self, n: int) -> int:
        buf = ctypes.create_string_buffer(n)
        self._buffers[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def cudaRuntimeGetVersion(self) -> tuple[int, int]:  # noqa: N802 - cuda-python's names
        return 0, 12080

    def cudaGetErrorName(self, err: Any) -> tuple[int, bytes]:  # noqa: N802
        return 0, b"cudaErrorFake"

    def cudaStreamCreateWithFlags(self, flags: int) -> tuple[int, int]:  # noqa: N802
        return 0, 7

    def cudaDeviceGetStreamPriorityRange(self) -> tuple[int, int, int]:  # noqa: N802
        return 0, 0, -5  # (err, least, greatest): lower numbers are more urgent

    def cudaStreamCreateWithPriority(self, flags: int, priority: int) -> tuple[int, int]:  # noqa: N802
        self.calls.append(f"stream priority {priority}")
        return 0, 8

    def cudaMemGetInfo(self) -> tuple[int, int, int]:  # noqa: N802
        return 0, 6 << 30, 8 << 30  # (err, free, total)

    def cudaStreamDestroy(self, stream: Any) -> tuple[int]:  # noqa: N802
        return (0,)

    def cudaStreamSynchronize(self, stream: Any) -> tuple[int]:  # noqa: N802
        self.calls.append("sync")
        return (0,)

    @property
    def device_addresses(self) -> set[int]:
        return set(self._device)

    def cudaMalloc(self, n: int) -> tuple[int, int]:  # noqa: N802
        self.calls.append("malloc")
        ptr = self._alloc(n)
        self._device.add(ptr)
        return 0, ptr

    def cudaMallocHost(self, n: int) -> tuple[int, int]:  # noqa: N802
        return 0, self._alloc(n)

    def cudaFree(self, ptr: int) -> tuple[int]:  # noqa: N802
        self._buffers.pop(ptr, None)
        self._device.discard(ptr)
        return (0,)

    cudaFreeHost = cudaFree

    def cudaMemcpyAsync(self, dst: int, src: int, n: int, kind: Any, stream: Any) -> tuple[int]:  # noqa: N802
        self.calls.append("H2D" if kind == self.cudaMemcpyKind.cudaMemcpyHostToDevice else "D2H")
        ctypes.memmove(dst, src, n)
        return (0,)

    def cudaStreamBeginCapture(self, stream: Any, mode: Any) -> tuple[int]:  # noqa: N802
        self.capturing, self.capture_broken, self.captured = True, False, []
        return (0,)

    def cudaStreamEndCapture(self, stream: Any) -> tuple[int, Any]:  # noqa: N802
        self.capturing = False
        if self.capture_broken:
            return 901, None  # cudaErrorStreamCaptureInvalidated
        return 0, list(self.captured)

    def cudaGraphInstantiate(self, graph: Any, flags: int) -> tuple[int, Any]:  # noqa: N802
        self.live_graphs += 1
        return 0, graph

    def cudaGraphLaunch(self, graph_exec: Any, stream: Any) -> tuple[int]:  # noqa: N802
        self.calls.append("graph")
        for op in graph_exec:
            op()
        return (0,)

    def cudaGraphDestroy(self, graph: Any) -> tuple[int]:  # noqa: N802
        return (0,)

    def cudaGraphExecDestroy(self, graph_exec: Any) -> tuple[int]:  # noqa: N802
        self.live_graphs -= 1
        return (0,)

    def cudaGetLastError(self) -> tuple[int]:  # noqa: N802
        return (0,)


@dataclass(frozen=True)
class FakeGpu:
    index: int = 0
    name: str = "Fake GPU (test double)"
    compute_capability: str = "8.9"
    memory_bytes: int = 24 * 2**30
