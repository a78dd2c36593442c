"""Markdown for CI job summaries and pull-request comments, from the run record: the verdict with
its exit code, the stages, then the quantize, parity and gate sections (each check's result is the
record's, so the comment says what the exit code says)."""

from __future__ import annotations

from typing import Any

from deploykit.report.record import Check, RunRecord


def fmt(value: Any, spec: str = ".3g") -> str:
    """A number for a table cell; missing or non-finite values (stored as null) show as a dash."""
    return "—" if value is None else format(value, spec)


def change(slowdown: float) -> str:
    """A baseline comparison in words: ``+12.0% slower`` or ``82.7% faster`` (never "-82.7% slower")."""
    return f"{abs(slowdown) * 100:.1f}% {'slower' if slowdown > 0 else 'faster'}" if slowdown else "unchanged"


def _verdict(check: Check | None) -> str:
    if check is None:
        return ""
    return {"pass": "pass", "fail": "**FAIL**", "inconclusive": "_inconclusive_",
            "skipped": "_skipped_"}[check.status] + (" (accepted)" if check.status == "inconclusive" and check.passed else "")


def render(record: RunRecord) -> str:
    """The whole record as one Markdown document."""
    lines = [f"## deploykit {record.identity} — {record.verdict} (exit {record.exit_code})", ""]
    if record.error:
        lines += [f"**error:** {record.error}" + (f" — _{record.hint}_" if record.hint else ""), ""]
    if record.stages:
        lines += ["| stage | status | time | artifact | note |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {s.stage} | {s.status} | {s.seconds:.2f} s | `{s.digest[:12]}` | {s.error or s.note} |" for s in record.stages]
    lines += [f"\n> warning: {w}" for w in record.warnings]
    for section in (_quantize(record), _parity(record), _gate(record)):
        if section:
            lines += ["", *section]
    return "\n".join(lines) + "\n"


def _section_title(title: str, checks: list[Check]) -> str:
    return f"### {title} — {'FAIL' if any(not c.passed for c in checks) else 'PASS'}"


def _quantize(record: RunRecord) -> list[str]:
    checks = record.group("quantize")
    q = record.details.get("quantize") or {}
    if not checks and not q:
        return []
    out = [_section_title(f"quantize {str(q.get('precision', record.precision)).upper()} ({q.get('flavour', record.flavour)} "
                          f"flavour)", checks), "",
           f"{q.get('method', '')} calibration: {_calibration_samples(q)}, {q.get('quantized_nodes', 0)} nodes "
           f"quantized; checked against FP32 on {_checked_on(q)} with {q.get('evaluator') or 'no evaluator'}.", ""]
    if checks:
        out += ["| output | worst rel L2 | limit | result | why |", "| --- | --- | --- | --- | --- |"]
        out += [f"| {c.name} | {fmt(c.measured)} | {fmt(c.limit)} | {_verdict(c)} | {c.message} |" for c in checks]
    speed = q.get("cpu_speed")
    if speed:
        out += ["", f"On this CPU: FP32 {speed['fp32_ms']:.3f} ms, {str(q['precision']).upper()} {speed['quantized_ms']:.3f} ms "
                    f"at batch {speed['batch']} ({speed['speedup']:.2f}x; {speed.get('speedup_low', 0):.2f}-"
                    f"{speed.get('speedup_high', 0):.2f}x over {speed.get('rounds', 0)} interleaved rounds)."]
    return out


def _calibration_samples(q: dict[str, Any]) -> str:
    """How many samples were read and how many set the ranges (the notes' numbers, not the read count alone)."""
    read, ranged = q.get("samples", 0), q.get("range_samples", q.get("samples", 0))
    return f"ranges from {ranged} of {read} samples read" if ranged != read else f"ranges from {read} samples"


def _checked_on(q: dict[str, Any]) -> str:
    check = q.get("check") or {}
    return f"{check.get('samples', q.get('check_samples', 0))} samples ({check.get('data') or 'held-out calibration samples'})"


