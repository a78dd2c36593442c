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


def test_a_corrupt_store_is_listed_as_such_and_verify_reads_the_run_records(tiny):
    _, store = tiny
    clean = run("artifacts", "verify", "-w", str(store))
    assert clean.returncode == 0 and "run records: 0 problem(s)" in clean.stdout, clean.stdout
    [record] = sorted((store / "records").glob("*.json"))
    record.write_text("[]")  # a run record that is not one
    manifest = next(
        p for p in sorted((store / "objects").glob("*/manifest.json")) if '"stage": "gate"' in p.read_text()
    )
    manifest.write_text(manifest.read_text().replace('"passed": true', '"passed": false', 1))
    listed = run("artifacts", "ls", "-w", str(store), "--json")
    assert listed.returncode == 4 and "Traceback" not in listed.stderr
    rows = json.loads(listed.stdout)
    assert [r for r in rows if "corrupt" in r] and all(len(r["digest"]) == 64 for r in rows if "digest" in r)
    verify = run("artifacts", "verify", "-w", str(store))
    assert verify.returncode == 4 and f"problem: {record}: not a readable run record" in verify.stdout, verify.stdout
