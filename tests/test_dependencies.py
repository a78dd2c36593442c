"""The dependency bounds are the tested ones: constraints.txt (what CI installs the suite from) pins
every dependency and extra of pyproject.toml to a version inside its bounds, and the README's
install by hand upgrades pip and installs torch before deploykit (the order that works)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not name==version"
            pins[canonicalize_name(name)] = version
    return pins


def test_every_requirement_is_pinned_within_its_bounds():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in ("quant", "dev", "ray") for r in project["optional-dependencies"][group]]
    pins = _pins()
    checked = 0
    for text in [*project["dependencies"], *extras]:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue  # another platform's requirement (plain onnxruntime off x86-64 Linux)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt (make constraints)"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}"
        )
        checked += 1
    assert checked >= 15
    assert "deploykit" not in pins and "onnxruntime" not in pins  # never plain onnxruntime beside -gpu


def test_every_runtime_dependency_has_a_tested_upper_bound():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"]:
        req = Requirement(text)
        assert any(s.operator == "<" for s in req.specifier), f"{req.name}: no upper bound"
        assert any(s.operator == ">=" for s in req.specifier), f"{req.name}: no lower bound"


def test_the_readme_install_by_hand_upgrades_pip_then_installs_torch_first():
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from readme_block import block
    finally:
        sys.path.pop(0)
    lines = block("install-by-hand", ROOT / "README.md").splitlines()
    upgrade = next(i for i, x in enumerate(lines) if "pip install --upgrade pip" in x)
    torch = next(i for i, x in enumerate(lines) if "install torch==2.13.0" in x)
    package = next(i for i, x in enumerate(lines) if "-c constraints.txt" in x and "'.[quant]'" in x)
    assert lines[0].startswith("python3 -m venv") and upgrade < torch < package
