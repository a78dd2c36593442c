"""Markdown for CI job summaries and pull-request comments, from the run record: the verdict with
its exit code, the stages, then the quantize, parity and gate sections (each check's result is the
record's, so the comment says what the exit code says)."""

from __future__ import annotations

from typing import Any

from deploykit.record.model import Check, RunRecord, portable


def fmt(value: Any, spec: str = ".3g") -> str:
    """A number for a table cell; missing or non-finite values (stored as null) show as a dash."""
    return "—" if value is None else format(value, spec)


def change(slowdown: float) -> str:
    """A baseline comparison in words: ``+12.0% slower`` or ``82.7% faster`` (never "-82.7% slower")."""
    return f"{abs(slowdown) * 100:.1f}% {'slower' if slowdown > 0 else 'faster'}" if slowdown else "unchanged"


def _verdict(check: Check | None) -> str:
    if check is None:
        return ""
    return {"pass": "pass", "fail": "**FAIL**", "inconclusive": "_inconclusive_", "skipped": "_skipped_"}[
        check.status
    ] + (" (accepted)" if check.status == "inconclusive" and check.passed else "")


def render(record: RunRecord) -> str:
    """The whole record as one Markdown document."""
    lines = [f"## deploykit {record.identity} — {record.verdict} (exit {record.exit_code})", ""]
    here = record.workdir
    if record.stopped:
        lines += [
            f"**error:** {portable(record.error, here)}"
            + (f" — _{portable(record.hint, here)}_" if record.hint else ""),
            "",
        ]
    if record.stages:
        lines += ["| stage | status | time | artifact | note |", "| --- | --- | --- | --- | --- |"]
        lines += [
            f"| {s.stage} | {s.status} | {s.seconds:.2f} s | `{s.digest[:12]}` | {portable(s.error or s.note, here)} |"
            for s in record.stages
        ]
    lines += [f"\n> warning: {w}" for w in record.warnings]
    for section in (_quantize(record), _lint(record), _parity(record), _gate(record)):
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
    out = [
        _section_title(
            f"quantize {str(q.get('precision', record.precision)).upper()} ({q.get('flavour', record.flavour)} "
            f"flavour)",
            checks,
        ),
        "",
        f"{q.get('method', '')} calibration: {_calibration_samples(q)}, {q.get('quantized_nodes', 0)} nodes "
        f"quantized; checked against FP32 on {_checked_on(q)} with {q.get('evaluator') or 'no evaluator'}.",
        "",
    ]
    if checks:
        out += ["| output | worst rel L2 | limit | result | why |", "| --- | --- | --- | --- | --- |"]
        out += [f"| {c.name} | {fmt(c.measured)} | {fmt(c.limit)} | {_verdict(c)} | {c.message} |" for c in checks]
    speed = q.get("cpu_speed")
    if speed:
        out += [
            "",
            f"On this CPU: FP32 {speed['fp32_ms']:.3f} ms, "
            f"{str(q['precision']).upper()} {speed['quantized_ms']:.3f} ms "
            f"at batch {speed['batch']} ({speed['speedup']:.2f}x; {speed.get('speedup_low', 0):.2f}-"
            f"{speed.get('speedup_high', 0):.2f}x over {speed.get('rounds', 0)} interleaved rounds).",
        ]
    return out


LINT_ROWS = 20  # findings a summary lists; the lint's own report (`deploykit lint --json`) has them all


def lint_rows(report: dict[str, Any], limit: int = LINT_ROWS) -> list[list[str]]:
    """The lint's findings as table rows (severity, rule, node, op, versions, message, fix), errors first."""
    return [
        [f["severity"], f["rule"], f["node"], f["op"], ", ".join(f["versions"]), f["message"], f["fix"]]
        for f in report.get("findings", [])[:limit]
    ]


