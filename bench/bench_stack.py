"""Stack benchmark: the example stack (examples/stack/stack.yaml) on this CPU.

1. Alone vs together: each model alone at its rate, then all three together; the slow-down of each
   model's p50 and p99 beside the others (``deploykit stack``'s own numbers).
2. Miss rate at two rates: the example's rates, and every rate doubled.
3. Harness overhead (issue 26: <= 5 %): for each model on its own, the same back-to-back loop on one
   thread, driven once by the stack harness (``run_phase`` at 8 frames per the model's fastest run, so it
   never waits: every frame pays the harness's pacing, recording, hand-off and NaN/Inf bookkeeping) and once
   by a bare loop calling the same ``session.run`` (the session's timed runner, the callable the
   harness calls). The two alternate (bare then harness, harness then bare in the next round) over
   ``--rounds`` rounds of ``--seconds`` each. Judged on **CPU time per completed run** (the process's
   CPU time over the loop / runs): time the process was not running, which a shared machine's load
   changes most, does not count, and each round's pair runs back to back so a drift in load reaches
   both. Reported per model: the median over rounds of harness / bare - 1, the rounds' min..max, and
   the same ratio of wall time per run (which load moves more, shown for comparison).

``--quick`` is a smoke run (short phases, two rounds): it checks the benchmark works, not the numbers.
Prints a table and writes bench/results/stack.json. Numbers come from one run on one machine:
compare them only as ratios measured here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from deploykit.config.load import load_yaml, read_text  # noqa: E402
from deploykit.stack.spec import stack_from_dict  # noqa: E402

STACK = ROOT / "examples" / "stack" / "stack.yaml"
BUSY = 8.0  # the harness's rate in the overhead loop: 8 frames per fastest run, so one is always waiting
WARM_RUNS = 20  # untimed runs of each model before its rounds (the fastest sets the busy rate)


def example(rate_scale: float = 1.0, **top: float) -> dict:
    """The example stack file as a mapping, every rate scaled, model paths absolute."""
    raw = load_yaml(read_text(STACK), str(STACK))
    for m in raw["models"].values():
        m["model"] = str((STACK.parent / m["model"]).resolve())
        if "rate_hz" in m:
            m["rate_hz"] = m["rate_hz"] * rate_scale
    raw.update(top)
    return raw


def stack_runs(store: Path, duration_s: float, alone_s: float) -> dict[str, dict]:
    """The example at its rates and at twice them: per model alone vs together, misses."""
    from deploykit.stack.run import run_stack

    out = {}
    for scale in (1.0, 2.0):
        result = run_stack(example(scale, duration_s=duration_s, alone_s=alone_s), workdir=store)
        out[f"x{scale:g}"] = {
            name: {
                "rate_hz": m["rate_hz"],
                "achieved_hz": m["achieved_hz"],
                "miss_rate": (m.get("deadline") or {}).get("miss_rate"),
                "dropped": m["dropped"],
                "p50_ms": m["latency"]["p50_ms"],
                "p99_ms": m["latency"]["p99_ms"],
                "alone_p50_ms": m["alone"]["latency"]["p50_ms"],
                "alone_p99_ms": m["alone"]["latency"]["p99_ms"],
                "slowdown_p50": m["slowdown"]["p50"],
                "slowdown_p99": m["slowdown"]["p99"],
            }
            for name, m in result.models.items()
        }
        out[f"x{scale:g}"]["passed"] = result.passed
    return out


def _harness(flat, name: str, run, seconds: float) -> dict[str, float]:
    from deploykit.stack.runner import run_phase

    cpu = time.process_time()
    frames = run_phase(flat, {name: run}, seconds)[name]
    cpu = time.process_time() - cpu
    return {"runs": len(frames.latencies_ms), "cpu_s": cpu, "dropped": len(frames.dropped_at)}


def _bare(run, seconds: float) -> dict[str, float]:
    """``run`` back to back on its own thread for ``seconds`` (the same 50-ms start the harness has)."""
    counts = [0]
    cpu = time.process_time()
    start = time.perf_counter() + 0.05
    end = start + seconds

    def loop() -> None:
        while time.perf_counter() < start:
            time.sleep(0.001)
        n = 0
        while time.perf_counter() < end:
            run()
            n += 1
        counts[0] = n

    t = threading.Thread(target=loop)
    t.start()
    t.join()
    return {"runs": counts[0], "cpu_s": time.process_time() - cpu}


def overhead(store: Path, rounds: int, seconds: float) -> dict[str, object]:
    """Each model alone on one thread: the harness's back-to-back loop against a bare one, interleaved."""
    from deploykit.stack.models import load_all

    spec = stack_from_dict(example(), STACK.parent.resolve(), str(STACK))
    loaded = load_all(spec, store)
    models = {}
    for name, m in loaded.items():
        run = m.session.timed_runner(m.feeds)
        rate = BUSY / min(_time(run) for _ in range(WARM_RUNS))
        entry = {"model": str(spec.path(name)), "rate_hz": rate, "threads": spec.models[name].threads}
        flat = stack_from_dict({"duration_s": seconds, "alone_s": 0, "models": {name: entry}}, STACK.parent.resolve())
        per_round = []
        for r in range(rounds):
            pair = {}
            for kind in ("bare", "harness") if r % 2 == 0 else ("harness", "bare"):
                pair[kind] = _bare(run, seconds) if kind == "bare" else _harness(flat, name, run, seconds)
            b, h = pair["bare"], pair["harness"]
            per_round.append(
                {
                    **{f"{k}_{x}": v for k, got in pair.items() for x, v in got.items()},
                    "cpu_overhead": (h["cpu_s"] / h["runs"]) / (b["cpu_s"] / b["runs"]) - 1.0,
                    "wall_overhead": b["runs"] / h["runs"] - 1.0,  # the same seconds each: wall per run
                }
            )
        models[name] = {"busy_rate_hz": rate, **_summary(per_round, seconds)}
    return {
        "method": "one model at a time on one thread, back to back; CPU time per completed run, harness / bare - 1",
        "rounds": rounds,
        "seconds": seconds,
        "models": models,
        "worst_overhead": max(m["cpu_overhead"] for m in models.values()),
    }


