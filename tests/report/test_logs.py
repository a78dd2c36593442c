"""Structured logs: --log-format json writes one JSON object per line, none from inside timing loops."""

import io
import json

import deploykit
from deploykit.progress import JsonReporter
from tests.conftest import run_cli


def test_json_log_has_stage_events_with_reuse_and_timings(tiny):
    cfg, store = tiny
    stream = io.StringIO()
    deploykit.convert(cfg, workdir=store, reporter=JsonReporter(stream), gate__targets={"default": {"fps": 2}})
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    ends = {e["stage"]: e for e in events if e["event"] == "stage_end"}
    assert ends["build"]["status"] == "reused" and ends["gate"]["status"] == "ran"
    assert all("seconds" in e and "ts" in e and e["ts"].endswith("Z") for e in ends.values())
    timing = [e for e in events if e.get("description", "").startswith("timing")]
    assert [e["event"] for e in timing] == ["task_start", "task_end"]  # one pair per batch size, not per iteration


def test_cli_log_format_json_goes_to_stderr(tiny):
    cfg, store = tiny
    code, out, err = run_cli("convert", str(cfg), "-w", str(store), "--log-format", "json")
    assert code == 0
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert {e["event"] for e in lines} >= {"stage_start", "stage_end"}
