"""``deploykit plugins build``: configure and build ``plugins/`` with CMake, cached by source digest.

A build folder holds ``deploykit-build.json``: the digest of every source file plus the options that
change the output, and the digest of each library built. A rerun whose digest matches and whose
libraries are unchanged does nothing; anything else rebuilds (CMake itself then recompiles only
what changed). A lock keeps two processes from building into one folder at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from deploykit.errors import EnvironmentProblem
from deploykit.plugins import trt_headers
from deploykit.plugins.descriptions import plugins_source
from deploykit.store.hashing import digest_file, digest_value

STAMP = "deploykit-build.json"
STAMP_VERSION = 2
# What the project can build, by file name (plugins/README.md, "Build").
OUTPUTS = {
    "cpu": "libdeploykit_plugins_cpu.so",
    "cuda": "libdeploykit_plugins_cuda.so",
    "tensorrt": "libdeploykit_plugins.so",
    "gpu_check": "deploykit_gpu_check",
    "trt_glue_check": "deploykit_trt_glue_check",
}
_SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh", ".txt", ".yaml", ".sh", ".cmake"}


@dataclass(frozen=True)
class BuildOptions:
    """What enters the cache key besides the sources. Defaults are the CMake project's defaults."""

    cuda: bool = True  # DEPLOYKIT_WITH_CUDA: build CUDA kernels where nvcc exists
    tensorrt_include_dir: str = ""  # TENSORRT_INCLUDE_DIR; "" = chosen by trt_headers.choose for this TensorRT
    tensorrt_glue: bool = True  # DEPLOYKIT_WITH_TENSORRT; turned off when no headers fit the installed TensorRT
    cuda_architectures: str = ""  # CMAKE_CUDA_ARCHITECTURES; "" = the project default (80..90 + Thor)
    build_type: str = "Release"
    warnings_as_errors: bool = False
    targets: tuple[str, ...] = ()  # CMake targets; () builds everything the machine can


@dataclass(frozen=True)
class BuildResult:
    build_dir: Path
    digest: str
    reused: bool
    outputs: dict[str, str] = field(default_factory=dict)  # part -> file path, for what exists
    log: str = ""  # the tail of CMake's output when it ran
    headers: dict[str, Any] = field(default_factory=dict)  # the TensorRT headers record (see _headers_record)


def default_build_dir() -> Path:
    """``build/plugins`` beside the sources in a checkout (the Makefile's and ``doctor``'s default); for
    an installed package, a per-user cache folder (site-packages is not a build folder)."""
    from deploykit.plugins.descriptions import PACKAGED

    source = plugins_source()
    if source == PACKAGED:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cache / "deploykit" / "plugins"
    return source.parent / "build" / "plugins"


FETCHED_HEADERS = Path("build/kernel-lens/kernel_lens/include/tensorrt")  # where `make test` fetches NvInfer.h


def source_digest(source: Path) -> str:
    """The digest of every source file under ``source`` (names and contents), in a fixed order."""
    files = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix in _SOURCE_SUFFIXES)
    return digest_value({p.relative_to(source).as_posix(): digest_file(p) for p in files})


def build_plugins(
    build_dir: Path | None = None,
    options: BuildOptions = BuildOptions(),
    source: Path | None = None,
    *,
    force: bool = False,
) -> BuildResult:
    """Build the plugin libraries unless ``build_dir`` already holds this exact build.

    Raises:
        EnvironmentProblem: cmake or a compiler is missing, or the build failed (the log tail says why).
    """
    source = (source or plugins_source()).resolve()
    build_dir = (build_dir or default_build_dir()).resolve()
    options, headers = with_tensorrt_headers(options, source)
    digest = digest_value({"sources": source_digest(source), "options": asdict(options), "stamp": STAMP_VERSION})
    build_dir.mkdir(parents=True, exist_ok=True)
    with _locked(build_dir):
        stamp = read_stamp(build_dir)
        if not force and stamp.get("digest") == digest and _outputs_unchanged(build_dir, stamp):
            return BuildResult(
                build_dir, digest, True, built_outputs(build_dir), headers=stamp.get("tensorrt_headers", {})
            )
        log = _run_cmake(source, build_dir, options)
        outputs = built_outputs(build_dir)
        if "cpu" not in outputs:
            raise EnvironmentProblem(
                f"the plugin build in {build_dir} produced no {OUTPUTS['cpu']}", hint="see the CMake output above"
            )
        record = _headers_record(headers, outputs)
        _write_stamp(
            build_dir,
            {
                "version": STAMP_VERSION,
                "digest": digest,
                "source": str(source),
                "options": asdict(options),
                "tensorrt_headers": record,
                "outputs": {part: digest_file(Path(p)) for part, p in outputs.items()},
            },
        )
        return BuildResult(build_dir, digest, False, outputs, log, record)


