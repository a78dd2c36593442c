"""The run record in a terminal (or a CI log): the stage table, one verdict line per check group
(the worst metric against its limit), warnings, and the verdict with its exit code; the parity
table per output x reference (as ``polygraphy run`` prints it).

Tables never split an identifier: identifier columns do not wrap, free text folds, and where the
output is not a terminal (a CI log has no width) the console is as wide as the table needs.
"""

from __future__ import annotations

from typing import Any

from deploykit.record.model import Check, RunRecord

_COLOUR = {
    "ran": "green",
    "reused": "cyan",
    "failed": "red",
    "stored": "white",
    "pass": "green",
    "fail": "red",
    "inconclusive": "yellow",
    "skipped": "yellow",
    "PASS": "green",
    "FAIL": "red",
    "ERROR": "red",
}


def console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


def table(title: str, columns: list[str], text: tuple[str, ...] = ("note", "detail", "message", "why")) -> Any:
    """A rich table whose identifier columns never wrap; the columns named in ``text`` fold."""
    from rich.table import Table

    t = Table(title=title or None, title_justify="left")
    for col in columns:
        if col in text:
            t.add_column(col, overflow="fold")
        else:
            t.add_column(col, no_wrap=True)
    return t


def print_table(out: Any, t: Any) -> None:
    """Print ``t``; on a console that is not a terminal, widen it so nothing wraps."""
    from rich.measure import Measurement

    if not out.is_terminal:  # a log has no width: wide enough that no identifier column is cut
        m = Measurement.get(out, out.options.update(width=10_000), t)
        out.width = max(out.width, min(m.maximum, max(160, m.minimum + 40)))
    out.print(t)


def stage_table(record: RunRecord) -> Any:
    from rich.markup import escape

    t = table(f"deploykit: {record.identity}", ["stage", "status", "time", "artifact", "note"])
    for s in record.stages:
        # the error line (or the verdict lines) below say it: once
        note = "" if s.status == "failed" and record.stopped else "check failed" if s.error else s.note
        t.add_row(
            s.stage,
            f"[{_COLOUR.get(s.status, 'white')}]{s.status}[/]",
            f"{s.seconds:.2f}s",
            s.digest[:12],
            escape(note),
        )
    return t


def print_run(record: RunRecord, out: Any = None, details: list[str] = ()) -> None:  # type: ignore[assignment]
    """The stage table, ``details`` (a stage's own summary lines), then the verdict lines (stdout by default)."""
    from rich.markup import escape

    out = out or console()
    if record.stages:
        print_table(out, stage_table(record))
    for line in details:
        out.print(escape(line), highlight=False, soft_wrap=True)
    for line in verdict_lines(record):
        head, _, rest = line.partition(":")
        colour = "yellow" if head == "warning" else _COLOUR.get(rest.split()[0] if rest.split() else "", "white")
        out.print(f"[bold {colour}]{escape(head)}:[/]{escape(rest)}", highlight=False, soft_wrap=True)


def verdict_lines(record: RunRecord) -> list[str]:
    """Plain lines: quantize, parity and gate verdicts, warnings, the result with its exit code."""
    lines = []
    for title, groups in (("quantize", ("quantize",)), ("parity", ("parity", "task"))):
        line = _group_line(record, title, groups)
        if line:
            lines.append(line)
        if title == "quantize" and record.group("lint"):
            lines.append(lint_line(record))
    gate = _gate_line(record)
    if gate:
        lines.append(gate)
    lines += [f"warning: {w}" for w in record.warnings]
    lines.append(result_line(record))
    return lines


def _group_line(record: RunRecord, title: str, groups: tuple[str, ...]) -> str:
    checks = record.group(*groups)
    if not checks:
        return ""
    decide = record.deciding(*groups)
    failed = [c for c in checks if not c.passed]
    status = "FAIL" if failed else "PASS"
    worst = f"{'worst' if not failed else 'failed'}: {decide.name} {decide.verdict_line()}" if decide else ""
    count = f"{len(failed)} of {len(checks)} checks failed" if failed else f"{len(checks)} checks"
    return f"{title}: {status} — {worst} ({count})"


def lint_line(record: RunRecord) -> str:
    """``lint: PASS — TensorRT 10.13: 0 errors, 2 warnings; TensorRT 11: 0 errors, 2 warnings``."""
    checks = record.group("lint")
    status = "FAIL" if any(not c.passed for c in checks) else "PASS"
    return f"lint: {status} — " + "; ".join(c.message for c in checks)


def _gate_line(record: RunRecord) -> str:
    gate = record.details.get("gate")
    if not gate:
        return ""
    checks = record.group("gate", "baseline")
    failed = [c for c in checks if not c.passed]
    status = "FAIL" if failed else "PASS"
    against = "; ".join(c.verdict_line() for c in (failed or [c for c in checks if c.status != "skipped"]))
    line = f"gate: {status} — {gate_numbers(gate)} on {gate['platform']}"
    line += f"; {against}" if against else "; no target: measured only"
    if record.gate_cached:
        line += f" [cached: measured {_gate_created(record)} by an earlier run; --remeasure to measure again]"
    return line


