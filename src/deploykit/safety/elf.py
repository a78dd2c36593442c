"""ELF shared libraries read as data, never loaded: exported symbols, a data symbol's bytes, strings, needs.

Plugin libraries are checked before anything opens them (opening one runs its initialisers and, for
a TensorRT plugin library built against another TensorRT major, invites a crash on its first log
message), so what deploykit needs to know is read from the file: 64-bit little-endian ELF only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from deploykit.errors import InvalidInput

_SHT_DYNAMIC, _SHT_DYNSYM = 6, 11
_DT_NEEDED = 1


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int  # virtual address
    size: int


def _cstring(data: bytes, at: int) -> str:
    return data[at : data.index(b"\0", at)].decode(errors="replace")


def sections(data: bytes, path: Path) -> list[Section]:
    """The section headers; InvalidInput when ``data`` is not a 64-bit little-endian ELF file."""
    if len(data) < 0x40 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise InvalidInput(
            f"{path}: not a 64-bit little-endian ELF shared library",
            hint="give the .so that `deploykit plugins build` wrote",
        )
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    try:
        raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names_at = raw[shstrndx][4]
        return [Section(_cstring(data, names_at + s[0]), s[1], s[3], s[4], s[5], s[6]) for s in raw]
    except (struct.error, IndexError, ValueError) as e:
        raise InvalidInput(f"{path}: truncated or malformed ELF section table ({e})", hint="rebuild the library") from e


def exported(path: Path) -> dict[str, Symbol]:
    """Defined global symbols of the dynamic symbol table (what ``dlsym`` can find), by name."""
    data = Path(path).read_bytes()
    table = sections(data, path)
    dynsym = next((s for s in table if s.type == _SHT_DYNSYM), None)
    if dynsym is None:
        return {}
    strtab = table[dynsym.link].offset
    out = {}
    for at in range(dynsym.offset, dynsym.offset + dynsym.size, 24):
        name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, at)
        if shndx != 0 and info >> 4 in (1, 2) and other & 3 in (0, 3):  # defined, global/weak, visible
            symbol = Symbol(_cstring(data, strtab + name), value, size)
            out[symbol.name] = symbol
    return out


def symbol_bytes(path: Path, name: str) -> bytes | None:
    """The initial bytes of exported data symbol ``name`` (from the section holding it), or None."""
    symbol = exported(path).get(name)
    if symbol is None or symbol.size == 0:
        return None
    data = Path(path).read_bytes()
    for section in sections(data, path):
        if section.addr and section.addr <= symbol.value < section.addr + section.size and section.type != 8:
            start = section.offset + symbol.value - section.addr  # SHT_NOBITS (8, .bss) holds no bytes
            return data[start : start + symbol.size]
    return None


def readonly_strings(path: Path, min_length: int = 2) -> set[str]:
    """NUL-terminated printable strings of ``.rodata``."""
    data = Path(path).read_bytes()
    section = next((s for s in sections(data, path) if s.name == ".rodata"), None)
    if section is None:
        return set()
    chunks = data[section.offset : section.offset + section.size].split(b"\0")
    return {c.decode() for c in chunks if len(c) >= min_length and all(32 <= b < 127 for b in c)}


def needed(path: Path) -> list[str]:
    """The libraries the dynamic loader must find for this one (DT_NEEDED: ``libcudart.so.13``, ...)."""
    data = Path(path).read_bytes()
    table = sections(data, path)
    dynamic = next((s for s in table if s.type == _SHT_DYNAMIC), None)
    if dynamic is None:
        return []
    strtab = table[dynamic.link].offset
    out = []
    for at in range(dynamic.offset, dynamic.offset + dynamic.size, 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == 0:  # DT_NULL ends the table
            break
        if tag == _DT_NEEDED:
            out.append(_cstring(data, strtab + value))
    return out
