"""The layering check: packages depend downwards only, with no cycles (function-level imports count).

``python -m deploykit.tools.layers`` prints every violation and exits 1 if there is one (``--edges``
also lists the dependencies between units). The import graph is read from the source with
:mod:`ast` (nothing is imported): every ``import``/``from ... import`` anywhere in a module, under
``TYPE_CHECKING`` too, and every string constant that is a module path (``"deploykit.x.y"`` or
``"deploykit.x.y:attr"``, as lazy registries and ``importlib.import_module`` name them).

A *unit* is a subpackage (``deploykit.quant``) or a top-level module (``deploykit.config``). Units
sit in the layers of ``layers.toml`` beside this module (:data:`LAYERS`, lowest first; the table
docs/architecture.md names); the rules:

* no unit imports a unit of a higher layer;
* no cycle between units (within a layer units may depend on each other, acyclically);
* ``graph`` imports nothing but the bottom layer; ``quant`` never imports ``backends``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "deploykit"
TABLE = Path(__file__).with_name("layers.toml")  # the one home of the layer table (docs/architecture.md)


def _load_table(path: Path = TABLE) -> tuple[tuple[tuple[str, frozenset[str]], ...], dict[tuple[str, str], str]]:
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    layers = tuple((layer["name"], frozenset(layer["units"])) for layer in table["layer"])
    return layers, {(f["source"], f["target"]): f["why"] for f in table.get("forbidden", [])}


LAYERS, FORBIDDEN = _load_table()  # lowest layer first
_MODULE_PATH = re.compile(rf"^{PACKAGE}(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")


@dataclass(frozen=True)
class Edge:
    """``source`` (a module) depends on ``target`` (a module), at ``line``, by ``how``."""

    source: str
    target: str
    line: int
    how: str  # "import" | "string"


def source_root() -> Path:
    """The folder holding the ``deploykit`` package."""
    return Path(__file__).resolve().parents[2]


def modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for every module of the package under ``root``."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> Iterator[Edge]:
    """Every dependency of module ``name`` on a module of the package (resolved to ``known`` names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _resolved(name, alias.name, node.lineno, "import", known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield from _resolved(name, submodule if submodule in known else base, node.lineno, "import", known)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_PATH.match(node.value):
            target = node.value.partition(":")[0]
            if target in known:  # a module path, not a logger name or a prose mention
                yield Edge(name, target, node.lineno, "string")


def _resolved(source: str, target: str, line: int, how: str, known: set[str]) -> Iterator[Edge]:
    while target and target not in known:  # "deploykit.x.y.attr" -> the module that defines it
        target = target.rpartition(".")[0]
    if target and target.split(".")[0] == PACKAGE:
        yield Edge(source, target, line, how)


def unit(module: str) -> str:
    """``deploykit.quant.ranges`` -> ``quant``; ``deploykit.config`` -> ``config``; the root -> ``deploykit``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def layer_of(name: str) -> int:
    for rank, (_, units) in enumerate(LAYERS):
        if name in units:
            return rank
    return -1


def edges(root: Path | None = None) -> list[Edge]:
    """Every import of one package module by another."""
    found = modules(root or source_root())
    known = set(found)
    return [e for name, path in found.items() for e in imports(name, path, known)]


def unit_graph(all_edges: list[Edge], names: Iterable[str] = ()) -> dict[str, dict[str, list[Edge]]]:
    """Unit -> the units it depends on -> the edges that make the dependency (``names``: modules
    that are units even when nothing imports them and they import nothing)."""
    graph: dict[str, dict[str, list[Edge]]] = {unit(n): {} for n in names}
    for e in all_edges:
        a, b = unit(e.source), unit(e.target)
        graph.setdefault(a, {})
        graph.setdefault(b, {})
        if a != b:
            graph[a].setdefault(b, []).append(e)
    return graph


def cycles(graph: dict[str, dict[str, list[Edge]]]) -> list[list[str]]:
    """The strongly connected components with more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _where(e: Edge, root: Path) -> str:
    path = modules(root)[e.source].relative_to(root)
    return f"{path}:{e.line} ({e.how} {e.target})"


def problems(root: Path | None = None) -> list[str]:
    """One line per violation of the rules in the module docstring; empty when the layering holds."""
    root = root or source_root()
    graph = unit_graph(edges(root), modules(root))
    out = [f"unit {u!r} is in no layer of {TABLE.name}: place it" for u in sorted(graph) if layer_of(u) < 0]
    for a, targets in sorted(graph.items()):
        for b, made_by in sorted(targets.items()):
            first = _where(made_by[0], root)
            if (a, b) in FORBIDDEN:
                out.append(f"{a} imports {b}: {FORBIDDEN[(a, b)]}; {first}")
            elif layer_of(a) >= 0 and layer_of(b) > layer_of(a):
                out.append(
                    f"{a} (layer {LAYERS[layer_of(a)][0]}) imports {b} (layer {LAYERS[layer_of(b)][0]}), "
                    f"a higher layer: {first}"
                )
    for component in cycles(graph):
        links = [f"{a} -> {b} ({_where(graph[a][b][0], root)})" for a in component for b in component if b in graph[a]]
        out.append(f"import cycle between {', '.join(component)}: " + "; ".join(links))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the violations (and with ``--edges`` the unit dependencies); 1 when there is one."""
    argv = sys.argv[1:] if argv is None else argv
    root = source_root()
    if "--edges" in argv:
        for a, targets in sorted(unit_graph(edges(root)).items()):
            print(f"{a} -> {', '.join(sorted(targets)) or '-'}")
    found = problems(root)
    for line in found:
        print(line)
    if not found:
        print(f"layering holds: {len(unit_graph(edges(root), modules(root)))} units in {len(LAYERS)} layers, no cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