def _parity(record: RunRecord) -> list[str]:
    checks = record.group("parity", "task")
    report = record.details.get("parity") or {}
    if not checks:
        return []
    by_name = {c.name: c for c in checks}
    out = [_section_title("parity", checks), "",
           f"Candidate: {report.get('candidate_evaluator', '?')}; data: {(report.get('data') or {}).get('note', '?')}.", "",
           "| output | reference | max abs | rel L2 | cosine | SNR dB | result |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, refs in report.get("outputs", {}).items():
        for ref, r in refs.items():
            m = r["metrics"]
            out.append(f"| {name} | {ref} | {fmt(m.get('max_abs'))} | {fmt(m.get('rel_l2'))} | {fmt(m.get('cosine'), '.6f')} | "
                       f"{fmt(m.get('snr_db'), '.1f')} | {_verdict(by_name.get(f'{name} vs {ref}'))} |")
    tasks = record.group("task")
    if tasks:
        out += ["", "| task | result | measured |", "| --- | --- | --- |"]
        out += [f"| {c.name} | {_verdict(c)} | {c.verdict_line()} |" for c in tasks]
    failed = [c for c in checks if not c.passed]
    out += [f"\n- {c.name}: {c.message}" for c in failed if c.message]
    d = report.get("diagnosis")
    if d and d.get("status") == "ran":
        first = d.get("first_exceeding") or []
        out += ["", f"First diverging tensor: `{first[0]['tensor']}` (node `{first[0]['node']}`, {first[0]['op_type']}, "
                    f"rel-L2 {fmt(first[0]['rel_l2'])})." if first else
                f"_per-layer diagnosis ran: no tensor exceeds rel-L2 {fmt(d.get('threshold'))}_"]
    elif d:
        out += ["", f"_per-layer diagnosis {d.get('status')}: {d.get('reason') or 'no reason given'}_"]
    return out


def _gate(record: RunRecord) -> list[str]:
    report = record.details.get("gate")
    if not report:
        return []
    checks = record.group("gate", "baseline")
    lat, spread = report["latency"], report.get("spread", {})
    cached = " (cached: measured by an earlier run)" if record.gate_cached else ""
    out = [_section_title(f"gate: {report['platform']}, batch {report['batch']}{cached}", checks), "",
           f"{report.get('trials_count', 1)} trials × {report.get('iterations', lat['n'])} iterations after "
           f"{report['warmup']['iterations'] if isinstance(report['warmup'], dict) else report['warmup']} warm-up "
           f"runs; evaluator: {report['evaluator']}.", "",
           "| metric | median of trials | trial range |", "| --- | --- | --- |",
           f"| FPS ({report['fps_definition']}) | {report['fps']:.1f} | {_range(report.get('fps_trials'), '.1f')} |"]
    if report.get("wall_fps"):
        out.append(f"| throughput ({report.get('wall_fps_definition', 'wall clock')}) | {report['wall_fps']:.1f} samples/s | "
                   f"{_range(report.get('wall_fps_trials'), '.1f')} |")
    for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms"):
        s = spread.get(k)
        rng = f"{s['min']:.3f}–{s['max']:.3f} ms ({s['rel'] * 100:.1f}%)" if s else ""
        out.append(f"| latency {k.removesuffix('_ms')} | {lat[k]:.3f} ms | {rng} |")
    targets = record.group("gate")
    out += ["", "| check | target | measured | result |", "| --- | --- | --- | --- |"]
    out += [f"| {c.name} | {fmt(c.limit, 'g')} | {fmt(c.measured, '.2f')} | {_verdict(c)} |" if c.measured is not None
            else f"| {c.name} | — | — | {_verdict(c)} ({c.message}) |" for c in targets]
    out += _sweep(report) + _baseline(report, {c.name: c for c in record.group("baseline")})
    return out + (["", report["profile_markdown"].rstrip("\n")] if report.get("profile_markdown") else [])


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


def _baseline(report: dict[str, Any], checks: dict[str, Check]) -> list[str]:
    b = report.get("baseline")
    if not b:
        return []
    out = ["", f"Baseline `{b['path']}` (threshold {b['threshold'] * 100:g}% beyond the measured spread):", "",
           "| metric | baseline | now | change (median) | at least | result |", "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {c['metric']} | {c['baseline']:.4g} | {c['measured']:.4g} | {change(c['slowdown'])} | "
            f"{change(c['slowdown_at_least'])} | {_verdict(checks.get(c['name']))} |" for c in b["checks"]]
    return out
