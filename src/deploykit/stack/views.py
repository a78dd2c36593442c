"""The stack's result as the terminal prints it, as JSON, JUnit (model x check), Markdown and HTML
(with a latency-over-time plot per model), the soak's checks in each. Each renders
:class:`~deploykit.stack.record.StackResult` and nothing else, so no view can disagree with the exit code."""

from __future__ import annotations

import html as _html
from typing import Any
from xml.etree import ElementTree as ET

from deploykit.record.model import Check
from deploykit.stack.record import StackResult
from deploykit.store.jsonio import dumps


def _ratio(x: float | None) -> str:
    return f"{x:.2f}x" if x else "—"


def model_line(name: str, m: dict[str, Any]) -> str:
    lat = m["latency"]
    rate = f"{m['achieved_hz']:.1f} of {m['rate_hz']:g} Hz" if m.get("rate_hz") else f"{m['achieved_hz']:.1f} Hz"
    text = (
        f"{name}: {rate} ({m['completed']} frames, {m['dropped']} dropped), p50 {lat['p50_ms']:.2f} ms, "
        f"p99 {lat['p99_ms']:.2f} ms, p99.9 {lat['p999_ms']:.2f} ms, max {lat['max_ms']:.2f} ms"
    )
    d = m.get("deadline")
    if d:
        text += (
            f"; deadline {d['deadline_ms']:g} ms: {d['misses']} of {d['frames']} late ({d['miss_rate'] * 100:.1f}%, "
            f"longest run {d['longest_miss_run']})"
        )
    if m.get("slowdown"):
        text += f"; p50 {_ratio(m['slowdown']['p50'])} of alone ({m['alone']['latency']['p50_ms']:.2f} ms)"
    soak = m.get("soak")
    if soak:
        d, n = soak["drift"], soak["nonfinite"]
        text += (
            f"; drift {d['drift'] * 100:+.1f}% (last {d['window_s']:.3g} s vs first"
            f"{'' if d['judged'] else ', not judged'}), NaN/Inf in {n['bad']} of {n['checks']} output checks"
        )
    return text


def memory_text(result: StackResult) -> str:
    """The process's memory over the together phase, against its limits ("" before any sample)."""
    parts, limits = [], result.soak.get("limits") or {}
    for key, what, limit in (
        ("rss", "resident memory", "max_rss_growth_mib"),
        ("device_memory", "device memory", "max_device_growth_mib"),
    ):
        g = result.soak.get(key)
        if g and g.get("samples"):
            parts.append(
                f"{what} {g['first_mib']:.0f} -> {g['last_mib']:.0f} MiB ({g['growth_mib']:+.1f}, "
                f"allowed +{limits.get(limit, 0):g})"
            )
    return "; ".join(parts)


def verdict_lines(result: StackResult) -> list[str]:
    """Plain lines: the stack, one per model and chain, warnings, the result with its exit code."""
    memory = memory_text(result)
    lines = [
        f"stack: {result.verdict} — {len(result.models)} models on {result.device} for {result.duration_s:g} s"
        + (f"; {memory}" if memory else "")
    ]
    lines += [model_line(n, m) for n, m in result.models.items()]
    for chain, c in result.chains.items():
        lat = c["latency"]
        line = (
            f"chain {chain}: end to end p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, "
            f"max {lat['max_ms']:.2f} ms"
        )
        if c.get("deadline"):
            d = c["deadline"]
            line += f"; deadline {d['deadline_ms']:g} ms: {d['misses']} of {d['frames']} late"
        lines.append(line)
    lines += [f"warning: {w}" for w in result.warnings]
    failed = result.failed_checks
    if failed:
        lines.append(
            f"result: FAIL (exit 1) — {len(failed)} of {len(result.checks)} checks failed: "
            + "; ".join(f"{c.name} ({c.verdict_line()})" for c in failed[:4])
        )
    else:
        skipped = [c for c in result.checks if c.status == "skipped"]
        lines.append(
            f"result: PASS (exit 0) — {len(result.checks) - len(skipped)} checks passed"
            + (f", {len(skipped)} reported, not judged ({skipped[0].message})" if skipped else "")
        )
    return lines


