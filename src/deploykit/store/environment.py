"""What this machine is: tool versions and the device, read without importing heavy libraries."""

from __future__ import annotations

import functools
import platform
import sys
from importlib import metadata

_TOOLS = (
    "deploykit",
    "torch",
    "onnx",
    "onnxruntime-gpu",
    "onnxruntime",
    "onnxscript",
    "onnx-graphsurgeon",
    "nvidia-modelopt",
    "tensorrt",
    "cuda-python",
)


@functools.cache
def tool_versions() -> dict[str, str]:
    """Installed versions of the tools deploykit drives (absent ones are left out)."""
    out = {"python": platform.python_version()}
    for name in _TOOLS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def onnxruntime_version() -> str:
    versions = tool_versions()
    return versions.get("onnxruntime-gpu") or versions.get("onnxruntime", "absent")


@functools.cache
def cpu_info() -> dict[str, str | int | list[str]]:
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = value.split()
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "f16c", "fma")
    import os

    return {
        "model": model,
        "machine": platform.machine(),
        "cores": os.cpu_count() or 1,
        "features": sorted(f for f in flags if f in wanted),
    }


def device_fingerprint() -> dict[str, object]:
    """The CPU as it matters to results and timings (model name and SIMD features)."""
    info = cpu_info()
    return {
        "type": "cpu",
        "model": info["model"],
        "machine": info["machine"],
        "features": info["features"],
        "os": sys.platform,
    }


def platform_names() -> list[str]:
    """Names a gate target may be keyed by, most specific first; ``default`` last."""
    return [f"cpu:{cpu_info()['model']}", "cpu", "default"]


def load_snapshot() -> dict[str, float | None]:
    """The machine's load now: 1-minute load average and the kernel's CPU pressure counter (PSI)."""
    import os
    import time

    stalled = None
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()
        stalled = float(some[-1].split("=")[1])  # microseconds some task waited for a CPU
    except (OSError, IndexError, ValueError):
        pass
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    return {"time": time.monotonic(), "loadavg1": load1, "stalled_us": stalled}


def load_between(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, object]:
    """How busy the machine was between two snapshots, and whether that disturbs a timing.

    ``cpu_pressure`` is the fraction of the time some runnable task waited for a CPU (PSI); where
    the kernel has no PSI the load average stands in (above the CPU count plus this process).
    """
    import os

    cpus = os.cpu_count() or 1
    pressure = None
    elapsed_us = ((after["time"] or 0) - (before["time"] or 0)) * 1e6
    if before["stalled_us"] is not None and after["stalled_us"] is not None and elapsed_us > 0:
        pressure = round(min(1.0, (after["stalled_us"] - before["stalled_us"]) / elapsed_us), 4)
    loads = [v for v in (before["loadavg1"], after["loadavg1"]) if v is not None]
    load1 = round(max(loads), 2) if loads else None
    loaded = pressure > 0.25 if pressure is not None else (load1 is not None and load1 > cpus + 1)
    return {"cpus": cpus, "loadavg1": load1, "cpu_pressure": pressure, "loaded": loaded}
