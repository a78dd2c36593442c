"""Plugin libraries read as data (real ELF files compiled here, never loaded) and the support tables
themselves: their versions are the ones deploykit offers, every restriction they name is implemented,
and each records where it came from."""

from __future__ import annotations

import pytest

from deploykit.choices import TensorRTVersion, values
from deploykit.errors import UsageError
from deploykit.lint import LintOptions, lint_model
from deploykit.lint.operators import CHECKS
from deploykit.lint.tables import VERSIONS, nearest, parse_for, table
from tests.lint.graphs import errors, plugin_library, rules
from tests.lint.test_rules import plugin_node_model


def test_a_library_that_provides_the_creator_for_its_major_is_clean(tmp_path):
    lib = plugin_library(tmp_path / "a", ("BEVPoolV2", "deploykit"), headers=(10, 13, 3))
    report = lint_model(plugin_node_model(), LintOptions(plugins=(lib,)))
    assert errors(report, "10.13") == set()
    assert any("read-only strings" in n for n in report.notes)


def test_a_library_built_against_10_headers_is_refused_for_11_only(tmp_path):
    lib = plugin_library(tmp_path / "a", ("BEVPoolV2", "deploykit"), headers=(10, 13, 3))
    report = lint_model(plugin_node_model(), LintOptions(plugins=(lib,)))
    assert errors(report, "11") == {"plugin.headers", "plugin.missing"}
    headers = next(f for f in report.findings if f.rule == "plugin.headers")
    assert "--tensorrt-include" in headers.fix and headers.versions == ("11",)


def test_a_library_without_the_creator_or_without_getcreators_is_named(tmp_path):
    other = plugin_library(tmp_path / "b", ("SomethingElse",), headers=(11, 1, 0))
    report = lint_model(plugin_node_model(), LintOptions(versions=("11",), plugins=(other,)))
    assert errors(report) == {"plugin.missing"} and "libfake_plugins.so" in report.findings[0].message
    cpu = plugin_library(tmp_path / "c", ("BEVPoolV2", "deploykit"), headers=(11, 1, 0), exports=False)
    report = lint_model(plugin_node_model(), LintOptions(versions=("11",), plugins=(cpu,)))
    assert "plugin.library" in errors(report) and "getCreators" in report.findings[0].message


def test_a_library_that_records_no_headers_is_a_warning(tmp_path):
    lib = plugin_library(tmp_path / "d", ("BEVPoolV2", "deploykit"), headers=None)
    report = lint_model(plugin_node_model(), LintOptions(versions=("11",), plugins=(lib,)))
    assert {(f.rule, f.severity) for f in report.findings} == {("plugin.headers", "warning")}


def test_a_file_that_is_not_elf_is_a_library_error(tmp_path):
    bad = tmp_path / "lib.so"
    bad.write_bytes(b"not an elf file at all" * 10)
    report = lint_model(plugin_node_model(), LintOptions(versions=("11",), plugins=(bad,)))
    assert "plugin.library" in rules(report)


def test_the_tables_cover_the_versions_deploykit_offers_and_every_restriction_is_implemented():
    assert VERSIONS == values(TensorRTVersion)
    named = {c for v in VERSIONS for op in table(v).ops.values() for c in op.checks}
    assert named == set(CHECKS)  # none missing, none dead
    for v in VERSIONS:
        t = table(v)
        pin = t.source["pinned_by"]
        assert len(pin["parser_commit"]) == 40 and pin["tag"].startswith("NVIDIA/TensorRT v") and t.source["read_on"]
        assert t.ops["Conv"].supported and not t.ops["ConvInteger"].supported
    assert "Attention" not in table("10.13").ops and table("11").ops["Attention"].supported
    assert "BatchedNMS_TRT" in table("11").removed_plugins and not table("10.13").removed_plugins


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ((), VERSIONS),
        (("tensorrt",), VERSIONS),
        (("tensorrt=11",), ("11",)),
        (("tensorrt=10.13", "tensorrt=11.4"), ("10.13", "11")),
        (("TensorRT=10.16.1",), ("10.13",)),
    ],
)
def test_for_picks_the_tables(spec, want):
    assert parse_for(list(spec)) == want


@pytest.mark.parametrize("spec", ["onnxruntime", "tensorrt=9.0", "tensorrt=10.8", "tensorrt=12", "tensorrt=x"])
def test_for_refuses_what_has_no_table(spec):
    with pytest.raises(UsageError):
        parse_for([spec])


def test_nearest_table():
    assert nearest("11.1.0") == "11" and nearest("10.12") == "10.13"
