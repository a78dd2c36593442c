"""A loaded TensorRT engine, run through cuda-python on a non-blocking stream.

Inputs are staged in pinned host memory and copied asynchronously; outputs with a shape known
after the input shapes are set get preallocated device buffers, data-dependent ones (NMS, NonZero)
an ``IOutputAllocator``. Two timed runners serve the gate: ``engine_timed_runner`` (the engine
alone, as trtexec's "GPU compute time") and ``timed_runner`` (with host<->device copies, as an
application sees it). Both replay a captured CUDA graph when the engine allows capture and fall
back to plain ``execute_async_v3`` when capture fails, saying why in :attr:`runner_info`.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from deploykit.backends.trt_cuda import call, require_cudart
from deploykit.backends.trt_logger import last_lines
from deploykit.errors import DataError, EnvironmentProblem, UsageError
from deploykit.graph.run import Session, TensorSpec


@dataclass(frozen=True)
class IOInfo:
    name: str
    is_input: bool
    dtype: np.dtype | None  # None: numpy cannot hold this TensorRT type (BF16, FP8, INT4)
    trt_dtype: str
    shape: tuple[int, ...]  # -1 = dynamic
    host: bool  # lives in host memory (get_tensor_location is HOST: shape tensors), bound to a numpy array
    profile: tuple[tuple[int, ...], ...] = ()  # (min, opt, max) of profile 0, for dynamic inputs


def engine_io(trt: Any, engine: Any) -> list[IOInfo]:
    """The engine's I/O tensors in engine order."""
    out = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        trt_dtype = engine.get_tensor_dtype(name)
        try:
            dtype: np.dtype | None = np.dtype(trt.nptype(trt_dtype))
        except TypeError:
            dtype = None
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        host = engine.get_tensor_location(name) == trt.TensorLocation.HOST
        profile: tuple[tuple[int, ...], ...] = ()
        if is_input and not host and any(d < 0 for d in shape):
            profile = tuple(tuple(int(d) for d in s) for s in engine.get_tensor_profile_shape(name, 0))
        out.append(IOInfo(name, is_input, dtype, str(trt_dtype).split(".")[-1], shape, host, profile))
    return out


def io_record(info: IOInfo) -> dict[str, Any]:
    """One I/O tensor as plain JSON for ``engine.json``."""
    rec: dict[str, Any] = {
        "name": info.name,
        "mode": "input" if info.is_input else "output",
        "dtype": info.dtype.name if info.dtype is not None else info.trt_dtype,
        "shape": list(info.shape),
    }
    if info.profile:
        rec["profile"] = {"min": list(info.profile[0]), "opt": list(info.profile[1]), "max": list(info.profile[2])}
    return rec