def to_json(result: StackResult) -> str:
    return dumps(result.to_dict())


def junit(result: StackResult) -> str:
    """One testcase per model x check (deadline, errors, drift, NaN/Inf), per chain deadline, and per
    process-wide soak check (memory growth); a check the run was too short to judge is skipped."""
    suite = ET.Element(
        "testsuite",
        name=f"deploykit.stack.{result.name}",
        tests=str(len(result.checks)),
        failures=str(len(result.failed_checks)),
        errors="0",
        skipped=str(sum(c.status == "skipped" for c in result.checks)),
        time=f"{result.duration_s:.3f}",
    )
    for c in result.checks:
        owner = c.name.split(":")[0]
        classname = f"deploykit.stack.{result.name}" + (
            f".{owner}" if owner in result.models or owner in result.chains else ""
        )
        case = ET.SubElement(suite, "testcase", classname=classname, name=c.name, time="0")
        text = f"{c.verdict_line()} ({c.message})"
        if not c.passed:
            ET.SubElement(case, "failure", message=text).text = text
        elif c.status == "skipped":
            ET.SubElement(case, "skipped", message=c.message)
        ET.SubElement(case, "system-out").text = text
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _rows(result: StackResult) -> list[list[str]]:
    rows = []
    for name, m in result.models.items():
        lat, d = m["latency"], m.get("deadline")
        rows.append(
            [
                name,
                f"{m['rate_hz']:g}" if m.get("rate_hz") else "",
                f"{m['achieved_hz']:.1f}",
                str(m["dropped"]),
                f"{lat['p50_ms']:.2f}",
                f"{lat['p99_ms']:.2f}",
                f"{lat['p999_ms']:.2f}",
                f"{lat['max_ms']:.2f}",
                f"{lat['jitter_ms']:.2f}",
                f"{d['misses']}/{d['frames']} over {d['deadline_ms']:g} ms" if d else "no deadline",
                f"{d['longest_miss_run']}" if d else "",
                f"{m['alone']['latency']['p50_ms']:.2f}" if m.get("alone") else "",
                _ratio((m.get("slowdown") or {}).get("p50")),
            ]
        )
    return rows


HEAD = [
    "model",
    "rate Hz",
    "achieved Hz",
    "dropped",
    "p50 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
    "jitter ms",
    "late",
    "longest run",
    "p50 alone ms",
    "slow-down",
]


SOAK_HEAD = ["model", "drift", "first p50 ms", "last p50 ms", "windows", "NaN/Inf checks"]


def _soak_rows(result: StackResult) -> list[list[str]]:
    rows = []
    for name, m in result.models.items():
        d, n = m["soak"]["drift"], m["soak"]["nonfinite"]
        rows.append(
            [
                name,
                f"{d['drift'] * 100:+.1f}%" + ("" if d["judged"] else " (not judged)"),
                f"{d['first_p50_ms']:.2f}",
                f"{d['last_p50_ms']:.2f}",
                f"{d['window_s']:.3g} s ({d['first_frames']} / {d['last_frames']} frames)",
                f"{n['bad']} of {n['checks']} with NaN/Inf" + (f" (first: {n['first']})" if n["first"] else ""),
            ]
        )
    return rows


def soak_text(result: StackResult) -> str:
    """The soak's limits and the memory it measured, in one sentence."""
    lim = result.soak.get("limits") or {}
    text = (
        f"Soak of the together phase: first vs last {result.soak.get('window_s', 0):.3g} s; drift allowed "
        f"{lim.get('max_drift', 0) * 100:g}% where judged, resident memory growth {lim.get('max_rss_growth_mib', 0):g} "
        f"MiB, device memory growth {lim.get('max_device_growth_mib', 0):g} MiB, outputs checked for NaN/Inf every "
        f"{lim.get('check_every_s', 0):g} s and once after the run."
    )
    memory = memory_text(result)
    return text + (f" Measured: {memory}." if memory else "")


