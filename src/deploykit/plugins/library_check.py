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

Status = Literal["ok", "failed", "not checked"]
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
# ELF: exported dynamic symbols and read-only strings, without loading the library


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int


def _sections(data: bytes, path: Path) -> list[_Section]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise InvalidInput(f"{path}: not a 64-bit little-endian ELF shared library",
                           hint="give the .so that `deploykit plugins build` wrote")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]

    def name(offset: int) -> str:
        return data[names_at + offset:data.index(b"\0", names_at + offset)].decode()

    return [_Section(name(s[0]), s[1], s[4], s[5], s[6]) for s in raw]


MAX_LIBRARY_BYTES = 2 << 30


def _read_elf(path: Path) -> bytes:
    if path.stat().st_size > MAX_LIBRARY_BYTES:
        raise InvalidInput(f"{path}: larger than {MAX_LIBRARY_BYTES >> 30} GiB; not a plugin library")
    return path.read_bytes()


@contextmanager
def _malformed_elf(path: Path) -> Iterator[None]:
    """A truncated or corrupt ELF file is the user's input, not a deploykit bug."""
    try:
        yield
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise InvalidInput(f"{path}: truncated or malformed ELF file ({type(e).__name__}: {e})",
                           hint="give the .so that `deploykit plugins build` wrote") from e


def exported_symbols(path: Path) -> set[str]:
    """Defined global symbols of the dynamic symbol table (what ``dlsym`` can find)."""
    with _malformed_elf(path):
        return _exported_symbols(_read_elf(path), path)


def _exported_symbols(data: bytes, path: Path) -> set[str]:
    sections = _sections(data, path)
    dynsym = next((s for s in sections if s.type == 11), None)  # SHT_DYNSYM
    if dynsym is None:
        return set()
    strtab = sections[dynsym.link].offset
    out = set()
    for at in range(dynsym.offset, dynsym.offset + dynsym.size, 24):
        name, info, other, shndx = struct.unpack_from("<IBBH", data, at)
        if shndx != 0 and info >> 4 in (1, 2) and other & 3 in (0, 3):  # defined, global/weak, visible
            out.add(data[strtab + name:data.index(b"\0", strtab + name)].decode(errors="replace"))
    return out


def readonly_strings(path: Path, min_length: int = 2) -> set[str]:
    """NUL-terminated printable strings of ``.rodata``."""
    with _malformed_elf(path):
        return _readonly_strings(_read_elf(path), path, min_length)


def _readonly_strings(data: bytes, path: Path, min_length: int) -> set[str]:
    section = next((s for s in _sections(data, path) if s.name == ".rodata"), None)
    if section is None:
        return set()
    chunks = data[section.offset:section.offset + section.size].split(b"\0")
    return {c.decode() for c in chunks if len(c) >= min_length and all(32 <= b < 127 for b in c)}


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
    from deploykit.hashing import digest_file
    from deploykit.plugins.build import OUTPUTS, default_build_dir, read_stamp

    build_dir = (build_dir or default_build_dir()).resolve()
    recorded = read_stamp(build_dir).get("outputs", {})
    program = build_dir / OUTPUTS["trt_glue_check"]
    if not recorded.get("tensorrt") or digest_file(path) != recorded["tensorrt"]:
        return None, f"not the TensorRT library of deploykit's build in {build_dir} (its {GLUE_CHECK} describes that build)"
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
        fields = (f", fields {', '.join(a.name for a in op.attributes)}" if exact_fields
                  else " (fields not listed this way: not checked)")
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
            report.add(label, "ok", f"name {op.plugin_name!r} and namespace {op.plugin_namespace!r} are embedded; "
                                    f"not checked: that they belong to one creator, its version "
                                    f"{op.plugin_version!r} and its fields (needs TensorRT or {GLUE_CHECK})")


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
        report.add(f"exports {symbol}", "ok" if found else "failed",
                   "found in the dynamic symbol table" if found else "not exported: TensorRT's loadLibrary needs it")
    if "getCreators" not in symbols:
        if "deploykit_bev_pool_v2_cpu" in symbols:
            report.add("library kind", "failed", "this is the CPU kernel library (C ABI for ctypes), not the TensorRT "
                                                 "plugin library libdeploykit_plugins.so (built where nvcc and "
                                                 "TensorRT headers are found)")
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
    report.add("creators", "not checked", "creators could not be listed (" + "; ".join(reasons) + "); "
                                          "checked the embedded names instead")
    _check_strings(report, path, ops)
    return report
