"""``deploykit plugins check LIB``: does a plugin library provide the creators our op descriptions name?

What can be checked depends on the machine, and the report says which way each fact was checked
and what was not:

1. The exported dynamic symbols, read from the ELF file itself (no loading, so no CUDA needed):
   ``getCreators`` and ``setLoggerFinder``, which TensorRT's ``IPluginRegistry::loadLibrary`` calls.
2. The creators (name, version, namespace, fields), in the first way available:
   - ``tensorrt``: TensorRT importable: the library is loaded into its registry and the creators it
     adds are listed (exact);
   - ``glue_check``: ``deploykit_trt_glue_check`` drives the creators through TensorRT's interfaces
     without TensorRT or a GPU, and prints them with their fields (exact). Only the checker deploykit
     built is run, from deploykit's build folder and with the digest its build stamp recorded, and
     only for the TensorRT library of that same build: a program found beside an untrusted library
     is never executed;
   - ``strings``: neither: the plugin names and namespaces must appear as strings in the library's
     read-only data. This cannot pair a name with its version and namespace, nor see fields: the
     report says so.
"""

from __future__ import annotations

import json
import struct
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deploykit.errors import InvalidInput
from deploykit.plugins.descriptions import OpDescription, descriptions
from deploykit.safety import elf

Status = Literal["ok", "failed", "warn", "not checked"]  # only "failed" fails the check
GLUE_CHECK = "deploykit_trt_glue_check"
_REQUIRED_SYMBOLS = ("getCreators", "setLoggerFinder")


@dataclass
class Finding:
    check: str
    status: Status
    detail: str


@dataclass
class LibraryReport:
    path: Path
    method: str = ""  # how the creators were read: tensorrt | glue_check | strings | none
    findings: list[Finding] = field(default_factory=list)
    creators: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(f.status != "failed" for f in self.findings)

    def add(self, check: str, status: Status, detail: str) -> None:
        self.findings.append(Finding(check, status, detail))


# ---------------------------------------------------------------------------------------------
# ELF: read without loading (deploykit.safety.elf)


MAX_LIBRARY_BYTES = 2 << 30


def _check_size(path: Path) -> None:
    if path.stat().st_size > MAX_LIBRARY_BYTES:
        raise InvalidInput(f"{path}: larger than {MAX_LIBRARY_BYTES >> 30} GiB; not a plugin library")


@contextmanager
def _malformed_elf(path: Path) -> Iterator[None]:
    """A truncated or corrupt ELF file is the user's input, not a deploykit bug."""
    try:
        yield
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise InvalidInput(
            f"{path}: truncated or malformed ELF file ({type(e).__name__}: {e})",
            hint="give the .so that `deploykit plugins build` wrote",
        ) from e


def exported_symbols(path: Path) -> set[str]:
    """Defined global symbols of the dynamic symbol table (what ``dlsym`` can find)."""
    with _malformed_elf(path):
        _check_size(path)
        return set(elf.exported(path))


def readonly_strings(path: Path, min_length: int = 2) -> set[str]:
    """NUL-terminated printable strings of ``.rodata``."""
    with _malformed_elf(path):
        _check_size(path)
        return elf.readonly_strings(path, min_length)


# ---------------------------------------------------------------------------------------------
# Creators


def _creators_from_tensorrt(path: Path) -> tuple[list[dict[str, Any]] | None, str]:
    try:
        import tensorrt as trt
    except ImportError:
        return None, "TensorRT is not installed"
    from deploykit.backends.trt_plugins import load_libraries

    try:
        (library,) = load_libraries(trt, [path])
    except Exception as e:  # no driver, wrong ABI: fall back to the next way
        return None, f"TensorRT could not load it ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    return [{"name": n, "version": v, "namespace": ns} for n, v, ns in library.creators], ""