def _check_cells(c: Check) -> tuple[str, str]:
    """(result, measured) of a check for the tables: a check not judged says why."""
    if c.status == "skipped":
        return "not judged", f"{c.verdict_line()}: {c.message}"
    return ("pass" if c.passed else "fail"), c.verdict_line()


def markdown(result: StackResult) -> str:
    alone = f"; each alone first for {result.alone_s:g} s" if result.alone_s > 0 else ""
    lines = [
        f"## deploykit stack {result.name} — {result.verdict} (exit {result.exit_code})",
        "",
        f"{len(result.models)} models together on {result.device} for {result.duration_s:g} s{alone}.",
        "",
        "| " + " | ".join(HEAD) + " |",
        "|" + " --- |" * len(HEAD),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(result)]
    if result.chains:
        lines += ["", "| chain | p50 ms | p99 ms | max ms | late |", "| --- | --- | --- | --- | --- |"]
        for chain, c in result.chains.items():
            d, lat = c.get("deadline"), c["latency"]
            late = f"{d['misses']}/{d['frames']} over {d['deadline_ms']:g} ms" if d else ""
            lines.append(f"| {chain} | {lat['p50_ms']:.2f} | {lat['p99_ms']:.2f} | {lat['max_ms']:.2f} | {late} |")
    lines += ["", soak_text(result), "", "| " + " | ".join(SOAK_HEAD) + " |", "|" + " --- |" * len(SOAK_HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in _soak_rows(result)]
    lines += ["", "| check | result | measured |", "| --- | --- | --- |"]
    for c in result.checks:
        verdict, measured = _check_cells(c)
        lines.append(f"| {c.name} | {'**FAIL**' if verdict == 'fail' else verdict} | {measured} |")
    lines += [f"\n> warning: {w}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def _e(value: Any) -> str:
    return _html.escape(str(value))


def html_fragment(result: StackResult, with_plots: bool = False) -> str:
    from deploykit.report import plots
    from deploykit.report.html import CSS

    verdict = "pass" if result.passed else "fail"
    cells = [(c, *_check_cells(c)) for c in result.checks]
    checks = (
        "<table><tr><th>check</th><th>result</th><th>measured</th></tr>"
        + "".join(
            f"<tr><td>{_e(c.name)}</td><td class='{'fail' if not c.passed else 'pass'}'>{_e(v)}</td>"
            f"<td>{_e(measured)}</td></tr>"
            for c, v, measured in cells
        )
        + "</table>"
    )
    lines = "".join(f"<li>{_e(x)}</li>" for x in verdict_lines(result))
    parts = [
        f"<style>{CSS}</style><div class='dk-report'><h1>deploykit stack {_e(result.name)} "
        f"<span class='badge {verdict}'>{'passed' if result.passed else 'failed'}</span> "
        f"<span class='note'>exit {result.exit_code}</span></h1><ul>{lines}</ul>",
        "<h2>Models</h2>",
        _table(HEAD, _rows(result)),
        "<h2>Soak</h2>",
        f"<p>{_e(soak_text(result))}</p>",
        _table(SOAK_HEAD, _soak_rows(result)),
        "<h2>Checks</h2>",
        checks,
    ]
    if with_plots and plots.available():
        parts.append(f"<img alt='plot' src='{plots.stack_latency(result.models)}'>")
    return "".join(parts) + "</div>"


def _table(head: list[str], rows: list[list[str]]) -> str:
    return (
        "<table><tr>"
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
        + "</table>"
    )


def html_page(result: StackResult, with_plots: bool = True) -> str:
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>deploykit stack {_e(result.name)}</title></head><body>{html_fragment(result, with_plots)}"
        "</body></html>\n"
    )


__all__ = [
    "html_fragment",
    "html_page",
    "junit",
    "markdown",
    "memory_text",
    "model_line",
    "soak_text",
    "to_json",
    "verdict_lines",
]
