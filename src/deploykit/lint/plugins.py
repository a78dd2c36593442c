"""Plugins: would the parser find a creator for each custom node, in the order it looks?

The parser ignores a node's domain and looks up its op type: a registered plugin first when the node
names a ``plugin_namespace``; else the built-in importer of that op; else a model-local ONNX
function of that name (inlined); else a plugin, by name, ``plugin_version`` and namespace (the
domain stands in for a missing namespace since 10.10). Registered plugins come from the given
libraries, read as data (:mod:`deploykit.safety.elf`: never loaded, so no CUDA and no initialisers run; a
creator is found by its name and namespace among the library's read-only strings, which cannot pair a
name with its version), and from TensorRT's own plugins (the table: names, versions, deprecations,
and those TensorRT 11 no longer ships). A library compiled against another major's headers is
refused for that version. deploykit's build refuses a node that carries ``plugin_version`` or
``plugin_namespace`` without a registered creator, so for such a node an ONNX body is no way out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from deploykit.errors import InvalidInput
from deploykit.lint import operators
from deploykit.lint.findings import Issue
from deploykit.lint.tables import SupportTable
from deploykit.lint.view import ONNX_DOMAINS, GraphView, first_attribute

PLUGIN_ATTRIBUTES = ("plugin_version", "plugin_namespace")
BUILD_FIX = "build the plugins (`deploykit plugins build`) and pass the library: --plugins LIB (build.plugins)"


@dataclass(frozen=True)
class Library:
    """What a plugin library says about itself, read from the file."""

    path: Path
    strings: frozenset[str] = frozenset()
    headers: tuple[int, int, int] | None = None  # the TensorRT headers it records compiling against
    problem: str = ""  # why it is no TensorRT plugin library, or ""

    def provides(self, name: str, namespace: str) -> bool:
        return name in self.strings and (not namespace or namespace in self.strings)


@functools.lru_cache(maxsize=64)
def read_library(path: Path, size: int, mtime: float) -> Library:
    """A library's strings, recorded headers and exports, read as data (cached per file state)."""
    from deploykit.backends.trt_plugins import built_against
    from deploykit.safety import elf

    try:
        exported = set(elf.exported(path))
        strings = elf.readonly_strings(path)
    except (InvalidInput, OSError, ValueError, IndexError) as e:
        return Library(path, problem=f"not a readable 64-bit ELF shared library ({e})")
    if "getCreators" not in exported:
        return Library(
            path,
            frozenset(strings),
            built_against(path),
            "exports no getCreators: not a TensorRT plugin library (the CPU kernel library?)",
        )
    return Library(path, frozenset(strings), built_against(path))


def libraries(paths: Sequence[Path]) -> list[Library]:
    out = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            out.append(Library(p, problem="no such file"))
            continue
        st = p.stat()
        out.append(read_library(p.resolve(), st.st_size, st.st_mtime))
    return out


def check(view: GraphView, table: SupportTable, libs: Sequence[Library] | None) -> Iterator[Issue]:
    """Plugin findings for one table; ``libs`` None when the run names no libraries and builds no
    TensorRT engine (a missing creator is then a warning)."""
    for lib in libs or ():
        yield from _library(lib, table)
    usable = [lib for lib in libs or () if not lib.problem and _same_major(lib, table)]
    for scoped in view.main_nodes():
        node = scoped.node
        pinned = any(a.name in PLUGIN_ATTRIBUTES for a in node.attribute)
        if node.domain == "ai.onnx.ml" or (
            node.domain in ONNX_DOMAINS and not operators.routed_to_plugins(node, table)
        ):
            continue  # operators.py judges these
        yield from _custom(view, table, scoped.label, node, pinned, usable, libs is not None)


def _same_major(lib: Library, table: SupportTable) -> bool:
    return lib.headers is None or lib.headers[0] == table.major


def _library(lib: Library, table: SupportTable) -> Iterator[Issue]:
    name = str(lib.path)
    if lib.problem:
        yield Issue("plugin.library", "error", name, "", f"plugin library {name}: {lib.problem}", BUILD_FIX)
    elif lib.headers is None:
        yield Issue(
            "plugin.headers",
            "warning",
            name,
            "",
            f"plugin library {name} records no TensorRT headers: "
            f"whether it was compiled for TensorRT {table.major}.x is not known",
            "rebuild it with `deploykit plugins build` (it records the headers)",
        )
    elif lib.headers[0] != table.major:
        built = ".".join(map(str, lib.headers))
        yield Issue(
            "plugin.headers",
            "error",
            name,
            "",
            f"plugin library {name} was compiled against the TensorRT "
            f"{built} headers: it runs only on TensorRT {lib.headers[0]}.x (the plugin ABI changed in 11)",
            f"rebuild it for TensorRT {table.major}: `deploykit plugins build --tensorrt-include DIR` with "
            f"the {table.major}.x headers (see `deploykit doctor`)",
        )


