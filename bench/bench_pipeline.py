"""Pipeline overhead and cache benchmark on examples/detector (FP32, CPU backend).

1. Overhead: `deploykit convert` on a fresh workdir vs the same work with plain tools
   (bench/plain_tools.py), both as fresh processes, interleaved, several rounds.
2. Cache: an unchanged second `deploykit convert` vs the first; then a changed gate target, which
   must rerun only the gate.
3. Where the overhead goes: the CPU time (every thread, so a loaded machine changes it less than the
   wall clock) of each piece of one convert (bench/convert_breakdown.py) beside the plain script's
   phases (bench/plain_tools.py --json), grouped into the same work, verification and bookkeeping.

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


def cpu_json(script: str, *args: str) -> dict:
    """One fresh process of a bench script that prints a JSON object on its last line."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True, cwd=ROOT
    )
    if proc.returncode != 0:
        raise SystemExit(f"{script} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def breakdown() -> dict:
    """The convert's CPU time by piece next to the plain script's, each piece with what it buys."""
    ours, plain = cpu_json("convert_breakdown.py"), cpu_json("plain_tools.py", "--json")
    pieces = {"imports": ours["import_s"], **ours["pieces"]}
    mine = {k: pieces.get(k, 0.0) for k in ("imports", "build the torch model", "torch.onnx.export")}
    rows = [(k, plain["phases"].get(k, 0.0), mine[k], "same work") for k in mine]
    rows.append(
        (
            "gate: timing loop and report",
            plain["phases"]["ONNX Runtime session"] + plain["phases"]["timing loop"],
            pieces.get("gate: timing loop and report", 0.0),
            "same work (the session, then the same loop)",
        )
    )
    for k, v in sorted(pieces.items()):
        if k not in mine and not k.startswith("gate:"):
            kind = (
                "verification" if k.startswith("verify") else "bookkeeping" if k.startswith("bookkeeping") else "build"
            )
            rows.append((k, 0.0, v, kind))
    total_ours, total_plain = ours["import_s"] + ours["convert_s"], plain["total_s"]
    return {
        "rows": [{"piece": r[0], "plain_cpu_s": r[1], "convert_cpu_s": r[2], "buys": r[3]} for r in rows],
        "convert_cpu_s": total_ours,
        "plain_cpu_s": total_plain,
        "cpu_ratio": total_ours / total_plain,
        "by_kind": {
            kind: sum(r[2] - r[1] for r in rows if r[3].split(" ")[0] == kind)
            for kind in ("same", "verification", "bookkeeping", "build")
        },
    }


def print_breakdown(b: dict) -> None:
    print(f"\n{'where the CPU time goes (one run each)':<58} {'plain s':>8} {'convert s':>10}  buys")
    for r in b["rows"]:
        print(f"{r['piece']:<58} {r['plain_cpu_s']:>8.2f} {r['convert_cpu_s']:>10.2f}  {r['buys']}")
    print(f"{'total (CPU)':<58} {b['plain_cpu_s']:>8.2f} {b['convert_cpu_s']:>10.2f}  ratio {b['cpu_ratio']:.2f}")
    extra = b["convert_cpu_s"] - b["plain_cpu_s"]
    print(
        "the difference, by what it buys: "
        + ", ".join(f"{k} {v:+.2f} s" for k, v in b["by_kind"].items())
        + f" (of {extra:+.2f} s)"
    )


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
    med = {
        k: statistics.median(v)
        for k, v in {"first": first, "plain": plain, "second": second, "gate_changed": gate_only}.items()
    }
    results = {
        "rounds": ROUNDS,
        "seconds": {"first": first, "plain": plain, "second": second, "gate_changed": gate_only},
        "median_s": med,
        "overhead_ratio": med["first"] / med["plain"],
        "overhead_target": 1.25,
        "cache_ratio": med["second"] / med["first"],
        "cache_target": 0.15,
        "statuses": statuses,
        "only_gate_reran": statuses["gate_changed"] == {**dict.fromkeys(statuses["first"], "reused"), "gate": "ran"},
        "breakdown": breakdown(),
    }
    out = ROOT / "bench" / "results" / "pipeline.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"{'measurement':<44} {'median s':>9} {'ratio':>7} {'target':>7}")
    print(f"{'plain tools (export + ORT + timing loop)':<44} {med['plain']:>9.2f}")
    print(
        f"{'deploykit convert, fresh workdir':<44} {med['first']:>9.2f} {results['overhead_ratio']:>7.2f} {'<=1.25':>7}"
    )
    print(
        f"{'deploykit convert, unchanged rerun':<44} {med['second']:>9.2f} {results['cache_ratio']:>7.2f} {'<=0.15':>7}"
    )
    print(f"{'deploykit convert, gate target changed':<44} {med['gate_changed']:>9.2f}")
    print(f"only the gate reran after the target change: {results['only_gate_reran']} ({statuses['gate_changed']})")
    print_breakdown(results["breakdown"])
    print(f"wrote {out}")


if __name__ == "__main__":
    if "--breakdown" in sys.argv:  # part 3 alone: one run of each, a minute
        found = breakdown()
        print_breakdown(found)
        (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
        (ROOT / "bench" / "results" / "pipeline_breakdown.json").write_text(json.dumps(found, indent=2))
    else:
        main()
