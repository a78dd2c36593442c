"""The op descriptions as the Python side reads them, and the checks built on them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deploykit.errors import ConfigError, DataError, ModelError
from deploykit.plugins.descriptions import (
    SOURCE_ENV,
    bind_shapes,
    check_attributes,
    check_dtypes,
    description,
    descriptions,
    output_shape,
    plugins_source,
)


def test_descriptions_name_the_plugins_and_torch_ops():
    ops = descriptions()
    assert sorted(ops) == ["BEVPoolV2", "PillarScatter"]
    bev = ops["BEVPoolV2"]
    assert (bev.plugin_name, bev.plugin_version, bev.plugin_namespace) == ("BEVPoolV2", "1", "deploykit")
    assert bev.torch_name == "deploykit::bev_pool_v2" and ops["PillarScatter"].torch_name == "deploykit::pillar_scatter"
    assert [t.name for t in bev.inputs][:2] == ["depth", "feat"] and bev.attribute("bev_shape").binds == ("Z", "Y", "X")
    assert bev.dtypes("T", "cpu") == ("float32",) and bev.dtypes("T") == ("float32", "float16")
    assert description("bev_pool") is bev and description("pillar_scatter") is ops["PillarScatter"]


def test_unknown_op_and_missing_sources_are_config_errors(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="no plugin op named 'Nope'"):
        description("Nope")
    monkeypatch.setenv(SOURCE_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match=f"plugin sources not found in {tmp_path}"):
        plugins_source()


def test_shapes_bind_and_disagreements_name_both_places():
    bev = description("BEVPoolV2")
    shapes = [(2, 6, 59, 16, 44), (2, 6, 16, 44, 80), (100,), (100,), (100,), (7,), (7,)]
    symbols = bind_shapes(bev, shapes, {"bev_shape": (1, 128, 128)})
    assert output_shape(bev, symbols) == (2, 1, 128, 128, 80)
    shapes[4] = (99,)
    with pytest.raises(DataError, match=r"BEVPoolV2: ranks_bev has P = 99 \(dim 0\) but ranks_depth has P = 100"):
        bind_shapes(bev, shapes, {"bev_shape": (1, 128, 128)})
    with pytest.raises(DataError, match=r"expected 7 inputs"):
        bind_shapes(bev, shapes[:3], {"bev_shape": (1, 128, 128)})


def test_attribute_and_dtype_checks():
    pillars = description("PillarScatter")
    assert check_attributes(pillars, {"grid": [496, 432]}, "node 'x'") == {"grid": (496, 432)}
    with pytest.raises(
        ModelError,
        match=r"PillarScatter node 'x': missing required attribute 'grid' "
        r"\(2 positive ints: ny, nx\)",
    ):
        check_attributes(pillars, {}, "node 'x'")
    with pytest.raises(ModelError, match=r"attribute 'grid' = \[496, -1\] must be 2 positive ints"):
        check_attributes(pillars, {"grid": [496, -1]}, "node 'x'")
    check_dtypes(pillars, ["float16", "int32", "int32"], None)
    with pytest.raises(DataError, match=r"features must be float32 on cpu, got float16"):
        check_dtypes(pillars, ["float16", "int32", "int32"], "cpu")


def test_importing_the_package_loads_neither_torch_nor_onnx():
    code = (
        "import sys, deploykit.plugins, deploykit.plugins.descriptions, deploykit.cli.plugins; "
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
