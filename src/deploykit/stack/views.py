"""The stack's result as the terminal prints it, as JSON, JUnit (model x check), Markdown and HTML
(with a latency-over-time plot per model). Each renders :class:`~deploykit.stack.record.StackResult`
and nothing else, so no view can disagree with the exit code."""

from __future__ import annotations

import html as _html
from typing import Any
from xml.etree import ElementTree as ET

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
    drift = m.get("drift")
    if drift and drift.get("window_s", 0) >= 10:  # a run long enough to be a soak
        text += f"; drift {drift['drift'] * 100:+.1f}% (median of the last {drift['window_s']:g} s vs the first)"
    return text


def verdict_lines(result: StackResult) -> list[str]:
    """Plain lines: the stack, one per model and chain, warnings, the result with its exit code."""
    rss = result.environment.get("rss") or {}
    memory = (
        f"; resident memory {rss['first_mib']:.0f} -> {rss['last_mib']:.0f} MiB ({rss['growth_mib']:+.1f})"
        if rss.get("samples", 0) > 1
        else ""
    )
    lines = [
        f"stack: {result.verdict} — {len(result.models)} models on {result.device} for {result.duration_s:g} s" + memory
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
        lines.append(f"result: PASS (exit 0) — {len(result.checks)} checks passed")
    return lines


def to_json(result: StackResult) -> str:
    return dumps(result.to_dict())


def junit(result: StackResult) -> str:
    """One testcase per model x check (deadline, errors) and per chain deadline."""
    suite = ET.Element(
        "testsuite",
        name=f"deploykit.stack.{result.name}",
        tests=str(len(result.checks)),
        failures=str(len(result.failed_checks)),
        errors="0",
        skipped="0",
        time=f"{result.duration_s:.3f}",
    )
    for c in result.checks:
        model = c.name.split(":")[0]
        case = ET.SubElement(
            suite, "testcase", classname=f"deploykit.stack.{result.name}.{model}", name=c.name, time="0"
        )
        text = f"{c.verdict_line()} ({c.message})"
        if not c.passed:
            ET.SubElement(case, "failure", message=text).text = text
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


def markdown(result: StackResult) -> str:
    lines = [
        f"## deploykit stack {result.name} — {result.verdict} (exit {result.exit_code})",
        "",
        f"{len(result.models)} models together on {result.device} for {result.duration_s:g} s; each alone first.",
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
    lines += ["", "| check | result | measured |", "| --- | --- | --- |"]
    lines += [f"| {c.name} | {'pass' if c.passed else '**FAIL**'} | {c.verdict_line()} |" for c in result.checks]
    lines += [f"\n> warning: {w}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def _e(value: Any) -> str:
    return _html.escape(str(value))


def html_fragment(result: StackResult, with_plots: bool = False) -> str:
    from deploykit.report import plots
    from deploykit.report.html import CSS

    verdict = "pass" if result.passed else "fail"
    table = (
        "<table><tr>"
        + "".join(f"<th>{_e(h)}</th>" for h in HEAD)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in _rows(result))
        + "</table>"
    )
    checks = (
        "<table><tr><th>check</th><th>result</th><th>measured</th></tr>"
        + "".join(
            f"<tr><td>{_e(c.name)}</td>"
            f"<td class='{'pass' if c.passed else 'fail'}'>{'pass' if c.passed else 'fail'}</td>"
            f"<td>{_e(c.verdict_line())}</td></tr>"
            for c in result.checks
        )
        + "</table>"
    )
    lines = "".join(f"<li>{_e(x)}</li>" for x in verdict_lines(result))
    parts = [
        f"<style>{CSS}</style><div class='dk-report'><h1>deploykit stack {_e(result.name)} "
        f"<span class='badge {verdict}'>{'passed' if result.passed else 'failed'}</span> "
        f"<span class='note'>exit {result.exit_code}</span></h1><ul>{lines}</ul>",
        "<h2>Models</h2>",
        table,
        "<h2>Checks</h2>",
        checks,
    ]
    if with_plots and plots.available():
        parts.append(f"<img alt='plot' src='{plots.stack_latency(result.models)}'>")
    return "".join(parts) + "</div>"


def html_page(result: StackResult, with_plots: bool = True) -> str:
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>deploykit stack {_e(result.name)}</title></head><body>{html_fragment(result, with_plots)}"
        "</body></html>\n"
    )


__all__ = ["html_fragment", "html_page", "junit", "markdown", "model_line", "to_json", "verdict_lines"]
