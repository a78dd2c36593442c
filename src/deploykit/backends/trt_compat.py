"""TensorRT versions: importing it, what this code supports, and whether a plan can run here.

deploykit supports TensorRT 10.12+ and 11.x. Every TensorRT name the backend uses exists in both
(checked by ``tests/backends/test_tensorrt.py`` against the real 10.13 and 11.4 bindings); the one
behaviour that differs is the strongly typed network, which :func:`network_creation_flags` handles.
Nothing here imports TensorRT at module import time.
"""

from __future__ import annotations

import re
from importlib import metadata
from types import ModuleType
from typing import Any

from deploykit.errors import EngineIncompatible

__all__ = ["EngineIncompatible"]  # raised here; part of the error tree in deploykit.errors

MIN_VERSION = (10, 12)
INSTALL_HINT = "install it with `pip install 'deploykit[tensorrt]'` on a Linux machine with an NVIDIA GPU"


def parse_version(text: str) -> tuple[int, ...]:
    """``"10.13.3.9"`` -> ``(10, 13, 3, 9)``; trailing non-numeric parts (``"11.0.0rc1"``) are dropped."""
    parts = []
    for piece in str(text).split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


def import_tensorrt() -> tuple[ModuleType | None, str]:
    """Import ``tensorrt``; return ``(module, "")`` or ``(None, why it failed and what to do)``."""
    try:
        import tensorrt
    except ModuleNotFoundError as e:
        if e.name and e.name != "tensorrt":
            return None, f"TensorRT failed to import: a module it needs is missing ({e}); reinstall tensorrt"
        return None, f"TensorRT is not importable (no module named 'tensorrt'); {INSTALL_HINT}"
    except (ImportError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, (
            f"TensorRT is installed but its libraries failed to load ({first}); reinstall the "
            "tensorrt wheel matching your CUDA major version (tensorrt-cu12 or tensorrt-cu13)"
        )
    return tensorrt, ""


def version_problem(version: str) -> str:
    """Why this TensorRT version is not supported, or "" when it is."""
    parsed = parse_version(version)
    if len(parsed) < 2 or parsed[:2] < MIN_VERSION:
        return (
            f"TensorRT {version} is too old: deploykit needs TensorRT "
            f"{MIN_VERSION[0]}.{MIN_VERSION[1]}+ or 11.x (strongly typed networks); upgrade tensorrt"
        )
    return ""


def major(trt: Any) -> int:
    """The major version of an imported TensorRT module."""
    return parse_version(trt.__version__)[0]


def network_creation_flags(trt: Any) -> int:
    """Flags for ``builder.create_network``: a strongly typed network on every supported version.

    TensorRT 11 builds only strongly typed networks (the flag is accepted and ignored there), so it is
    passed on 10.x only: precision then comes from the ONNX graph (casts, Q/DQ) on both versions.
    """
    if major(trt) >= 11:
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)


def tensorrt_cuda_flavour() -> str:
    """Which CUDA major the installed TensorRT wheels target ("cu12", "cu13"), or "" if unknown."""
    for dist in (
        "tensorrt-cu13",
        "tensorrt-cu12",
        "tensorrt-cu13-libs",
        "tensorrt-cu12-libs",
        "tensorrt_cu13_libs",
        "tensorrt_cu12_libs",
    ):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        return "cu13" if "cu13" in dist else "cu12"
    return ""