class _Memory:
    """Device memory and a pinned host staging buffer for one tensor, grown on demand."""

    def __init__(self, cudart: Any) -> None:
        self._cudart = cudart
        self.device = self.device_bytes = self.host = self.host_bytes = 0

    def ensure_device(self, nbytes: int) -> bool:
        """Make the device buffer at least ``nbytes``; True when its address changed."""
        if nbytes <= self.device_bytes and self.device:
            return False
        if self.device:
            call(self._cudart, self._cudart.cudaFree(self.device), "cudaFree")
        self.device = int(call(self._cudart, self._cudart.cudaMalloc(max(nbytes, 1)), f"cudaMalloc({nbytes})"))
        self.device_bytes = max(nbytes, 1)
        return True

    def ensure_host(self, nbytes: int) -> None:
        if nbytes <= self.host_bytes and self.host:
            return
        if self.host:
            call(self._cudart, self._cudart.cudaFreeHost(self.host), "cudaFreeHost")
        self.host = int(call(self._cudart, self._cudart.cudaMallocHost(max(nbytes, 1)), f"cudaMallocHost({nbytes})"))
        self.host_bytes = max(nbytes, 1)

    def host_array(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A numpy view of the pinned buffer (valid until the buffer grows)."""
        count = math.prod(shape)
        raw = (ctypes.c_byte * max(count * dtype.itemsize, 1)).from_address(self.host)
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)

    def free(self) -> None:
        if self.device:
            self._cudart.cudaFree(self.device)
        if self.host:
            self._cudart.cudaFreeHost(self.host)
        self.device = self.device_bytes = self.host = self.host_bytes = 0


def _output_allocator(trt: Any, cudart: Any) -> Any:
    """An ``IOutputAllocator`` for outputs whose shape is known only after execution."""

    class OutputAllocator(trt.IOutputAllocator):
        def __init__(self) -> None:
            trt.IOutputAllocator.__init__(self)
            self.memory: dict[str, _Memory] = {}
            self.shapes: dict[str, tuple[int, ...]] = {}
            self.error = ""

        def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int) -> int:
            mem = self.memory.setdefault(tensor_name, _Memory(cudart))
            try:
                mem.ensure_device(size)
            except EnvironmentProblem as e:  # never raise into TensorRT: a 0 pointer fails the enqueue
                self.error = e.message
                return 0
            return mem.device

        def reallocate_output_async(self, tensor_name: str, memory: int, size: int, alignment: int, stream: int) -> int:
            return self.reallocate_output(tensor_name, memory, size, alignment)

        def notify_shape(self, tensor_name: str, shape: Any) -> None:
            self.shapes[tensor_name] = tuple(int(d) for d in shape)

    return OutputAllocator()


def _layer_profiler(trt: Any) -> Any:
    """An ``IProfiler`` collecting each layer's time (ms) per report; never raises into TensorRT."""

    class LayerProfiler(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.times: dict[str, list[float]] = {}

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.times.setdefault(str(layer_name), []).append(float(ms))

    return LayerProfiler()


class TensorRTSession(Session):
    """A deserialized engine with its execution context, stream and buffers (the backend Session)."""

    def __init__(
        self,
        trt: Any,
        engine: Any,
        meta: dict[str, Any],
        logger: Any,
        *,
        runtime: Any = None,
        cudart: Any = None,
        stream_priority: int | None = None,
    ) -> None:
        # The runtime is held because an engine must not outlive the runtime that deserialized it.
        self._trt, self._engine, self._meta, self._logger, self._runtime = trt, engine, meta, logger, runtime
        self._cudart = cudart or require_cudart()
        self._context = engine.create_execution_context()
        if self._context is None:
            raise EnvironmentProblem(
                "TensorRT could not create an execution context for the engine (not enough "
                "free GPU memory for its activations?)",
                hint="free GPU memory, or rebuild with smaller profile max shapes",
            )
        self._stream = _make_stream(self._cudart, stream_priority)
        self._io = engine_io(trt, engine)
        self._memory: dict[str, _Memory] = {}
        self._host_inputs: dict[str, np.ndarray] = {}  # keeps shape-tensor inputs alive while bound
        self._host_outputs: dict[str, np.ndarray] = {}  # host-located outputs: TensorRT writes them here
        self._allocator: Any = None
        self._signature: tuple[Any, ...] = ()
        self._generation = 0
        self._graph_exec: Any = None
        self._graph_generation = -1
        self.runner_info: dict[str, str] = {}
        self.evaluator = (
            f"TensorRT {trt.__version__} on {meta.get('gpu', 'GPU')} "
            f"(compute capability {meta.get('compute_capability', '?')})"
        )

    @property
    def inputs(self) -> list[TensorSpec]:
        return [self._spec(i) for i in self._io if i.is_input]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [self._spec(i) for i in self._io if not i.is_input]

    def _spec(self, info: IOInfo) -> TensorSpec:
        names = self._meta.get("onnx_dims", {}).get(info.name, [])
        shape = tuple(
            d
            if d >= 0
            else (names[a] if a < len(names) and isinstance(names[a], str) and names[a] else f"{info.name}_dim{a}")
            for a, d in enumerate(info.shape)
        )
        return TensorSpec(info.name, info.dtype.name if info.dtype is not None else info.trt_dtype, shape)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on ``feeds``; outputs by name as host arrays."""
        copies = self._stage_inputs(feeds)
        outputs = self._bind_outputs()
        self._copy(copies, "host-to-device")
        self._execute()
        return self._fetch(outputs)

    def engine_timed_runner(self, feeds: dict[str, np.ndarray], cuda_graph: str = "auto") -> Callable[[], None]:
        """A callable timing the engine alone: inputs stay on the device, no copies per call
        (``cuda_graph``: gate.cuda_graph, see :meth:`_launcher`)."""
        copies = self._stage_inputs(feeds)
        self._bind_outputs()
        self._copy(copies, "host-to-device")
        self._sync()
        launch, generation = self._launcher(cuda_graph), self._generation

        def run() -> None:
            self._check_generation(generation)
            launch()
            self._sync()

        return run

    def timed_runner(self, feeds: dict[str, np.ndarray], cuda_graph: str = "auto") -> Callable[[], None]:
        """A callable timing end to end: host-to-device copies, the engine, device-to-host copies."""
        copies = self._stage_inputs(feeds)
        outputs = self._bind_outputs()
        self._copy(copies, "host-to-device")
        self._sync()
        launch, generation = self._launcher(cuda_graph), self._generation
        copies_out = [
            (self._memory[i.name].host, self._memory[i.name].device, _nbytes(i, s))
            for i, s in outputs
            if s is not None and not i.host
        ]
        dynamic = [(i, s) for i, s in outputs if s is None]

        def run() -> None:
            self._check_generation(generation)
            self._copy(copies, "host-to-device")
            launch()
            self._copy(copies_out, "device-to-host")
            self._sync()
            if dynamic:  # their size is known only now
                self._fetch(dynamic)

        return run

    def layer_times(self, feeds: dict[str, np.ndarray], iterations: int, warmup: int = 10) -> dict[str, list[float]]:
        """Per-layer GPU time in ms, one entry per enqueue, from TensorRT's ``IProfiler``.

        Plain enqueues (a profiler cannot see inside a CUDA graph); ``enqueue_emits_profile`` off and
        ``report_to_profiler`` after each synchronised run, as trtexec's ``--dumpProfile`` does, so the
        reporting itself is outside the timed work. The profiler is detached afterwards: the gate's
        timings never run with one attached.
        """
        profiler = _layer_profiler(self._trt)
        copies = self._stage_inputs(feeds)
        self._bind_outputs()
        self._copy(copies, "host-to-device")
        self._sync()
        for _ in range(warmup):
            self._execute()
        self._sync()
        context = self._context
        context.profiler = profiler
        context.enqueue_emits_profile = False
        try:
            for _ in range(iterations):
                self._execute()
                self._sync()
                context.report_to_profiler()
        finally:
            context.enqueue_emits_profile = True
            context.profiler = None
        return {name: list(times) for name, times in profiler.times.items()}

    def layer_information(self) -> str:
        """The engine inspector's JSON for this context: layer shapes resolved for the inputs last bound."""
        inspector = self._engine.create_engine_inspector()
        inspector.execution_context = self._context
        return str(inspector.get_engine_information(self._trt.LayerInformationFormat.JSON))

    def close(self) -> None:
        """Free device and pinned memory, the CUDA graph and the stream."""
        cudart = self._cudart
        self._drop_graph()
        for mem in list(self._memory.values()) + list(getattr(self._allocator, "memory", {}).values()):
            mem.free()
        self._memory.clear()
        if self._stream is not None:
            cudart.cudaStreamDestroy(self._stream)
            self._stream = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down cuda-python already
            pass

    # -- staging ---------------------------------------------------------------------------------

    def _stage_inputs(self, feeds: dict[str, np.ndarray]) -> list[tuple[int, int, int]]:
        """Set input shapes and addresses, fill pinned staging; return the host-to-device copies to issue."""
        inputs = [i for i in self._io if i.is_input]
        for info in inputs:
            if info.dtype is None and info.name in feeds:
                raise DataError(
                    f"input {info.name!r} has TensorRT type {info.trt_dtype}, which numpy cannot hold",
                    hint="cast it to float16/float32 at the graph boundary with a surgery pass",
                )
        self.check_feeds(feeds)  # names, dtypes, ranks, fixed dims: as every backend's session
        copies, changed = [], False
        for info in inputs:
            array = np.ascontiguousarray(feeds[info.name])
            self._check_profile(info, array)
            with self._logger.capture() as records:
                accepted = self._context.set_input_shape(info.name, array.shape)
            if not accepted:
                raise DataError(
                    f"TensorRT rejected shape {list(array.shape)} for input {info.name!r}:\n{last_lines(records)}"
                )
            if info.host:
                self._host_inputs[info.name] = array
                self._context.set_tensor_address(info.name, array.ctypes.data)
                continue
            mem = self._memory.setdefault(info.name, _Memory(self._cudart))
            changed |= mem.ensure_device(array.nbytes)
            mem.ensure_host(array.nbytes)
            mem.host_array(array.dtype, array.shape)[...] = array
            self._context.set_tensor_address(info.name, mem.device)
            copies.append((mem.device, mem.host, array.nbytes))
        self._note_binding(changed, tuple((n, a.shape) for n, a in sorted(feeds.items())))
        return copies

    def _check_profile(self, info: IOInfo, array: np.ndarray) -> None:
        for axis, (size, fixed) in enumerate(zip(array.shape, info.shape, strict=True)):
            if fixed < 0 and info.profile and not info.profile[0][axis] <= size <= info.profile[2][axis]:
                raise DataError(
                    f"input {info.name!r} axis {axis} is {size}, outside the engine's profile "
                    f"[{info.profile[0][axis]}, {info.profile[2][axis]}]",
                    hint="rebuild with wider min/max in 'dims'",
                )

    def _bind_outputs(self) -> list[tuple[IOInfo, tuple[int, ...] | None]]:
        """Bind every output: host memory for host-located ones (shape tensors), a sized device buffer,
        or the output allocator when data-dependent."""
        bound: list[tuple[IOInfo, tuple[int, ...] | None]] = []
        changed = False
        for info in (i for i in self._io if not i.is_input):
            shape = tuple(int(d) for d in self._context.get_tensor_shape(info.name))
            if info.dtype is None:
                raise DataError(
                    f"output {info.name!r} has TensorRT type {info.trt_dtype}, which numpy cannot hold",
                    hint="cast it to float16/float32 at the graph boundary with a surgery pass",
                )
            if info.host:  # TensorRT writes a shape tensor's values on the host: a device pointer would be wrong
                array = self._host_outputs.get(info.name)
                if array is None or array.shape != shape:
                    array = self._host_outputs[info.name] = np.zeros(shape, info.dtype)
                    changed = True
                self._context.set_tensor_address(info.name, array.ctypes.data)
                bound.append((info, shape))
                continue
            if any(d < 0 for d in shape):
                if self._allocator is None:
                    self._allocator = _output_allocator(self._trt, self._cudart)
                self._context.set_output_allocator(info.name, self._allocator)
                bound.append((info, None))
                continue
            mem = self._memory.setdefault(info.name, _Memory(self._cudart))
            changed |= mem.ensure_device(_nbytes(info, shape))
            mem.ensure_host(_nbytes(info, shape))
            self._context.set_tensor_address(info.name, mem.device)
            bound.append((info, shape))
        self._note_binding(changed, ())
        return bound

    def _note_binding(self, addresses_changed: bool, shapes: tuple[Any, ...]) -> None:
        # A captured graph bakes in addresses and shapes: any change makes older runners stale.
        if addresses_changed or (shapes and shapes != self._signature):
            self._generation += 1
            self._drop_graph()
        if shapes:
            self._signature = shapes

    def _check_generation(self, generation: int) -> None:
        if generation != self._generation:
            raise UsageError(
                "this timed runner was made before the session's buffers or input shapes changed",
                hint="create a new runner after infer() with other shapes",
            )

    # -- execution -------------------------------------------------------------------------------

    def _copy(self, copies: list[tuple[int, int, int]], direction: str) -> None:
        cudart = self._cudart
        if direction == "host-to-device":
            kind = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
            for device, host, nbytes in copies:
                call(cudart, cudart.cudaMemcpyAsync(device, host, nbytes, kind, self._stream), "cudaMemcpyAsync H2D")
        else:
            kind = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
            for host, device, nbytes in copies:
                call(cudart, cudart.cudaMemcpyAsync(host, device, nbytes, kind, self._stream), "cudaMemcpyAsync D2H")

    def _execute(self) -> None:
        with self._logger.capture() as records:
            ok = self._context.execute_async_v3(int(self._stream))
        if not ok:
            detail = getattr(self._allocator, "error", "") or last_lines(records)
            raise EnvironmentProblem(
                f"TensorRT failed to run the engine:\n{detail}",
                hint="run `deploykit doctor`; set DEPLOYKIT_LOG=debug to see TensorRT's log",
            )

    def _sync(self) -> None:
        call(self._cudart, self._cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    def _fetch(self, outputs: list[tuple[IOInfo, tuple[int, ...] | None]]) -> dict[str, np.ndarray]:
        """Copy outputs to pinned memory, wait, and return owned copies."""
        plan, host = [], {}
        for info, shape in outputs:
            if info.host:
                host[info.name] = self._host_outputs[info.name]
                continue
            if shape is None:
                shape = self._allocator.shapes[info.name]
                device = self._allocator.memory[info.name].device
            else:
                device = self._memory[info.name].device
            mem = self._memory.setdefault(info.name, _Memory(self._cudart))
            mem.ensure_host(_nbytes(info, shape))
            plan.append((info, shape, mem, device))
        self._sync()  # data-dependent sizes are final only after the enqueue completes
        self._copy([(m.host, dev, _nbytes(i, s)) for i, s, m, dev in plan], "device-to-host")
        self._sync()
        out = {i.name: m.host_array(i.dtype, s).copy() for i, s, m, _ in plan}
        return {**out, **{name: array.copy() for name, array in host.items()}}

    # -- CUDA graphs -----------------------------------------------------------------------------

    def device_memory_used(self) -> int:
        """Bytes in use on this session's GPU (all processes: what cudaMemGetInfo sees), for a soak."""
        free, total = call(self._cudart, self._cudart.cudaMemGetInfo(), "cudaMemGetInfo")
        return int(total) - int(free)

    def _launcher(self, mode: str = "auto") -> Callable[[], None]:
        """Replay a captured CUDA graph when allowed and possible, else enqueue; records which in runner_info.

        ``mode`` is gate.cuda_graph: ``auto`` follows the build's ``cuda_graphs``, ``on`` captures even
        where the build turned it off (trtexec's --useCudaGraph; a failed capture still falls back, and
        says why), ``off`` enqueues."""
        if mode == "off" or (mode == "auto" and not self._meta.get("cuda_graphs", True)):
            where = "gate.cuda_graph is off" if mode == "off" else "cuda_graphs is off in the build options"
            self.runner_info = {"mode": "enqueue", "why": where}
            return self._execute
        if any(not i.is_input and any(int(d) < 0 for d in self._context.get_tensor_shape(i.name)) for i in self._io):
            self.runner_info = {"mode": "enqueue", "why": "data-dependent output shapes cannot be captured"}
            return self._execute
        if self._graph_generation != self._generation:
            why = self._capture_graph()
            if why:
                self.runner_info = {"mode": "enqueue", "why": f"CUDA graph capture failed: {why}"}
                return self._execute
        cudart, graph_exec, stream = self._cudart, self._graph_exec, self._stream
        self.runner_info = {"mode": "cuda-graph", "why": ""}
        return lambda: call(cudart, cudart.cudaGraphLaunch(graph_exec, stream), "cudaGraphLaunch")

    def _capture_graph(self) -> str:
        """Capture one enqueue into a CUDA graph; return "" on success or why it failed."""
        cudart = self._cudart
        # TensorRT applies deferred shape updates on the first enqueue after a change: do it outside capture.
        self._execute()
        self._sync()
        mode = cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        if int(cudart.cudaStreamBeginCapture(self._stream, mode)[0]) != 0:
            cudart.cudaGetLastError()
            return "cudaStreamBeginCapture failed"
        with self._logger.capture() as records:
            enqueued = self._context.execute_async_v3(int(self._stream))
        err, graph = cudart.cudaStreamEndCapture(self._stream)
        if not enqueued or int(err) != 0 or graph is None:
            cudart.cudaGetLastError()  # clear the sticky capture error so plain enqueue works
            if graph is not None and int(err) == 0:
                cudart.cudaGraphDestroy(graph)
            return "the engine cannot be enqueued inside stream capture" + (
                f" ({records[-1][1].strip()})" if records else ""
            )
        err, graph_exec = cudart.cudaGraphInstantiate(graph, 0)
        cudart.cudaGraphDestroy(graph)
        if int(err) != 0:
            cudart.cudaGetLastError()
            return "cudaGraphInstantiate failed"
        self._drop_graph()
        self._graph_exec, self._graph_generation = graph_exec, self._generation
        return ""

    def _drop_graph(self) -> None:
        if self._graph_exec is not None:
            self._cudart.cudaGraphExecDestroy(self._graph_exec)
            self._graph_exec, self._graph_generation = None, -1


def _make_stream(cudart: Any, priority: int | None) -> Any:
    """A non-blocking stream, at ``priority`` when given (clamped to the device's range)."""
    flags = cudart.cudaStreamNonBlocking
    if priority is None:
        return call(cudart, cudart.cudaStreamCreateWithFlags(flags), "cudaStreamCreateWithFlags")
    least, greatest = call(cudart, cudart.cudaDeviceGetStreamPriorityRange(), "cudaDeviceGetStreamPriorityRange")
    clamped = min(max(priority, int(greatest)), int(least))  # CUDA: lower numbers are more urgent
    return call(cudart, cudart.cudaStreamCreateWithPriority(flags, clamped), "cudaStreamCreateWithPriority")


def _nbytes(info: IOInfo, shape: tuple[int, ...]) -> int:
    itemsize = info.dtype.itemsize if info.dtype is not None else 0  # None was refused when binding
    return math.prod(shape) * itemsize
