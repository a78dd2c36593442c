"""Which TensorRT headers the plugin glue is compiled against: those of the TensorRT that will load it.

The glue's ABI follows the headers' major version (TensorRT 11 moved ``ILogger`` onto
``IVersionedInterface``), so a library compiled against the fetched 10.14 headers must not be what a
TensorRT 11 user gets. In order:

1. ``--tensorrt-include DIR``: used as given, refused when it is another major than the installed TensorRT;
2. with TensorRT installed: the first headers found of its major (exact minor preferred) in
   ``$TENSORRT_INCLUDE_DIR``, ``$TENSORRT_ROOT/include``, the wheels' own ``include`` folders (where a
   wheel ships one), the system include folders, then the fetched set; none of that major: no glue,
   and the reason says where it looked;
3. without TensorRT (a CPU machine compiling for a compile check): the first headers found.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from deploykit.errors import ConfigError

Version = tuple[int, int, int]
_WHEEL_PACKAGES = ("tensorrt_libs", "tensorrt_cu13_libs", "tensorrt_cu12_libs", "tensorrt")
_SYSTEM_DIRS = (
    "/usr/include/x86_64-linux-gnu",
    "/usr/include/aarch64-linux-gnu",
    "/usr/include",
    "/usr/local/tensorrt/include",
    "/opt/tensorrt/include",
)
_DISTRIBUTIONS = (
    "tensorrt",
    "tensorrt-cu13",
    "tensorrt-cu12",
    "tensorrt-cu13-bindings",
    "tensorrt-cu12-bindings",
    "tensorrt_libs",
)


@dataclass(frozen=True)
class Headers:
    include_dir: str  # "" when none fits: the TensorRT plugin library is then not built
    version: Version | None
    why: str  # how they were chosen, or why there are none


def header_version(include_dir: str | Path) -> Version | None:
    """(major, minor, patch) from ``NvInferVersion.h``, following its macro indirections; None if absent."""
    path = Path(include_dir) / "NvInferVersion.h"
    if not (Path(include_dir) / "NvInferRuntime.h").is_file() or not path.is_file():
        return None
    defines = dict(re.findall(r"^\s*#\s*define\s+(\w+)\s+(\w+)", path.read_text(errors="replace"), re.M))

    def value(name: str) -> int | None:
        for _ in range(8):  # NV_TENSORRT_MAJOR -> TRT_MAJOR_ENTERPRISE -> 10
            name = defines.get(name, name)
            if name.isdigit():
                return int(name)
        return None

    parts = [value(f"NV_TENSORRT_{p}") for p in ("MAJOR", "MINOR", "PATCH")]
    return (parts[0], parts[1], parts[2] or 0) if parts[0] is not None and parts[1] is not None else None


def installed_tensorrt() -> str:
    """The installed TensorRT's version from package metadata (no import: it needs a driver), or ""."""
    for dist in _DISTRIBUTIONS:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


def candidates(fetched: Path | None = None) -> list[tuple[Path, str]]:
    """Include folders to look in, most specific first, each with where it came from."""
    out = []
    if os.environ.get("TENSORRT_INCLUDE_DIR"):
        out.append((Path(os.environ["TENSORRT_INCLUDE_DIR"]), "$TENSORRT_INCLUDE_DIR"))
    if os.environ.get("TENSORRT_ROOT"):
        out.append((Path(os.environ["TENSORRT_ROOT"]) / "include", "$TENSORRT_ROOT/include"))
    for package in _WHEEL_PACKAGES:
        spec = importlib.util.find_spec(package)  # locates without importing
        for folder in (spec.submodule_search_locations or []) if spec else []:
            out.append((Path(folder) / "include", f"the {package} wheel"))
    out += [(Path(d), "the system") for d in _SYSTEM_DIRS]
    if fetched is not None:
        out.append((fetched, "the fetched public headers (plugins/tools/fetch_trt_headers.sh)"))
    return out


def choose(explicit: str, installed: str, found: Iterable[tuple[Path, str]]) -> Headers:
    """The headers to compile the glue against (see the module docstring).

    Args:
        explicit: ``--tensorrt-include`` ("" when not given).
        installed: the installed TensorRT version ("" when none).
        found: :func:`candidates`.

    Raises:
        ConfigError: ``explicit`` holds no TensorRT headers, or headers of another major than ``installed``.
    """
    major = int(installed.split(".")[0]) if installed[:1].isdigit() else None
    if explicit:
        version = header_version(explicit)
        if version is None:
            raise ConfigError(
                f"--tensorrt-include {explicit}: no NvInferRuntime.h and NvInferVersion.h there",
                hint="give the folder that holds TensorRT's NvInfer*.h headers",
            )
        if major is not None and version[0] != major:
            raise ConfigError(
                f"--tensorrt-include {explicit} holds the TensorRT {_text(version)} headers but TensorRT "
                f"{installed} is installed: a plugin library must be compiled against the headers of "
                "the TensorRT major it runs with",
                hint=f"give TensorRT {installed}'s include folder",
            )
        return Headers(str(explicit), version, f"given with --tensorrt-include ({_text(version)})")
    seen = [(folder, where, header_version(folder)) for folder, where in found]
    usable = [(f, w, v) for f, w, v in seen if v is not None]
    if major is None:
        if not usable:
            return Headers("", None, "no TensorRT headers found (set TENSORRT_ROOT or pass --tensorrt-include)")
        folder, where, version = usable[0]
        return Headers(
            str(folder),
            version,
            f"no TensorRT installed here: compiled against {where} "
            f"({_text(version)}) as a compile check; build again where TensorRT runs",
        )
    minor = _minor(installed)
    same = sorted((f for f in usable if f[2][0] == major), key=lambda f: f[2][1] != minor)
    if same:
        folder, where, version = same[0]
        return Headers(str(folder), version, f"TensorRT {installed} installed: {where} ({_text(version)})")
    looked = "; ".join(f"{w}: {f} ({_text(v) if v else 'none'})" for f, w, v in seen)
    return Headers(
        "",
        None,
        f"TensorRT {installed} is installed but no TensorRT {major}.x headers were found "
        f"({looked}); the TensorRT plugin library is not built: {published(installed)}",
    )


def published(installed: str) -> str:
    """Where the headers of TensorRT ``installed`` are, in one line (the pip wheels ship none)."""
    major, minor = installed.split(".")[0], _minor(installed)
    tag = f"v{major}.{minor}" if minor >= 0 else f"v{major}.x"
    return (
        f"pip's TensorRT wheels ship no headers; TensorRT {major}.x's are in NVIDIA's TensorRT repository "
        f"(github.com/NVIDIA/TensorRT, tag {tag}, folder include/, Apache-2.0) and in the TensorRT tar/deb "
        f"packages: `deploykit plugins build --tensorrt-include <that>/include`"
    )


def _minor(version: str) -> int:
    parts = version.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1


def _text(version: Version) -> str:
    return ".".join(map(str, version))