def _time(run) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def _summary(per_round: list[dict], seconds: float) -> dict[str, object]:
    cpu = [r["cpu_overhead"] for r in per_round]
    wall = [r["wall_overhead"] for r in per_round]
    bare = statistics.median(r["bare_cpu_s"] / r["bare_runs"] for r in per_round)
    harness = statistics.median(r["harness_cpu_s"] / r["harness_runs"] for r in per_round)
    return {
        "run_ms": statistics.median(seconds / r["bare_runs"] for r in per_round) * 1e3,  # wall per bare run
        "bare_cpu_ms": bare * 1e3,
        "harness_cpu_ms": harness * 1e3,
        "cpu_overhead": statistics.median(cpu),
        "cpu_overhead_range": [min(cpu), max(cpu)],
        "wall_overhead": statistics.median(wall),
        "wall_overhead_range": [min(wall), max(wall)],
        "always_busy": all(r["harness_dropped"] > 0 for r in per_round),  # it never waited for a frame
        "per_round": per_round,
    }


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def print_tables(rates: dict, cost: dict, duration_s: float, alone_s: float) -> None:
    print(
        f"alone vs together: the example at its rates (x1) and twice them (x2), {duration_s:g} s together "
        f"after {alone_s:g} s alone each"
    )
    print(
        f"{'rates':6} {'model':10} {'Hz':>6} {'achieved':>9} {'miss':>7} {'p50 ms':>7} {'p50 alone':>10} "
        f"{'slow p50':>9} {'slow p99':>9}"
    )
    for scale, models in rates.items():
        for name, m in models.items():
            if name == "passed":
                continue
            miss = f"{m['miss_rate'] * 100:.1f}%" if m["miss_rate"] is not None else "-"
            print(
                f"{scale:6} {name:10} {m['rate_hz']:6.1f} {m['achieved_hz']:9.1f} {miss:>7} {m['p50_ms']:7.2f} "
                f"{m['alone_p50_ms']:10.2f} {m['slowdown_p50']:8.2f}x {m['slowdown_p99']:8.2f}x"
            )
    print()
    print(
        f"harness overhead vs bare session.run loops: one model at a time on one thread, back to back, "
        f"{cost['rounds']} interleaved rounds of {cost['seconds']:g} s"
    )
    print(
        f"{'model':10} {'run ms':>7} {'CPU/run bare':>13} {'CPU/run harness':>16} {'overhead':>9} {'rounds':>17} "
        f"{'wall/run':>9} {'rounds':>17}"
    )
    for name, m in cost["models"].items():
        lo, hi = m["cpu_overhead_range"]
        wlo, whi = m["wall_overhead_range"]
        print(
            f"{name:10} {m['run_ms']:7.3f} {m['bare_cpu_ms']:10.3f} ms {m['harness_cpu_ms']:13.3f} ms "
            f"{_pct(m['cpu_overhead']):>9} {_pct(lo) + '..' + _pct(hi):>17} {_pct(m['wall_overhead']):>9} "
            f"{_pct(wlo) + '..' + _pct(whi):>17}"
        )
    print(f"worst model: {_pct(cost['worst_overhead'])} CPU time per run over the bare loop (target <= 5%)")


def main() -> None:
    import tempfile

    from deploykit.store.environment import cpu_info, load_snapshot

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: short phases, two rounds")
    ap.add_argument("--store", type=Path, help="an artifact store to build the example models into (and reuse)")
    ap.add_argument("--rounds", type=int, help="overhead rounds (default 6; --quick 2)")
    ap.add_argument("--seconds", type=float, help="seconds per overhead loop (default 2; --quick 0.5)")
    args = ap.parse_args()
    duration_s, alone_s = (2.0, 0.5) if args.quick else (10.0, 3.0)
    rounds = args.rounds or (2 if args.quick else 6)
    seconds = args.seconds or (0.5 if args.quick else 2.0)
    store = args.store or Path(tempfile.mkdtemp(prefix="bench-stack-"))

    before = load_snapshot()
    rates = stack_runs(store, duration_s, alone_s)
    cost = overhead(store, rounds, seconds)
    result = {
        "stack": str(STACK.relative_to(ROOT)),
        "quick": args.quick,
        "cpu": cpu_info(),
        "load_before": before,
        "load_after": load_snapshot(),
        "duration_s": duration_s,
        "alone_s": alone_s,
        "rates": rates,
        "harness": cost,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print_tables(rates, cost, duration_s, alone_s)
    out = ROOT / "bench" / "results" / "stack.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
