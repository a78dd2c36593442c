"""The layering check runs on the real package (it must hold) and on small fake packages (it must
catch what it exists to catch: function-level and string imports, upward edges, cycles)."""

from pathlib import Path

from deploykit.tools import layers


def test_the_package_layering_holds():
    assert layers.problems() == []


def test_graph_and_quant_depend_only_downwards():
    graph = layers.unit_graph(layers.edges())
    core = layers.LAYERS[0][1]
    assert set(graph["graph"]) <= core
    assert "backends" not in graph["quant"] and "stages" not in graph["plugins"]
    assert not graph["config"].keys() - core


def fake_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"__init__.py": "", **files}.items():
        path = root / "deploykit" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)
    return root


def test_a_function_level_import_of_a_higher_layer_is_reported(tmp_path):
    root = fake_package(
        tmp_path, {"config.py": "def f():\n    from deploykit.quant import ranges\n", "quant/ranges.py": ""}
    )
    found = layers.problems(root)
    assert len(found) == 1 and found[0].startswith("config (layer core) imports quant (layer components)")
    assert "deploykit/config.py:2" in found[0]


def test_a_cycle_through_a_module_path_in_a_string_is_reported(tmp_path):
    root = fake_package(
        tmp_path,
        {
            "surgery/bodies.py": 'BUILTIN = {"Op": "deploykit.plugins.bodies:build"}\n',
            "plugins/bodies.py": "from deploykit.surgery import bodies\n",
        },
    )
    found = layers.problems(root)
    assert len(found) == 1 and found[0].startswith("import cycle between plugins, surgery")
    assert "(string deploykit.plugins.bodies)" in found[0]


def test_quant_importing_a_backend_and_unplaced_units_are_reported(tmp_path):
    root = fake_package(
        tmp_path,
        {
            "quant/check.py": "import deploykit.backends.base\n",
            "backends/base.py": "",
            "newthing.py": "",
            "graph/run.py": "'deploykit.tensorrt'  # a logger name\n",
        },
    )
    found = layers.problems(root)
    assert any(p.startswith("quant imports backends") for p in found)
    assert any("'newthing' is in no layer" in p for p in found)
    assert len(found) == 2  # the logger name is no import


def test_the_command_exits_1_on_a_violation(tmp_path, monkeypatch, capsys):
    assert layers.main([]) == 0 and "layering holds" in capsys.readouterr().out
    monkeypatch.setattr(
        layers,
        "source_root",
        lambda: fake_package(tmp_path, {"graph/x.py": "import deploykit.stages\n", "stages/__init__.py": ""}),
    )
    assert layers.main([]) == 1
    assert "graph (layer graph) imports stages (layer stages)" in capsys.readouterr().out


def test_the_architecture_document_names_the_table_and_places_every_unit_in_its_layer():
    """docs/architecture.md names layers.toml as the table's home, and its layer table lists each
    layer's units as the toml does (a unit moved in one and not the other fails here)."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "src/deploykit/tools/layers.toml" in doc
    rows = {
        m.group(1): set(re.findall(r"`(\w+)`", m.group(2))) for m in re.finditer(r"^\| (\w+) \| ([^|]+) \|", doc, re.M)
    }
    assert {name: units for name, units in layers.LAYERS} == {name: rows.get(name) for name, _ in layers.LAYERS}
