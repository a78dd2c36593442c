"""What an installed deploykit needs of the plugin sources: nothing for a model without plugin nodes;
the op descriptions (shipped in the package) for one with them; a build folder that is not
site-packages. (.ci/run installs a wheel and runs scripts/smoke_install.sh outside the checkout.)"""

import pytest
from onnx import TensorProto, helper

from deploykit.errors import ConfigError
from deploykit.plugins import build, descriptions, onnx_functions


def test_a_model_without_plugin_nodes_never_reads_the_op_descriptions(monkeypatch):
    def missing(*_, **__):
        raise ConfigError("plugin sources not found")

    monkeypatch.setattr(onnx_functions, "descriptions", missing)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Custom", ["y"], ["z"], domain="other")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])],
    )
    assert onnx_functions.plugin_nodes(graph) == []
    ours = helper.make_node("BEVPoolV2", ["y"], ["z"], domain="deploykit")
    with pytest.raises(ConfigError):  # a plugin node does need them
        onnx_functions.plugin_nodes(helper.make_graph([ours], "g", [], []))


def test_plugin_sources_come_from_the_environment_then_the_checkout_then_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv(descriptions.SOURCE_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="plugin sources not found in .*nowhere"):
        descriptions.plugins_source()
    monkeypatch.delenv(descriptions.SOURCE_ENV)
    assert descriptions.plugins_source().name == "plugins"  # this checkout's
    assert descriptions.PACKAGED.name == "_plugin_sources" and descriptions.PACKAGED.parent.name == "deploykit"


def test_a_checkout_builds_plugins_beside_its_sources(monkeypatch, tmp_path):
    source = tmp_path / "plugins"
    source.mkdir()
    (source / "CMakeLists.txt").write_text("project(x)\n")
    monkeypatch.setenv(descriptions.SOURCE_ENV, str(source))
    assert build.default_build_dir() == tmp_path / "build" / "plugins"


def test_an_installed_package_builds_plugins_in_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "plugins_source", lambda: descriptions.PACKAGED)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert build.default_build_dir() == tmp_path / "cache" / "deploykit" / "plugins"


def test_the_package_build_step_ships_the_plugin_sources(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    shipped = tmp_path / "deploykit" / "_plugin_sources"
    assert (shipped / "CMakeLists.txt").is_file() and (shipped / "bev_pool" / "bev_pool.yaml").is_file()
    assert descriptions.descriptions(shipped).keys() == descriptions.descriptions().keys()
    assert not list(shipped.rglob("*.so"))
