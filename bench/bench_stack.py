"""Stack benchmark: the example stack (examples/stack/stack.yaml) on this CPU.

1. Alone vs together: each model alone at its rate, then all three together; the slow-down of each
   model's p50 and p99 beside the others.
2. Miss rate at two rates: the example's rates, and every rate doubled.
3. Harness overhead: the same three ONNX Runtime sessions on three threads, back to back for
   ``SECONDS``, driven by bare ``session.run`` loops and by the stack harness (rates so high every
   model is always busy, so the harness adds only its bookkeeping), interleaved over ``ROUNDS``.
   Two measures: the harness's own time between one run's end and the next run's start (median, as
   a share of the model's median run time; target <= 5 %), which the machine's load barely moves; and
   runs completed against the bare loops (1 - harness / bare), which on a shared machine moves by
   tens of percent between rounds and is reported with its range.

Prints a table and writes bench/results/stack.json. Numbers come from one run on one machine:
compare them only as ratios measured here.
"""

from __future__ import annotations

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
DURATION_S, ALONE_S = 10.0, 3.0
ROUNDS, SECONDS = 3, 3.0


def spec(rate_scale: float = 1.0, **top: float):
    raw = load_yaml(read_text(STACK), str(STACK))
    for m in raw["models"].values():
        if "rate_hz" in m:
            m["rate_hz"] = m["rate_hz"] * rate_scale
    raw.update(top)
    return stack_from_dict(raw, STACK.parent.resolve(), str(STACK))


def stack_runs(store: Path) -> dict[str, dict]:
    from deploykit.stack.run import run_stack

    out = {}
    for scale in (1.0, 2.0):
        raw = load_yaml(read_text(STACK), str(STACK))
        for m in raw["models"].values():
            if "rate_hz" in m:
                m["rate_hz"] *= scale
        raw.update(duration_s=DURATION_S, alone_s=ALONE_S)
        result = run_stack(_rebased(raw), workdir=store)
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


def _rebased(raw: dict) -> dict:
    """Model paths made absolute (run_stack reads a mapping's relative paths from the working folder)."""
    for m in raw["models"].values():
        m["model"] = str((STACK.parent / m["model"]).resolve())
    return raw


def overhead(store: Path) -> dict[str, object]:
    from deploykit.stack.models import load_all
    from deploykit.stack.runner import run_phase

    busy = spec(1.0)
    loaded = load_all(busy, store)
    producers = {n: m for n, m in busy.models.items()}
    # every model at 10 kHz on its own (no chain): always busy, so runs are back to back
    flat = stack_from_dict(
        {
            "duration_s": SECONDS,
            "alone_s": 0,
            "models": {
                n: {"model": str(busy.path(n)), "rate_hz": 10_000.0, "threads": m.threads} for n, m in producers.items()
            },
        },
        STACK.parent,
    )
    runs = {n: m.session.timed_runner(m.feeds) for n, m in loaded.items()}
    raw = {n: (m.session._session, [o.name for o in m.session.outputs], m.feeds) for n, m in loaded.items()}
    bare_rounds, harness_rounds, gaps, service = [], [], {}, {}
    for _ in range(ROUNDS):
        bare_rounds.append(_bare(raw, SECONDS))
        frames = run_phase(flat, runs, SECONDS)
        harness_rounds.append({n: len(f.latencies_ms) for n, f in frames.items()})
        for n, f in frames.items():
            gaps.setdefault(n, []).extend(_gaps(f))
            service.setdefault(n, []).extend(f.service_ms)
    per_model = {}
    for n in loaded:
        ratios = [h[n] / b[n] for h, b in zip(harness_rounds, bare_rounds, strict=True) if b[n]]
        gap_us = statistics.median(gaps[n]) * 1e3
        per_model[n] = {
            "bare_runs": [b[n] for b in bare_rounds],
            "harness_runs": [h[n] for h in harness_rounds],
            "throughput_overhead": 1.0 - statistics.median(ratios),
            "gap_us": gap_us,
            "run_ms": statistics.median(service[n]),
            "gap_share": gap_us / 1e3 / statistics.median(service[n]),
        }
    totals = [sum(h.values()) / sum(b.values()) for h, b in zip(harness_rounds, bare_rounds, strict=True)]
    return {
        "rounds": ROUNDS,
        "seconds": SECONDS,
        "models": per_model,
        "gap_share": max(m["gap_share"] for m in per_model.values()),
        "throughput_overhead": 1.0 - statistics.median(totals),
        "throughput_overhead_range": [1.0 - max(totals), 1.0 - min(totals)],
    }


def _gaps(frames) -> list[float]:
    """ms between one run's end and the next run's start: what the harness itself spends per frame."""
    s, d = frames.starts_s, frames.service_ms
    return [(s[i + 1] - s[i]) * 1e3 - d[i] for i in range(len(s) - 1)]


def _bare(raw: dict, seconds: float) -> dict[str, int]:
    counts = dict.fromkeys(raw, 0)
    start = time.perf_counter() + 0.05
    end = start + seconds

    def loop(name: str) -> None:
        session, names, feeds = raw[name]
        while time.perf_counter() < start:
            time.sleep(0.001)
        while time.perf_counter() < end:
            session.run(names, feeds)
            counts[name] += 1

    threads = [threading.Thread(target=loop, args=(n,)) for n in raw]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts


def main() -> None:
    import tempfile

    from deploykit.store.environment import cpu_info, load_snapshot

    store = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="bench-stack-"))
    )  # a store to reuse
    before = load_snapshot()
    rates = stack_runs(store)
    cost = overhead(store)
    result = {
        "stack": str(STACK.relative_to(ROOT)),
        "cpu": cpu_info(),
        "load_before": before,
        "load_after": load_snapshot(),
        "rates": rates,
        "harness": cost,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(
        f"{'rates':6} {'model':10} {'Hz':>6} {'achieved':>9} {'miss':>7} {'p50':>7} {'p50 alone':>10} "
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
    print(
        f"harness time between runs: at most {cost['gap_share'] * 100:.2f}% of a model's run (target <= 5%); "
        f"runs vs bare session.run loops on threads: {cost['throughput_overhead'] * 100:+.1f}% fewer (rounds "
        f"{cost['throughput_overhead_range'][0] * 100:+.1f}..{cost['throughput_overhead_range'][1] * 100:+.1f}%)"
    )
    for name, m in cost["models"].items():
        print(
            f"  {name:10} run {m['run_ms']:.3f} ms, harness gap {m['gap_us']:.1f} us ({m['gap_share'] * 100:.2f}%); "
            f"runs bare {m['bare_runs']} harness {m['harness_runs']}"
        )
    out = ROOT / "bench" / "results" / "stack.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
