"""A STAND-IN TensorRT engine for the GPU check: deploykit's unchanged ``TensorRTSession`` on real
cuda-python and a real GPU, with an "engine" whose enqueue is a CuPy kernel. It is not TensorRT and
proves nothing about TensorRT; it exercises the session's own CUDA paths where no TensorRT is
installed: pinned host staging, async copies on a non-blocking stream, CUDA-graph capture and replay,
the output allocator (a data-dependent output), a host-located output (a shape tensor TensorRT writes
on the host) and several sessions on several threads at once.

The stand-in computes, for an input ``x`` of shape (N, 64) float32:

* ``y = 2 * x + 1`` on the GPU (a CuPy elementwise kernel launched on the session's stream);
* ``y_shape``, x's shape as INT64, written on the host (as TensorRT writes host-located outputs);
* with ``data_dependent``: ``kept = x[x > 0]``, through ``IOutputAllocator.reallocate_output_async``
  and ``notify_shape`` (its size is known only after the kernel ran, so the session must not capture).

``check(seed)`` returns the GPU check's rows (plain dicts). Where numpy, CuPy or cuda-python does not
import (absent, or built for another CUDA major than the driver's), it returns one skip row saying which,
in one line: the GPU check goes on without this section.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
import time
from collections.abc import Iterator
from typing import Any

WIDTH = 64
PROFILE = ((1, WIDTH), (4, WIDTH), (8, WIDTH))
# What the stand-in imports, and what provides it (for the skip reason)
REQUIRES = (
    ("numpy", "numpy"),
    ("cupy", "CuPy (cupy-cuda12x or cupy-cuda13x)"),
    ("cuda.bindings.runtime", "cuda-python (its cuda-bindings wheel, of the driver's CUDA major)"),
)


class _Enum:
    def __init__(self, *names: str) -> None:
        for name in names:
            setattr(self, name, name)


class StandinTrt:
    """The few names of the ``tensorrt`` module the session reads."""

    __version__ = "stand-in (CuPy kernel, not TensorRT)"
    TensorIOMode = _Enum("INPUT", "OUTPUT")
    TensorLocation = _Enum("DEVICE", "HOST")
    IOutputAllocator = type("IOutputAllocator", (), {"__init__": lambda self: None})
    IProfiler = type("IProfiler", (), {"__init__": lambda self: None})

    @staticmethod
    def nptype(dtype: str) -> Any:
        import numpy as np

        return {"FLOAT": np.float32, "INT64": np.int64}[dtype]


class StandinLogger:
    """What the session needs of deploykit's TensorRT logger: ``capture()`` yielding the log records."""

    @contextlib.contextmanager
    def capture(self) -> Iterator[list[tuple[int, str]]]:
        yield []


class StandinEngine:
    def __init__(self, data_dependent: bool = False) -> None:
        self.io = [
            ("x", "INPUT", "FLOAT", (-1, WIDTH), "DEVICE"),
            ("y", "OUTPUT", "FLOAT", (-1, WIDTH), "DEVICE"),
            ("y_shape", "OUTPUT", "INT64", (2,), "HOST"),
        ]
        if data_dependent:
            self.io.append(("kept", "OUTPUT", "FLOAT", (-1,), "DEVICE"))

    @property
    def num_io_tensors(self) -> int:
        return len(self.io)

    def _entry(self, name: str) -> tuple[Any, ...]:
        return next(e for e in self.io if e[0] == name)

    def get_tensor_name(self, i: int) -> str:
        return self.io[i][0]

    def get_tensor_mode(self, name: str) -> str:
        return self._entry(name)[1]

    def get_tensor_dtype(self, name: str) -> str:
        return self._entry(name)[2]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name)[3]

    def get_tensor_location(self, name: str) -> str:
        return self._entry(name)[4]

    def get_tensor_profile_shape(self, name: str, profile: int) -> tuple[tuple[int, ...], ...]:
        return PROFILE

    def create_execution_context(self) -> StandinContext:
        return StandinContext(self)