def gate_numbers(gate: dict[str, Any]) -> str:
    """The gate's numbers in one phrase, the judged throughput first, the best case labelled as such."""
    lat, worst = gate["latency"], gate.get("worst_case") or {}
    trials = gate.get("trials_count", len(gate.get("trials", [])) or 1)
    text = f"{gate['fps']:.1f} FPS wall-clock (batch {gate['batch']}, median of {trials} trials)"
    if gate.get("fps_best_case"):
        text += f", best case {gate['fps_best_case']:.1f} FPS (batch / median latency)"
    text += f"; p50 {lat['p50_ms']:.3f} ms, p99 {lat['p99_ms']:.3f} ms"
    if worst:
        text += f", p99.9 {worst['p999_ms']:.3f} ms, max {worst['max_ms']:.3f} ms, jitter {worst['jitter_ms']:.3f} ms"
    d = gate.get("deadline")
    if d:
        text += (
            f"; deadline {d['deadline_ms']:g} ms: {d['misses']} of {d['frames']} late "
            f"({d['miss_rate'] * 100:.2f}%, longest run {d['longest_miss_run']})"
        )
    soak = gate.get("soak")
    if soak:
        text += f"; {soak_phrase(soak)}"
    return text


def soak_phrase(soak: dict[str, Any]) -> str:
    """A soak in a few words: drift, memory growth, NaN/Inf and errors."""
    device = soak.get("device_memory")
    return (
        f"soak {soak['seconds']:.1f} s ({soak['iterations']} runs): drift {soak['drift']['drift'] * 100:+.1f}%, "
        f"RSS {soak['rss']['growth_mib']:+.1f} MiB"
        + (f", device {device['growth_mib']:+.1f} MiB" if device else "")
        + f", NaN/Inf in {soak['nonfinite']['bad']} of {soak['nonfinite']['checks']} checks, "
        f"{soak['errors']['count']} errors"
    )


def _gate_created(record: RunRecord) -> str:
    stage = record.stage("gate")
    return stage.created if stage and stage.created else "earlier"


def result_line(record: RunRecord) -> str:
    if record.stopped:  # the message itself is the error line on stderr, printed once
        return f"result: ERROR (exit {record.exit_code})"
    failed = record.failed_checks
    if failed:
        more = f"; and {len(failed) - 4} more" if len(failed) > 4 else ""
        return (
            f"result: FAIL (exit 1) — {len(failed)} failed: "
            + "; ".join(f"{c.group} {c.name}" for c in failed[:4])
            + more
        )
    if record.error:  # a failure no check names
        return f"result: FAIL (exit {record.exit_code}) — {record.error}"
    if not record.checks:
        last = record.stages[-1].stage if record.stages else "nothing"
        return f"result: PASS (exit 0) — no checks: the run stopped after {last}, before parity and the gate"
    return f"result: PASS (exit 0) — {len(record.checks)} checks passed"


def print_lint(report: dict[str, Any], out: Any = None) -> None:
    """A lint report (:class:`deploykit.lint.LintReport` as a dict): its findings, a verdict line per
    TensorRT version, its notes and the result with ``deploykit lint``'s exit code."""
    from rich.markup import escape

    out = out or console()
    if report.get("findings"):
        t = table(
            f"TensorRT lint: {report.get('model', '')}",
            ["severity", "rule", "node", "op", "TensorRT", "message", "fix"],
            text=("message", "fix"),
        )
        for f in report["findings"]:
            colour = "red" if f["severity"] == "error" else "yellow"
            t.add_row(
                f"[{colour}]{f['severity']}[/]",
                f["rule"],
                escape(f["node"]),
                escape(f["op"]),
                ", ".join(f["versions"]),
                escape(f["message"]),
                escape(f["fix"]),
            )
        print_table(out, t)
    for v in report.get("verdicts", []):
        colour = "green" if v["errors"] == 0 else "red"
        out.print(f"[bold {colour}]lint:[/] {escape(v['line'])}", highlight=False, soft_wrap=True)
    for note in report.get("notes", []):
        out.print(f"[bold yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    failed = [v["line"] for v in report.get("verdicts", []) if v["errors"]]
    out.print(
        f"result: {'FAIL' if failed else 'PASS'} (exit {report.get('exit_code', 0)})"
        + (f" — {'; '.join(failed)}" if failed else ""),
        highlight=False,
        soft_wrap=True,
    )


def parity_table(record: RunRecord) -> Any:
    """One row per output x reference with the metrics and limits, then one per task check."""
    from rich.markup import escape

    report = record.details.get("parity") or {}
    status = {c.name: c for c in record.group("parity", "task")}
    t = table(
        f"parity: {report.get('candidate_evaluator', '')}",
        ["output", "reference", "max abs", "rel L2", "cosine", "SNR dB", "result", "why"],
    )
    for name, refs in report.get("outputs", {}).items():
        for ref, r in refs.items():
            m, tol = r["metrics"], r["tolerance"]
            check = status.get(f"{name} vs {ref}")
            t.add_row(
                name,
                ref,
                _cell(m.get("max_abs"), tol.get("max_abs"), "<="),
                _cell(m.get("rel_l2"), tol.get("rel_l2"), "<="),
                _cell(m.get("cosine"), tol.get("cosine"), ">=", ".6f"),
                _cell(m.get("snr_db"), tol.get("snr_db"), ">=", ".1f"),
                _status(check),
                escape(check.message if check else ""),
            )
    for c in record.group("task"):
        t.add_row(
            c.name.split(" vs ")[0], c.name.split(" vs ")[-1], "", "", "", "", _status(c), escape(c.verdict_line())
        )
    return t


def _cell(value: Any, limit: Any, op: str, spec: str = ".3g") -> str:
    if value is None:
        return "—"
    shown = format(value, spec)
    return f"{shown} ({op} {limit:g})" if isinstance(limit, (int, float)) and abs(limit) != float("inf") else shown


def _status(check: Check | None) -> str:
    if check is None:
        return ""
    return f"[{_COLOUR.get(check.status, 'white')}]{check.status}[/]"
