"""Pipeline overhead and cache benchmark on examples/detector (FP32, CPU backend).

1. Overhead: `deploykit convert` on a fresh workdir vs the same work with plain tools
   (bench/plain_tools.py), both as fresh processes, interleaved, several rounds.
2. Cache: an unchanged second `deploykit convert` vs the first; then a changed gate target, which
   must rerun only the gate.

Prints a table and writes bench/results/pipeline.json. Ratios come from one run on one machine.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "detector" / "deploykit.yaml"
DEPLOYKIT = Path(sys.executable).parent / "deploykit"
ROUNDS = 3


def timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed, proc.stderr


def convert(workdir: Path, *extra: str) -> tuple[float, dict[str, str]]:
    elapsed, log = timed([str(DEPLOYKIT), "convert", str(CONFIG), "-w", str(workdir), "--log-format", "json", *extra])
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return elapsed, {e["stage"]: e["status"] for e in events if e["event"] == "stage_end"}


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="deploykit-bench-"))
    first, plain, second, gate_only = [], [], [], []
    statuses: dict[str, dict[str, str]] = {}
    for i in range(ROUNDS):
        print(f"round {i + 1}/{ROUNDS} …", file=sys.stderr, flush=True)
        workdir = tmp / f"store{i}"
        t, statuses["first"] = convert(workdir)
        first.append(t)
        plain.append(timed([sys.executable, str(ROOT / "bench" / "plain_tools.py")])[0])
        t, statuses["second"] = convert(workdir)
        second.append(t)
        t, statuses["gate_changed"] = convert(workdir, "--set", "gate.targets.default.fps=21")
        gate_only.append(t)
    shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in
           {"first": first, "plain": plain, "second": second, "gate_changed": gate_only}.items()}
    results = {
        "rounds": ROUNDS, "seconds": {"first": first, "plain": plain, "second": second, "gate_changed": gate_only},
        "median_s": med,
        "overhead_ratio": med["first"] / med["plain"], "overhead_target": 1.25,
        "cache_ratio": med["second"] / med["first"], "cache_target": 0.15,
        "statuses": statuses,
        "only_gate_reran": statuses["gate_changed"] == {**dict.fromkeys(statuses["first"], "reused"), "gate": "ran"},
    }
    out = ROOT / "bench" / "results" / "pipeline.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"{'measurement':<44} {'median s':>9} {'ratio':>7} {'target':>7}")
    print(f"{'plain tools (export + ORT + timing loop)':<44} {med['plain']:>9.2f}")
    print(f"{'deploykit convert, fresh workdir':<44} {med['first']:>9.2f} {results['overhead_ratio']:>7.2f} {'<=1.25':>7}")
    print(f"{'deploykit convert, unchanged rerun':<44} {med['second']:>9.2f} {results['cache_ratio']:>7.2f} {'<=0.15':>7}")
    print(f"{'deploykit convert, gate target changed':<44} {med['gate_changed']:>9.2f}")
    print(f"only the gate reran after the target change: {results['only_gate_reran']} ({statuses['gate_changed']})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