class StandinContext:
    """Binds addresses like ``IExecutionContext``; ``execute_async_v3`` launches the CuPy kernel."""

    _affine: Any = None

    def __init__(self, engine: StandinEngine) -> None:
        self.engine, self.shapes, self.addresses, self.allocators = engine, {}, {}, {}
        self.enqueues = 0

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        ok = len(shape) == 2 and shape[1] == WIDTH and PROFILE[0][0] <= shape[0] <= PROFILE[2][0]
        if ok:
            self.shapes[name] = tuple(int(d) for d in shape)
        return ok

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        x = self.shapes.get("x", (-1, WIDTH))
        return {"x": x, "y": x, "y_shape": (2,), "kept": (-1,)}[name]

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.addresses[name] = int(address)
        return True

    def set_output_allocator(self, name: str, allocator: Any) -> bool:
        self.allocators[name] = allocator
        return True

    def execute_async_v3(self, stream: int) -> bool:
        import cupy as cp
        import numpy as np

        if StandinContext._affine is None:
            StandinContext._affine = cp.ElementwiseKernel(
                "float32 x", "float32 y", "y = 2.0f * x + 1.0f", "deploykit_standin_affine"
            )
        n = int(np.prod(self.shapes["x"]))
        x, y = (_device_array(self.addresses[k], n, cp.float32) for k in ("x", "y"))
        with cp.cuda.ExternalStream(stream):
            StandinContext._affine(x, y)
            if "kept" in self.allocators:
                kept = x[x > 0]  # a data-dependent size (cupy syncs for it: never inside capture)
                allocator = self.allocators["kept"]
                pointer = allocator.reallocate_output_async("kept", 0, max(kept.nbytes, 1), 256, stream)
                if not pointer:
                    return False
                cp.cuda.runtime.memcpyAsync(
                    pointer, kept.data.ptr, kept.nbytes, cp.cuda.runtime.memcpyDeviceToDevice, stream
                )
                allocator.notify_shape("kept", (int(kept.size),))
        host = (ctypes.c_int64 * 2).from_address(self.addresses["y_shape"])  # TensorRT writes these on the host
        host[0], host[1] = self.shapes["x"]
        self.enqueues += 1
        return True


def _device_array(address: int, count: int, dtype: Any) -> Any:
    import cupy as cp

    nbytes = count * cp.dtype(dtype).itemsize
    memory = cp.cuda.UnownedMemory(address, nbytes, owner=None)
    return cp.ndarray((count,), dtype, cp.cuda.MemoryPointer(memory, 0))


def session(data_dependent: bool = False) -> Any:
    from cuda.bindings import runtime as cudart

    from deploykit.backends.trt_session import TensorRTSession

    return TensorRTSession(
        StandinTrt,
        StandinEngine(data_dependent),
        {"gpu": "stand-in", "cuda_graphs": True},
        StandinLogger(),
        cudart=cudart,
    )


def _reference(x: Any) -> dict[str, Any]:
    import numpy as np

    return {"y": 2 * x + 1, "y_shape": np.array(x.shape, np.int64), "kept": x[x > 0]}


def _agree(got: dict[str, Any], x: Any) -> str:
    """ "" when every output matches the numpy reference, else what differs."""
    import numpy as np

    want = _reference(x)
    for name, value in got.items():
        if value.shape != want[name].shape or not np.allclose(value, want[name], rtol=1e-6, atol=1e-6):
            return f"{name}: {value.shape} vs {want[name].shape}"
    return ""


def _row(case: str, ok: bool, detail: str, **extra: Any) -> dict[str, Any]:
    return {
        "case": f"session (stand-in engine): {case}",
        "status": "pass" if ok else "fail",
        "detail": detail,
        **extra,
    }


def unavailable() -> str:
    """Why the stand-in cannot run in this Python, in one line ("" when numpy, CuPy and cuda-python import)."""
    for module, provider in REQUIRES:
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - ImportError, or a binary module failing to load here
            said = (str(e).strip().splitlines() or [""])[0][:160]
            return f"{provider} does not import in this Python ({type(e).__name__}: {said})"
    return ""


