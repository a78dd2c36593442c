"""The CUDA side of the TensorRT backend: is there a driver and a GPU, and device memory for a session.

Probing uses the driver library (``libcuda.so.1``) through ctypes, so ``deploykit doctor`` and the
backend's availability work without cuda-python and never initialise a CUDA runtime context.
Device memory, streams and CUDA graphs use cuda-python (``cuda.bindings.runtime``; the older
``cuda.cudart`` module of cuda-python < 12.6 is accepted too), whose calls return ``(err, value)``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deploykit.errors import BackendUnavailable, EnvironmentProblem

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
_CUDA_ERROR_NO_DEVICE = 100
_DRIVER_LIBRARY = "libcuda.so.1"
CUDA_PYTHON_HINT = "install it with `pip install 'deploykit[tensorrt]'` (cuda-python matching your CUDA major version)"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str  # "8.6"
    memory_bytes: int


@dataclass(frozen=True)
class DriverProbe:
    """What the CUDA driver reports; ``problem`` is "" when there is a driver and at least one GPU."""

    problem: str = ""
    driver_version: str = ""  # "12.8"
    gpus: list[Gpu] = field(default_factory=list)


def probe_driver(load: Callable[[str], Any] = ctypes.CDLL) -> DriverProbe:
    """Ask the CUDA driver for its version and GPUs, without cuda-python.

    Args:
        load: how to open the driver library (a test passes a fake).

    Returns:
        A :class:`DriverProbe`; its ``problem`` says, in one line, what is missing and what to do.
    """
    try:
        lib = load(_DRIVER_LIBRARY)
    except OSError as e:
        return DriverProbe(
            f"no CUDA driver ({_DRIVER_LIBRARY} cannot be loaded: {e}); install the NVIDIA "
            "driver, or run on a machine with an NVIDIA GPU"
        )
    rc = lib.cuInit(0)
    if rc == _CUDA_ERROR_NO_DEVICE:
        return DriverProbe(
            "no NVIDIA GPU visible to the CUDA driver (cuInit: CUDA_ERROR_NO_DEVICE); check "
            f"`nvidia-smi` and CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}"
        )
    if rc != 0:
        return DriverProbe(
            f"the CUDA driver failed to initialise (cuInit: {_error_name(lib, rc)}); check "
            "`nvidia-smi` and that the driver matches the kernel module"
        )
    version = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    driver = f"{version.value // 1000}.{version.value % 1000 // 10}"
    gpus = _list_gpus(lib)
    if not gpus:
        return DriverProbe(
            "no NVIDIA GPU visible to the CUDA driver (device count is 0); check `nvidia-smi` and CUDA_VISIBLE_DEVICES",
            driver,
        )
    return DriverProbe("", driver, gpus)


def _list_gpus(lib: Any) -> list[Gpu]:
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    gpus = []
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, device)
        cc_major, cc_minor = ctypes.c_int(0), ctypes.c_int(0)
        lib.cuDeviceGetAttribute(ctypes.byref(cc_major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        lib.cuDeviceGetAttribute(ctypes.byref(cc_minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        memory = ctypes.c_size_t(0)
        lib.cuDeviceTotalMem_v2(ctypes.byref(memory), device)
        gpus.append(
            Gpu(ordinal, name.value.decode(errors="replace"), f"{cc_major.value}.{cc_minor.value}", memory.value)
        )
    return gpus


def _error_name(lib: Any, rc: int) -> str:
    name = ctypes.c_char_p()
    if lib.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
        return f"{name.value.decode()} ({rc})"
    return f"error {rc}"


def import_cudart() -> tuple[Any, str]:
    """cuda-python's runtime module, or ``(None, why not and what to do)``."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart  # cuda-python < 12.6
        except ImportError as e:
            return None, f"cuda-python is not importable ({e}); {CUDA_PYTHON_HINT}"
    return cudart, ""


def require_cudart() -> Any:
    """cuda-python's runtime module; raise BackendUnavailable when it is missing."""
    cudart, problem = import_cudart()
    if cudart is None:
        raise BackendUnavailable(problem, hint="run `deploykit doctor`")
    return cudart


def runtime_version(cudart: Any) -> str:
    """The CUDA runtime version cuda-python was built for ("12.8"), or "" if it cannot tell."""
    err, value = cudart.cudaRuntimeGetVersion()
    if int(err) != 0 or not value:
        return ""
    return f"{value // 1000}.{value % 1000 // 10}"


def call(cudart: Any, result: Any, what: str) -> Any:
    """Unwrap a cuda-python ``(err, value...)`` tuple; raise EnvironmentProblem naming the call on error."""
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(err) != 0:
        _, name = cudart.cudaGetErrorName(err)
        text = name.decode() if isinstance(name, bytes) else str(err)
        hint = (
            "free GPU memory or lower the batch size / profile max shapes"
            if "MemoryAllocation" in text
            else "run `deploykit doctor` to check the driver and GPU"
        )
        raise EnvironmentProblem(f"CUDA call {what} failed: {text}", hint=hint)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest
