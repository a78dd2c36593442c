"""Nothing outside the flavour modules compares a quantize flavour's name: the rest asks the flavour
(``deploykit.quant.flavours.flavour_for``). Read from the source with :mod:`ast`, as the layering
check reads imports; the checker runs on the real package (it must hold) and on snippets (it must
catch what it exists to catch, and leave an evaluator or a backend name alone)."""

import ast
from pathlib import Path

import pytest

from deploykit.choices import Evaluator, Flavour, values
from deploykit.quant.flavours import REGISTRY, flavour_for
from deploykit.tools.layers import modules, source_root

FLAVOURS = frozenset(values(Flavour))
# The modules that implement the flavours: there a flavour's answers are written down.
FLAVOUR_MODULES = {
    "deploykit.quant.flavours",
    "deploykit.quant.ort_flavour",
    "deploykit.quant.modelopt_flavour",
}
# "tensorrt" and "onnxruntime" are also backend names, module names and plugin parts; these compare those.
OTHER_NAMES = {
    "deploykit.backends": "a backend compares its own name (module names, engine metadata)",
    "deploykit.plugins.build": "plugin libraries are built per part (cpu, cuda, tensorrt)",
    "deploykit.cli.plugins": "plugin libraries are listed per part (cpu, cuda, tensorrt)",
}


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def _names_a_backend(node: ast.AST) -> bool:
    """``backend``, ``x.backend``, ``record["backend"]``, ``record.get("backend")``: a backend's name."""
    for sub in ast.walk(node):
        word = (
            sub.id
            if isinstance(sub, ast.Name)
            else sub.attr
            if isinstance(sub, ast.Attribute)
            else sub.value
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
            else ""
        )
        if "backend" in word:
            return True
    return False


def flavour_comparisons(source: str) -> list[int]:
    """The lines of ``source`` that compare a flavour's name (``==``, ``!=``, ``in``, ``match``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = [o for o in operands if _strings(o) & FLAVOURS]
            if named and not any(_names_a_backend(o) for o in operands if o not in named):
                found.append(node.lineno)
        elif isinstance(node, ast.Match) and not _names_a_backend(node.subject):
            found += [
                c.pattern.lineno
                for c in node.cases
                if isinstance(c.pattern, ast.MatchValue) and _strings(c.pattern.value) & FLAVOURS
            ]
    return found


def test_no_module_outside_the_flavour_modules_compares_a_flavour_name():
    found = []
    for name, path in modules(source_root()).items():
        if name in FLAVOUR_MODULES or any(name == m or name.startswith(m + ".") for m in OTHER_NAMES):
            continue
        found += [f"{path.relative_to(source_root())}:{line}" for line in flavour_comparisons(path.read_text())]
    assert found == [], "ask deploykit.quant.flavours.flavour_for(name) instead of comparing: " + ", ".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'if job.flavour == "onnxruntime":\n    pass\n',
        'x = flavour != "tensorrt"\n',
        'ok = target in ("onnxruntime", "other")\n',
        'y = "tensorrt" == cfg.quantize.flavour(b)\n',
        'match flavour:\n    case "tensorrt":\n        pass\n',
    ],
)
def test_a_flavour_comparison_is_caught(source):
    assert flavour_comparisons(source) != []


@pytest.mark.parametrize(
    "source",
    [
        's = session_from_onnx(m, "onnxruntime", level="all")\n',  # an evaluator
        'x = backend == "tensorrt"\n',
        'y = record["backend"] != "tensorrt"\n',
        'z = meta.get("backend") in ("onnxruntime", "tensorrt")\n',
        'w = {"onnxruntime": 1}["onnxruntime"]\n',
    ],
)
def test_an_evaluator_or_a_backend_name_is_not_a_flavour_comparison(source):
    assert flavour_comparisons(source) == []


def test_every_flavour_has_one_module_that_answers_for_it():
    assert set(REGISTRY) == FLAVOURS
    for name in FLAVOURS:
        flavour = flavour_for(name)
        assert flavour.name == name and flavour.evaluator in values(Evaluator)
        module = REGISTRY[name].partition(":")[0]
        assert module in FLAVOUR_MODULES and Path(source_root(), *module.split(".")).with_suffix(".py").is_file()
