"""Listing commands in a CI log (no terminal, 80 columns): identifiers are never split across lines,
and every listing has ``--json``."""

import json

import pytest

from tests.cli.console import deploykit as run


def test_plugins_list_never_splits_an_op_name_and_has_json():
    proc = run("plugins", "list")
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if "BEVPool" in line]
    assert rows and "BEVPoolV2" in rows[0] and "torch.ops.deploykit.bev_pool_v2" in rows[0]
    listed = json.loads(run("plugins", "list", "--json").stdout)
    assert {op["op"] for op in listed["ops"]} >= {"BEVPoolV2", "PillarScatter"}


@pytest.mark.parametrize("args", [("surgery", "--list", "--json"), ("doctor", "--json")])
def test_listing_commands_print_json(args):
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)


def test_artifacts_listings_print_json_and_whole_digests(tiny):
    _, store = tiny
    listed = json.loads(run("artifacts", "ls", "-w", str(store), "--json").stdout)
    assert listed and all(len(a["digest"]) == 64 for a in listed)
    gate = next(a for a in listed if a["stage"] == "gate")
    chain = json.loads(run("artifacts", "lineage", gate["digest"], "-w", str(store), "--json").stdout)
    assert [r["kind"] for r in chain][:2] == ["bench-report", "engine"]
    table = run("artifacts", "ls", "-w", str(store)).stdout
    assert all(a["digest"][:12] in table for a in listed)  # one whole short digest per row, never wrapped