def with_tensorrt_headers(options: BuildOptions, source: Path) -> tuple[BuildOptions, trt_headers.Headers | None]:
    """``options`` with the TensorRT headers the glue is compiled against (or the glue off, when none fit)."""
    if not (options.cuda and options.tensorrt_glue):
        return options, None
    fetched = source.parent / FETCHED_HEADERS
    headers = trt_headers.choose(
        options.tensorrt_include_dir, trt_headers.installed_tensorrt(), trt_headers.candidates(fetched)
    )
    return replace(options, tensorrt_include_dir=headers.include_dir, tensorrt_glue=bool(headers.include_dir)), headers


def _headers_record(headers: trt_headers.Headers | None, outputs: dict[str, str]) -> dict[str, Any]:
    """What the build record says about the TensorRT headers; ``library`` is read back from the built file."""
    from deploykit.backends.trt_plugins import built_against

    if headers is None:
        return {}
    library = built_against(Path(outputs["tensorrt"])) if "tensorrt" in outputs else None
    return {
        "include_dir": headers.include_dir,
        "version": list(headers.version or ()),
        "why": headers.why,
        "library": list(library) if library else None,
    }


def built_outputs(build_dir: Path) -> dict[str, str]:
    """Part -> path of every output present in ``build_dir``."""
    return {part: str(build_dir / name) for part, name in OUTPUTS.items() if (build_dir / name).is_file()}


def read_stamp(build_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((build_dir / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def is_current(build_dir: Path, source: Path | None = None) -> bool | None:
    """Whether ``build_dir`` was built from the current sources (None when it holds no deploykit build)."""
    stamp = read_stamp(build_dir)
    if not stamp:
        return None
    options = BuildOptions(**{**stamp["options"], "targets": tuple(stamp["options"].get("targets", ()))})
    current = digest_value(
        {
            "sources": source_digest((source or plugins_source()).resolve()),
            "options": asdict(options),
            "stamp": STAMP_VERSION,
        }
    )
    return current == stamp.get("digest") and _outputs_unchanged(build_dir, stamp)


def _outputs_unchanged(build_dir: Path, stamp: dict[str, Any]) -> bool:
    recorded = stamp.get("outputs", {})
    return bool(recorded) and all(
        (build_dir / OUTPUTS[part]).is_file() and digest_file(build_dir / OUTPUTS[part]) == sha
        for part, sha in recorded.items()
    )


def _cmake_arguments(source: Path, build_dir: Path, options: BuildOptions) -> list[str]:
    args = [
        "-S",
        str(source),
        "-B",
        str(build_dir),
        f"-DCMAKE_BUILD_TYPE={options.build_type}",
        f"-DDEPLOYKIT_WITH_CUDA={'ON' if options.cuda else 'OFF'}",
    ]
    if options.tensorrt_include_dir:
        args.append(f"-DTENSORRT_INCLUDE_DIR={options.tensorrt_include_dir}")
    args.append(f"-DDEPLOYKIT_WITH_TENSORRT={'ON' if options.tensorrt_glue else 'OFF'}")
    if options.cuda_architectures:
        args.append(f"-DCMAKE_CUDA_ARCHITECTURES={options.cuda_architectures}")
    if options.warnings_as_errors:
        args.append("-DCMAKE_COMPILE_WARNING_AS_ERROR=ON")
    return args


def _run_cmake(source: Path, build_dir: Path, options: BuildOptions) -> str:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise EnvironmentProblem("cmake is not on PATH", hint="install cmake (>= 3.24) and a C++17 compiler")
    configure = [cmake, *_cmake_arguments(source, build_dir, options)]
    build = [cmake, "--build", str(build_dir), "-j", str(os.cpu_count() or 2)]
    if options.targets:
        build += ["--target", *options.targets]
    log = []
    for command in (configure, build):
        done = subprocess.run(command, capture_output=True, text=True)
        log.append(done.stdout + done.stderr)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise EnvironmentProblem(
                f"`{' '.join(command)}` exited {done.returncode}:\n{tail}",
                hint="a compiler error in plugins/, or a missing toolchain; "
                "-DDEPLOYKIT_WITH_CUDA=OFF (--no-cuda) builds the CPU library alone",
            )
    return "\n".join(log)[-4000:]


def _write_stamp(build_dir: Path, stamp: dict[str, Any]) -> None:
    tmp = build_dir / f".{STAMP}.tmp"
    tmp.write_text(json.dumps(stamp, indent=2, sort_keys=True))
    os.replace(tmp, build_dir / STAMP)


@contextmanager
def _locked(build_dir: Path) -> Iterator[None]:
    with open(build_dir / ".deploykit-build.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
