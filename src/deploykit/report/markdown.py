"""Markdown summaries for CI job summaries and pull-request comments."""

from __future__ import annotations

from typing import Any


def fmt(value: Any, spec: str = ".3g") -> str:
    """A number for a table cell; missing or non-finite values (stored as null) show as a dash."""
    return "—" if value is None else format(value, spec)


def _verdict(passed: bool) -> str:
    return "pass" if passed else "**FAIL**"


def render_gate(report: dict[str, Any]) -> str:
    """The gate report: median over trials with the spread, checks, sweep, baseline."""
    lat, spread = report["latency"], report.get("spread", {})
    lines = [f"## deploykit gate: {report['model']} — {'PASS' if report['passed'] else 'FAIL'}", "",
             f"Platform `{report['platform']}`, batch {report['batch']}, {report.get('trials_count', 1)} trials × "
             f"{report.get('iterations', lat['n'])} iterations after "
             f"{report['warmup']['iterations'] if isinstance(report['warmup'], dict) else report['warmup']} warm-up "
             f"runs; evaluator: {report['evaluator']}.", "",
             "| metric | median of trials | trial range |", "| --- | --- | --- |",
             f"| FPS ({report['fps_definition']}) | {report['fps']:.1f} | {_range(report.get('fps_trials'), '.1f')} |"]
    for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms"):
        s = spread.get(k)
        rng = f"{s['min']:.3f}–{s['max']:.3f} ms ({s['rel'] * 100:.1f}%)" if s else ""
        lines.append(f"| latency {k.removesuffix('_ms')} | {lat[k]:.3f} ms | {rng} |")
    if report["checks"]:
        lines += ["", "| check | target | measured | result |", "| --- | --- | --- | --- |"]
        lines += [f"| {c['name']} | {c['target']:g} | {c['measured']:.2f} | {_verdict(c['passed'])} |"
                  for c in report["checks"]]
    else:
        lines += ["", f"_{report.get('note') or 'no target'}: measured only._"]
    lines += _sweep(report) + _baseline(report)
    return "\n".join(lines) + "\n"


def _range(values: list[float] | None, spec: str) -> str:
    return f"{min(values):{spec}}–{max(values):{spec}}" if values else ""


def _sweep(report: dict[str, Any]) -> list[str]:
    rows = [report, *report.get("sweep", [])]
    if len(rows) < 2 and not report.get("concurrency"):
        return []
    out = ["", "| batch | p50 ms | p99 ms | throughput (samples/s) |", "| --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: r["batch"]):
        out.append(f"| {r['batch']} | {r['latency']['p50_ms']:.3f} | {r['latency']['p99_ms']:.3f} | {r['fps']:.1f} |")
    c = report.get("concurrency")
    if c:
        out.append(f"| {c['batch']} × {c['streams']} streams | {c['p50_ms']:.3f} | | {c['throughput']:.1f} |")
    return out


def _baseline(report: dict[str, Any]) -> list[str]:
    b = report.get("baseline")
    if not b:
        return []
    out = ["", f"Baseline `{b['path']}` (threshold {b['threshold'] * 100:g}% beyond the measured spread):", "",
           "| metric | baseline | now | change | at least | result |", "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {c['metric']} | {c['baseline']:.4g} | {c['measured']:.4g} | {c['slowdown'] * 100:+.1f}% slower | "
            f"{c['slowdown_at_least'] * 100:+.1f}% | {_verdict(c['passed'])} |" for c in b["checks"]]
    return out


def render_parity(report: dict[str, Any]) -> str:
    """The parity report: one row per output x reference, one per task check, then the diagnosis."""
    status = report.get("status", "pass" if report["passed"] else "fail").upper()
    lines = [f"## parity — {status}", "",
             f"Candidate: {report['candidate_evaluator']}; data: {report['data']['note']}.", "",
             "| output | reference | max abs | rel L2 | cosine | SNR dB | result |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for out, refs in report["outputs"].items():
        for ref, r in refs.items():
            m = r["metrics"]
            lines.append(f"| {out} | {ref} | {fmt(m['max_abs'])} | {fmt(m['rel_l2'])} | {fmt(m['cosine'], '.6f')} | "
                         f"{fmt(m.get('snr_db'), '.1f')} | {_status(r)} |")
    if report.get("tasks"):
        lines += ["", "| task | reference | metrics | result |", "| --- | --- | --- | --- |"]
        for t in report["tasks"]:
            shown = ", ".join(f"{lim['metric']} {fmt(t['metrics'][lim['metric']], '.4g')}" for lim in t["limits"])
            lines.append(f"| {t['label']} ({', '.join(t['outputs'])}) | {t['reference']} | {shown} | {_status(t)} |")
    for why in report.get("inconclusive", []):
        lines.append(f"\n_inconclusive: {why}_")
    d = report.get("diagnosis")
    if d and d.get("status") == "ran" and d.get("first"):
        lines += ["", f"First diverging tensor: `{d['first'][0]['name']}`."]
    elif d:
        lines += ["", f"_per-layer diagnosis {d.get('status')}: {d.get('reason', '')}_"]
    return "\n".join(lines) + "\n"


def _status(entry: dict[str, Any]) -> str:
    status = entry.get("status", "pass" if entry["passed"] else "fail")
    return {"pass": "pass", "fail": "**FAIL**", "inconclusive": "_inconclusive_"}[status]