def _lint(record: RunRecord) -> list[str]:
    checks = record.group("lint")
    if not checks:
        return []
    report = record.details.get("lint") or {}
    out = [_section_title("TensorRT lint", checks), "", *(f"- {c.message}" for c in checks)]
    rows = lint_rows(report)
    if rows:
        out += [
            "",
            "| severity | rule | node | op | TensorRT | finding | fix |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
        more = len(report.get("findings", [])) - len(rows)
        out += [f"\n_and {more} more: `deploykit lint` lists them all_"] if more > 0 else []
    return out


def _calibration_samples(q: dict[str, Any]) -> str:
    """How many samples were read and how many set the ranges (the notes' numbers, not the read count alone)."""
    read, ranged = q.get("samples", 0), q.get("range_samples", q.get("samples", 0))
    return f"ranges from {ranged} of {read} samples read" if ranged != read else f"ranges from {read} samples"


def _checked_on(q: dict[str, Any]) -> str:
    check = q.get("check") or {}
    samples = check.get("samples", q.get("check_samples", 0))
    return f"{samples} samples ({check.get('data') or 'held-out calibration samples'})"


def _parity(record: RunRecord) -> list[str]:
    checks = record.group("parity", "task")
    report = record.details.get("parity") or {}
    if not checks:
        return []
    by_name = {c.name: c for c in checks}
    out = [
        _section_title("parity", checks),
        "",
        f"Candidate: {report.get('candidate_evaluator', '?')}; data: {(report.get('data') or {}).get('note', '?')}.",
        "",
        "| output | reference | max abs | rel L2 | cosine | SNR dB | result |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, refs in report.get("outputs", {}).items():
        for ref, r in refs.items():
            m = r["metrics"]
            out.append(
                f"| {name} | {ref} | {fmt(m.get('max_abs'))} | {fmt(m.get('rel_l2'))} | "
                f"{fmt(m.get('cosine'), '.6f')} | "
                f"{fmt(m.get('snr_db'), '.1f')} | {_verdict(by_name.get(f'{name} vs {ref}'))} |"
            )
    tasks = record.group("task")
    if tasks:
        out += ["", "| task | result | measured |", "| --- | --- | --- |"]
        out += [f"| {c.name} | {_verdict(c)} | {c.verdict_line()} |" for c in tasks]
    failed = [c for c in checks if not c.passed]
    out += [f"\n- {c.name}: {c.message}" for c in failed if c.message]
    d = report.get("diagnosis")
    if d and d.get("status") == "ran":
        first = d.get("first_exceeding") or []
        out += [
            "",
            f"First diverging tensor: `{first[0]['tensor']}` (node `{first[0]['node']}`, {first[0]['op_type']}, "
            f"rel-L2 {fmt(first[0]['rel_l2'])})."
            if first
            else f"_per-layer diagnosis ran: no tensor exceeds rel-L2 {fmt(d.get('threshold'))}_",
        ]
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
    out = [
        _section_title(f"gate: {report['platform']}, batch {report['batch']}{cached}", checks),
        "",
        f"{report.get('trials_count', 1)} trials × {report.get('iterations', lat['n'])} iterations after "
        f"{report['warmup']['iterations'] if isinstance(report['warmup'], dict) else report['warmup']} warm-up "
        f"runs; evaluator: {report['evaluator']}; timed {timed_phrase(report)}.",
        "",
        "| metric | median of trials | trial range |",
        "| --- | --- | --- |",
        f"| **FPS** ({report['fps_definition']}) | **{report['fps']:.1f}** "
        f"| {_range(report.get('fps_trials'), '.1f')} |",
    ]
    if report.get("fps_best_case"):
        out.append(
            f"| {report.get('fps_best_case_definition', 'best case')} | {report['fps_best_case']:.1f} | "
            f"{_range(report.get('fps_best_case_trials'), '.1f')} |"
        )
    for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms"):
        s = spread.get(k)
        rng = f"{s['min']:.3f}–{s['max']:.3f} ms ({s['rel'] * 100:.1f}%)" if s else ""
        out.append(f"| latency {k.removesuffix('_ms')} | {lat[k]:.3f} ms | {rng} |")
    out += _worst(report)
    targets = record.group("gate")
    judged = {c["name"]: c.get("statistic", "") for c in report.get("checks", [])}
    out += ["", "| check | target | measured | judged on | result |", "| --- | --- | --- | --- | --- |"]
    out += [
        f"| {c.name} | {fmt(c.limit, 'g')} | {fmt(c.measured, '.4g')} | {judged.get(c.name.split(': ')[-1], '')} | "
        f"{_verdict(c)} |"
        if c.measured is not None
        else f"| {c.name} | — | — | | {_verdict(c)} ({c.message}) |"
        for c in targets
    ]
    out += _sweep(report) + _baseline(report, {c.name: c for c in record.group("baseline")})
    return out + (["", report["profile_markdown"].rstrip("\n")] if report.get("profile_markdown") else [])


def timed_phrase(report: dict[str, Any]) -> str:
    """What was timed: the shapes, end to end or the engine alone, the CUDA graph mode."""
    shapes = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in (report.get("shapes") or {}).items())
    timed = report.get("timed") or {}
    mode = (timed.get("runner") or {}).get("mode")
    return "; ".join(
        p
        for p in (
            shapes,
            timed.get("what", ""),
            f"runner {mode}" if mode else "",
            f"latency over means of {timed['avg_runs']} runs" if timed.get("avg_runs", 1) > 1 else "",
        )
        if p
    )


def _worst(report: dict[str, Any]) -> list[str]:
    """p99.9, max and jitter over every timed iteration, and the deadline's misses."""
    w, d = report.get("worst_case"), report.get("deadline")
    out = []
    if w:
        out += [
            f"| latency p99.9 (every iteration) | {w['p999_ms']:.3f} ms | |",
            f"| latency max (every iteration) | {w['max_ms']:.3f} ms | |",
            f"| jitter p99 − p50 (every iteration) | {w['jitter_ms']:.3f} ms | |",
        ]
    if d:
        out.append(
            f"| deadline {d['deadline_ms']:g} ms: late frames | {d['misses']} of {d['frames']} "
            f"({d['miss_rate'] * 100:.2f}%), longest run {d['longest_miss_run']} | |"
        )
    soak = report.get("soak")
    if soak:
        from deploykit.report.terminal import soak_phrase

        out.append(f"| {soak_phrase(soak)} (measured on every run) | max {soak['worst_case']['max_ms']:.3f} ms | |")
    return out


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
    out = [
        "",
        f"Baseline `{b['path']}` (threshold {b['threshold'] * 100:g}% beyond the measured spread):",
        "",
        "| metric | baseline | now | change (median) | at least | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    out += [
        f"| {c['metric']} | {c['baseline']:.4g} | {c['measured']:.4g} | {change(c['slowdown'])} | "
        f"{change(c['slowdown_at_least'])} | {_verdict(checks.get(c['name']))} |"
        for c in b["checks"]
    ]
    return out