def _custom(
    view: GraphView,
    table: SupportTable,
    label: str,
    node: onnx.NodeProto,
    pinned: bool,
    libs: list[Library],
    libraries_given: bool,
) -> Iterator[Issue]:
    name = node.op_type
    version = str(first_attribute(node, "plugin_version", "1"))
    namespace = str(first_attribute(node, "plugin_namespace", "")) or (
        node.domain if node.domain not in ONNX_DOMAINS else ""
    )
    op = f"{node.domain}::{name}" if node.domain else name
    if pinned and any(lib.provides(name, namespace) for lib in libs):
        return  # a registered plugin wins when the node names its namespace
    builtin = table.builtin_plugins.get(name)
    if pinned and builtin is not None:
        yield from _builtin(table, label, op, name, version, builtin)
        return
    support = table.ops.get(name)
    if not pinned and support is not None and support.supported:
        yield Issue(
            "plugin.domain",
            "warning",
            label,
            op,
            f"the parser ignores the domain {node.domain!r} and imports this node as the ONNX operator {name}",
            f"check it computes what ONNX's {name} does, or give it a plugin_namespace attribute and a plugin",
        )
        return
    if any(lib.provides(name, namespace) for lib in libs):
        return
    if builtin is not None:
        yield from _builtin(table, label, op, name, version, builtin)
        return
    if name in table.removed_plugins:
        yield _removed(table, label, op, name)
        return
    has_body = (node.domain, name) in view.functions
    if has_body and not pinned:
        yield Issue(
            "plugin.function",
            "warning",
            label,
            op,
            "no plugin provides it: the parser inlines its model-local ONNX function body",
            "give it a plugin for speed (--plugins LIB), or accept the body",
        )
        for inner in view.function_nodes(node):
            if inner.node.domain in ONNX_DOMAINS:
                yield from operators.node_issues(view, table, inner)
        return
    given = ", ".join(lib.path.name for lib in libs) or "none"
    severity = "error" if libraries_given else "warning"
    unlisted = "not an operator the parser imports, and " if node.domain in ONNX_DOMAINS else ""
    reason = unlisted + (
        f"no plugin library given provides it (libraries: {given})"
        if libraries_given
        else "no plugin library is given for this run, and TensorRT needs one providing it"
    )
    body = (
        "; deploykit's build refuses plugin nodes without a creator, whatever their ONNX body"
        if pinned and has_body
        else ""
    )
    yield Issue(
        "plugin.missing",
        severity,
        label,
        op,
        f"plugin {name!r} version {version!r} namespace {namespace!r}: {reason}{body}",
        operators.GENERIC_FIX if unlisted else BUILD_FIX,
    )


def _builtin(
    table: SupportTable, label: str, op: str, name: str, version: str, entry: dict[str, list[str]]
) -> Iterator[Issue]:
    if version not in entry["versions"]:
        if name in table.removed_plugins and version in table.removed_plugins[name]:
            yield _removed(table, label, op, name)
            return
        yield Issue(
            "plugin.missing",
            "error",
            label,
            op,
            f"TensorRT ships {name} in version(s) {', '.join(entry['versions'])}, not {version!r}",
            f"set plugin_version to one of {', '.join(entry['versions'])}",
        )
    elif version in entry.get("deprecated_versions", ()):
        yield Issue(
            "plugin.deprecated",
            "warning",
            label,
            op,
            f"TensorRT deprecates its plugin {name} version {version}",
            "use the ONNX operator TensorRT imports natively where there is one "
            "(NonMaxSuppression, RoiAlign, ...), or a newer plugin version",
        )


def _removed(table: SupportTable, label: str, op: str, name: str) -> Issue:
    return Issue(
        "plugin.removed",
        "error",
        label,
        op,
        f"TensorRT {table.major} no longer ships the plugin {name}",
        "use the ONNX operator TensorRT imports natively (e.g. NonMaxSuppression for the NMS plugins), or "
        "build the plugin from TensorRT 10's sources into a library of your own (--plugins LIB)",
    )