def cuda_python_version() -> str:
    """The installed cuda-python version ("13.0.1"; its major is the CUDA major it targets), or ""."""
    for dist in ("cuda-bindings", "cuda-python"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


# The oldest driver branch that runs each CUDA major (minor-version compatibility holds within a major).
_DRIVER_FOR_CUDA = {12: "R525", 13: "R580"}


def cuda_version_problem(driver_cuda: str, tensorrt_cuda: str, cuda_python: str) -> str:
    """Why the CUDA driver cannot run the TensorRT wheel or cuda-python, or "" when it can.

    A cu13 TensorRT wheel on a driver that supports only CUDA 12 fails first inside ``trt.Builder``
    ("CUDA initialization failure with error: 35"); this names the three versions instead.

    Args:
        driver_cuda: the newest CUDA the driver supports, from ``cuDriverGetVersion`` ("12.8").
        tensorrt_cuda: the TensorRT wheel's flavour ("cu12", "cu13"; "" unknown).
        cuda_python: cuda-python's version ("13.0.1"; "" unknown).
    """
    driver = parse_version(driver_cuda)
    needs = {"TensorRT": _cuda_major(tensorrt_cuda.removeprefix("cu")), "cuda-python": _cuda_major(cuda_python)}
    too_new = {what: major for what, major in needs.items() if major and driver and major > driver[0]}
    if not too_new:
        return ""
    newest = max(too_new.values())
    older = driver[0]
    parts = [
        f"TensorRT is built for CUDA {needs['TensorRT'] or '?'} ({tensorrt_cuda or 'flavour unknown'})",
        f"cuda-python {cuda_python or '(not installed)'} targets CUDA {needs['cuda-python'] or '?'}",
    ]
    return (
        f"the NVIDIA driver supports CUDA up to {driver_cuda}, but {' and '.join(parts)}: "
        f"{', '.join(too_new)} cannot start on this driver; update the driver to "
        f"{_DRIVER_FOR_CUDA.get(newest, 'a branch for CUDA ' + str(newest))} or newer, or install the "
        f"CUDA {older} builds (pip install tensorrt-cu{older} 'cuda-python>={older},<{older + 1}')"
    )


def _cuda_major(version: str) -> int:
    parsed = parse_version(version)
    return parsed[0] if parsed else 0


def parse_compute_capability(text: str) -> tuple[int, int]:
    """``"8.6"`` -> ``(8, 6)``."""
    major_s, _, minor_s = str(text).partition(".")
    return int(major_s), int(minor_s or 0)


def check_engine_compatible(recorded: dict[str, Any], here: dict[str, Any], where: str) -> None:
    """Raise :class:`EngineIncompatible` when the plan described by ``recorded`` cannot run ``here``.

    TensorRT itself only says "the version tag does not match"; this names both sides and the fix.

    Args:
        recorded: ``engine.json`` of the plan (keys ``tensorrt``, ``compute_capability``, ``gpu``,
            ``version_compatible``, ``hardware_compatibility``).
        here: the current environment (keys ``tensorrt``, ``compute_capability``, ``gpu``).
        where: the engine folder, for the message.
    """
    _check_tensorrt_version(recorded, here, where)
    _check_device(recorded, here, where)


def _check_tensorrt_version(recorded: dict[str, Any], here: dict[str, Any], where: str) -> None:
    built, current = str(recorded["tensorrt"]), str(here["tensorrt"])
    rebuild = "rebuild the engine on this machine (rerun `deploykit build`, or pass --rebuild-incompatible)"
    if recorded.get("version_compatible") and not excludes_lean_runtime(recorded):
        # The plan carries its own lean runtime, which any later TensorRT loads (10.x plans run on 11.x too).
        if parse_version(current) < parse_version(built):
            raise EngineIncompatible(
                f"{where}: the plan was built version-compatible with TensorRT {built}, which runs only on "
                f"TensorRT {built} or later; this machine has TensorRT {current}",
                hint=rebuild,
            )
        return
    if built != current:
        lean = (
            " without its lean runtime (EXCLUDE_LEAN_RUNTIME, which deploykit no longer sets): it needs that "
            "version's lean runtime, which deploykit does not load"
            if recorded.get("version_compatible")
            else ""
        )
        raise EngineIncompatible(
            f"{where}: the plan was built with TensorRT {built}{lean} but this machine has TensorRT {current}; "
            "a TensorRT plan runs only on the exact version that built it",
            hint=rebuild + ", or build with build.tensorrt.version_compatible: true",
        )


def excludes_lean_runtime(recorded: dict[str, Any]) -> bool:
    """Whether an engine was built with EXCLUDE_LEAN_RUNTIME (by an older deploykit)."""
    return "EXCLUDE_LEAN_RUNTIME" in (recorded.get("settings") or {}).get("flags", [])


def _check_device(recorded: dict[str, Any], here: dict[str, Any], where: str) -> None:
    built_cc = parse_compute_capability(recorded["compute_capability"])
    current_cc = parse_compute_capability(here["compute_capability"])
    level = recorded.get("hardware_compatibility", "none")
    gpus = (
        f"built on {recorded.get('gpu', '?')} (compute capability {recorded['compute_capability']}), "
        f"this machine has {here.get('gpu', '?')} (compute capability {here['compute_capability']})"
    )
    if level == "ampere_plus":
        if current_cc < (8, 0):
            raise EngineIncompatible(
                f"{where}: the plan is hardware-compatible with Ampere and newer GPUs only; " + gpus,
                hint="rebuild the engine on this machine",
            )
        return
    if built_cc != current_cc:
        raise EngineIncompatible(
            f"{where}: the plan was {gpus}; a plan runs only on the compute capability it was built for",
            hint="rebuild the engine on this machine, or build with build.tensorrt.hardware_compatibility: ampere_plus",
        )
