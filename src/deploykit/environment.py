"""What this machine is: tool versions and the device, read without importing heavy libraries."""

from __future__ import annotations

import functools
import platform
import sys
from importlib import metadata

_TOOLS = ("deploykit", "torch", "onnx", "onnxruntime-gpu", "onnxruntime", "onnxscript",
          "onnx-graphsurgeon", "nvidia-modelopt", "tensorrt", "cuda-python")


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

    return {"model": model, "machine": platform.machine(), "cores": os.cpu_count() or 1,
            "features": sorted(f for f in flags if f in wanted)}


def device_fingerprint() -> dict[str, object]:
    """The CPU as it matters to results and timings (model name and SIMD features)."""
    info = cpu_info()
    return {"type": "cpu", "model": info["model"], "machine": info["machine"], "features": info["features"],
            "os": sys.platform}


def platform_names() -> list[str]:
    """Names a gate target may be keyed by, most specific first; ``default`` last."""
    return [f"cpu:{cpu_info()['model']}", "cpu", "default"]