def check(seed: int = 0) -> list[dict[str, Any]]:
    why = unavailable()
    if why:
        return [{"case": "session (stand-in engine)", "status": "skip", "detail": f"not run: {why}"}]
    import numpy as np
    from cuda.bindings import runtime as cudart

    rng = np.random.default_rng(seed)
    rows = []
    s = session()
    wrong = [
        f"batch {n}: {why}"
        for n in (1, 4, 8)
        if (why := _agree(s.infer(x := rng.standard_normal((n, WIDTH)).astype(np.float32)), x))
    ]
    rows.append(
        _row(
            "infer at the profile's min/opt/max",
            not wrong,
            "; ".join(wrong) or "y, host-located y_shape and every batch match numpy",
        )
    )
    memory = s._memory["x"]  # the session's staging buffer for x: it must be pinned
    err, attributes = cudart.cudaPointerGetAttributes(memory.host)
    pinned = int(err) == 0 and attributes.type == cudart.cudaMemoryType.cudaMemoryTypeHost
    err, flags = cudart.cudaStreamGetFlags(s._stream)
    rows.append(
        _row(
            "pinned staging, async copies on a non-blocking stream",
            pinned and int(flags) == 1,
            f"staging memory type {getattr(attributes, 'type', '?')}, stream flags {flags}",
        )
    )
    x = rng.standard_normal((4, WIDTH)).astype(np.float32)
    run = s.engine_timed_runner({"x": x})
    before = s._context.enqueues
    start = time.perf_counter()
    for _ in range(100):
        run()
    engine_us = (time.perf_counter() - start) * 1e4
    replayed = s.runner_info.get("mode") == "cuda-graph" and s._context.enqueues == before
    got = s.infer({"x": x})
    rows.append(
        _row(
            "CUDA-graph capture and replay",
            replayed and not _agree(got, x),
            f"runner {s.runner_info}; 100 replays, {engine_us:.1f} us each, no enqueue during replay "
            f"({s._context.enqueues - before} seen)",
        )
    )
    timed = s.timed_runner({"x": x})
    start = time.perf_counter()
    for _ in range(100):
        timed()
    rows.append(
        _row(
            "end-to-end runner (H2D, graph, D2H)",
            True,
            f"{(time.perf_counter() - start) * 1e4:.1f} us per call at batch 4",
        )
    )
    s.close()
    d = session(data_dependent=True)
    x = rng.standard_normal((8, WIDTH)).astype(np.float32)
    got = d.infer({"x": x})
    d.engine_timed_runner({"x": x})
    rows.append(
        _row(
            "output allocator (data-dependent output)",
            not _agree(got, x) and d.runner_info.get("mode") == "enqueue",
            f"kept {got['kept'].shape[0]} of {x.size} values; runner {d.runner_info}",
        )
    )
    d.close()
    rows.append(_threads(rng))
    return rows


def _threads(rng: Any, count: int = 4, rounds: int = 20) -> dict[str, Any]:
    """Several sessions (each its own context and stream) running at once on threads."""
    import numpy as np

    inputs = [
        [rng.standard_normal((int(rng.integers(1, 9)), WIDTH)).astype(np.float32) for _ in range(rounds)]
        for _ in range(count)
    ]
    problems: list[str] = []

    def work(k: int) -> None:
        try:
            s = session()
            for i, x in enumerate(inputs[k]):
                why = _agree(s.infer({"x": x}), x)
                if why:
                    problems.append(f"thread {k} round {i}: {why}")
            s.close()
        except Exception as e:  # noqa: BLE001 - reported as the row's failure
            problems.append(f"thread {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return _row(
        f"{count} sessions on {count} threads",
        not problems,
        "; ".join(problems[:3]) or f"{count} x {rounds} inferences, every one matches numpy",
    )