def _creators_from_glue_check(path: Path, build_dir: Path | None = None) -> tuple[list[dict[str, Any]] | None, str]:
    """Run the checker deploykit built, when ``path`` is the TensorRT library of that same build."""
    from deploykit.plugins.build import OUTPUTS, default_build_dir, read_stamp
    from deploykit.store.hashing import digest_file

    build_dir = (build_dir or default_build_dir()).resolve()
    recorded = read_stamp(build_dir).get("outputs", {})
    program = build_dir / OUTPUTS["trt_glue_check"]
    if not recorded.get("tensorrt") or digest_file(path) != recorded["tensorrt"]:
        return (
            None,
            f"not the TensorRT library of deploykit's build in {build_dir} (its {GLUE_CHECK} describes that build)",
        )
    if not program.is_file() or digest_file(program) != recorded.get("trt_glue_check"):
        return None, f"no {GLUE_CHECK} that deploykit built in {build_dir}"
    try:
        done = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
        creators = json.loads(done.stdout)["creators"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        return None, f"{GLUE_CHECK} did not run ({type(e).__name__}: {e})"
    return creators, "" if done.returncode == 0 else f"{GLUE_CHECK} reported failures: {done.stderr.strip()[:300]}"


def _compare_creators(report: LibraryReport, ops: dict[str, OpDescription], exact_fields: bool) -> None:
    by_name = {c["name"]: c for c in report.creators}
    for op in ops.values():
        creator = by_name.pop(op.plugin_name, None)
        label = f"creator {op.plugin_name}"
        if creator is None:
            report.add(label, "failed", f"the library registers no creator named {op.plugin_name!r}")
            continue
        got, want = (creator["version"], creator["namespace"]), (op.plugin_version, op.plugin_namespace)
        if got != want:
            report.add(label, "failed", f"version/namespace {got} but plugins/{op.folder}/{op.folder}.yaml says {want}")
            continue
        if exact_fields:
            fields = [(f["name"], f["length"]) for f in creator.get("fields", [])]
            expected = [(a.name, a.length) for a in op.attributes]
            if fields != expected:
                report.add(label, "failed", f"fields {fields} but the description's attributes are {expected}")
                continue
        fields = (
            f", fields {', '.join(a.name for a in op.attributes)}"
            if exact_fields
            else " (fields not listed this way: not checked)"
        )
        report.add(label, "ok", f"version {got[0]!r}, namespace {got[1]!r}{fields}")
    for name in sorted(by_name):
        report.add(f"creator {name}", "failed", "registered by the library but described by no plugins/*/*.yaml")


def _check_strings(report: LibraryReport, path: Path, ops: dict[str, OpDescription]) -> None:
    strings = readonly_strings(path)
    for op in ops.values():
        missing = [s for s in (op.plugin_name, op.plugin_namespace) if s not in strings]
        label = f"creator {op.plugin_name}"
        if missing:
            report.add(label, "failed", f"the library's read-only data lacks {', '.join(map(repr, missing))}")
        else:
            report.add(
                label,
                "ok",
                f"name {op.plugin_name!r} and namespace {op.plugin_namespace!r} are embedded; "
                f"not checked: that they belong to one creator, its version "
                f"{op.plugin_version!r} and its fields (needs TensorRT or {GLUE_CHECK})",
            )


def _check_headers(report: LibraryReport, path: Path) -> None:
    """The TensorRT headers the library records, against the installed TensorRT (read from the file)."""
    from deploykit.backends.trt_plugins import HEADERS_SYMBOL, abi_problem, built_against, rebuild_hint
    from deploykit.plugins.trt_headers import installed_tensorrt

    built = built_against(path)
    if built is None:
        report.add(
            "TensorRT headers",
            "not checked",
            f"the library exports no {HEADERS_SYMBOL} (another project's, "
            "or built before deploykit recorded it): rebuild with `deploykit plugins build` to record it",
        )
        return
    headers, installed = ".".join(map(str, built)), installed_tensorrt()
    if not installed:
        report.add(
            "TensorRT headers",
            "ok",
            f"compiled against TensorRT {headers} headers; no TensorRT installed here "
            f"to compare with: it runs only on TensorRT {built[0]}.x",
        )
        return
    problem = abi_problem(path, installed)
    if problem:
        report.add("TensorRT headers", "failed", f"{problem}: {rebuild_hint(installed)}")
        return
    report.add(
        "TensorRT headers",
        "ok",
        f"compiled against TensorRT {headers} headers; TensorRT {installed} is installed (same major)",
    )


def _check_cuda_runtime(report: LibraryReport, path: Path) -> None:
    """The libcudart major the library links against TensorRT's CUDA (two CUDA runtimes in one process)."""
    from deploykit.backends.trt_compat import tensorrt_cuda_flavour

    linked = sorted(n for n in elf.needed(path) if n.startswith("libcudart.so"))
    if not linked:
        report.add("CUDA runtime", "ok", "links no libcudart (static CUDA runtime or no CUDA code)")
        return
    major = linked[0].rsplit(".so.", 1)[-1].split(".")[0]
    flavour = tensorrt_cuda_flavour()
    if not flavour:
        report.add(
            "CUDA runtime",
            "ok",
            f"links {linked[0]} (the CUDA {major} toolkit it was built with); "
            "TensorRT's CUDA is not known here (no tensorrt-cu12/cu13 wheel installed)",
        )
    elif flavour != f"cu{major}":
        report.add(
            "CUDA runtime",
            "warn",
            f"links {linked[0]} but TensorRT is built for CUDA "
            f"{flavour.removeprefix('cu')} ({flavour}): two CUDA runtimes in one process, and {linked[0]} must "
            f"be installed; rebuild with the CUDA {flavour.removeprefix('cu')} toolkit's nvcc "
            "(CMAKE_CUDA_COMPILER)",
        )
    else:
        report.add("CUDA runtime", "ok", f"links {linked[0]}, the CUDA major TensorRT is built for ({flavour})")


def require_library(path: Path, where: str) -> None:
    """Refuse (InvalidInput, naming ``where`` and the file) what cannot be a shared library at all: not a
    regular file, larger than 2 GiB, not a 64-bit ELF file, or one that exports no symbol. What ``deploykit
    plugins check`` refuses first, applied to every library a build is given, whichever backend runs."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"{where} {path}: not a regular file", hint="give the .so `deploykit plugins build` wrote")
    try:
        if not exported_symbols(path):
            raise InvalidInput(
                f"{path}: exports no symbol; not a shared library",
                hint="give the .so that `deploykit plugins build` wrote",
            )
    except InvalidInput as e:
        raise InvalidInput(f"{where} {e.message}", hint=e.hint) from e
    except OSError as e:
        raise InvalidInput(f"{where} {path}: cannot read it ({e.strerror or type(e).__name__})") from e


def check_library(path: Path, ops: dict[str, OpDescription] | None = None) -> LibraryReport:
    """Check a TensorRT plugin library against the op descriptions; never raises for a bad library.

    Raises:
        InvalidInput: the file does not exist or is not a 64-bit ELF file.
    """
    ops = ops if ops is not None else descriptions()
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file", hint="build the plugins with `deploykit plugins build`")
    report = LibraryReport(path)
    symbols = exported_symbols(path)
    for symbol in _REQUIRED_SYMBOLS:
        found = symbol in symbols
        report.add(
            f"exports {symbol}",
            "ok" if found else "failed",
            "found in the dynamic symbol table" if found else "not exported: TensorRT's loadLibrary needs it",
        )
    if "getCreators" in symbols:
        _check_headers(report, path)
        _check_cuda_runtime(report, path)
    if "getCreators" not in symbols:
        if "deploykit_bev_pool_v2_cpu" in symbols:
            report.add(
                "library kind",
                "failed",
                "this is the CPU kernel library (C ABI for ctypes), not the TensorRT "
                "plugin library libdeploykit_plugins.so (built where nvcc and "
                "TensorRT headers are found)",
            )
        report.method = "none"
        report.add("creators", "not checked", "without getCreators there is nothing to ask for creators")
        return report
    reasons = []
    for method, read in (("tensorrt", _creators_from_tensorrt), ("glue_check", _creators_from_glue_check)):
        creators, why = read(path)
        if creators is not None:
            report.method, report.creators = method, creators
            if why:
                report.add(method, "failed", why)
            _compare_creators(report, ops, exact_fields=method == "glue_check")
            return report
        reasons.append(f"{method}: {why}")
    report.method = "strings"
    report.add(
        "creators",
        "not checked",
        "creators could not be listed (" + "; ".join(reasons) + "); checked the embedded names instead",
    )
    _check_strings(report, path, ops)
    return report
