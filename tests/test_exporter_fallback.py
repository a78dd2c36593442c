"""``exporter: auto``: when a later stage fails on the chosen exporter's graph and the other
exporter's graph passes it, the error says so and names the one switch to retry with."""

from __future__ import annotations

import textwrap

import pytest

import deploykit
from deploykit.errors import ModelError
from tests.conftest import run_cli, write_tiny

# A stand-in for a stage that cannot handle something only one exporter writes (a dynamo graph's
# Range node broke INT8 on a DETR-style model): this user pass refuses dynamo's node names.
PICKY_PASS = """
from deploykit.surgery.base import PassError


def refuse_dynamo_graphs(model):
    dynamo = [n.name for n in model.graph.node if n.name.startswith("node_")]
    if dynamo:
        raise PassError(f"cannot handle node {dynamo[0]}")
    return model
"""


def picky(tmp_path, monkeypatch, exporter="auto"):
    cfg = write_tiny(tmp_path / "model", exporter=exporter)
    monkeypatch.syspath_prepend(str(cfg.parent))  # user passes are imported from sys.path
    (cfg.parent / "picky_pass.py").write_text(textwrap.dedent(PICKY_PASS))
    cfg.write_text(cfg.read_text() + "surgery: {passes: [sanitize, 'picky_pass:refuse_dynamo_graphs']}\n")
    return cfg


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("fallback-store")  # the tests share exports (same model, same recipes)


def test_a_later_stage_failing_on_the_dynamo_graph_names_the_torchscript_switch(tmp_path, monkeypatch, store):
    with pytest.raises(ModelError) as e:
        deploykit.convert(picky(tmp_path, monkeypatch), workdir=store)
    err = e.value
    assert "cannot handle node node_" in err.message
    assert (
        "the surgery stage fails on the dynamo exporter's graph; the torchscript exporter's graph passes it"
        in err.message
    )
    assert err.hint.startswith("rerun with export__exporter='torchscript'")  # the Python spelling; the CLI's below
    # the switch works, and reuses the trial run's artifacts
    result = deploykit.convert(picky(tmp_path, monkeypatch), workdir=store, export__exporter="torchscript")
    assert result.passed and [r.status for r in result.stages][:2] == ["reused", "reused"]


def test_the_cli_prints_the_switch_and_an_explicit_exporter_is_left_alone(tmp_path, monkeypatch, store):
    code, _, err = run_cli("convert", str(picky(tmp_path / "a", monkeypatch)), "-w", str(store))
    assert code == 4 and "hint: rerun with --set export.exporter=torchscript" in " ".join(err.split())
    with pytest.raises(ModelError) as e:  # the user chose dynamo: no trial, no advice about the other one
        deploykit.convert(picky(tmp_path / "b", monkeypatch, exporter="dynamo"), workdir=store)
    assert "torchscript" not in str(e.value)
