"""The matrix as a table: rows for the terminal (rich, live while it runs), plain text and HTML."""

from __future__ import annotations

import html
from typing import Any

from deploykit.matrix.result import CellResult, MatrixResult

COLUMNS = (
    "model",
    "precision",
    "target",
    "status",
    "shared work",
    "cell stages",
    "FPS",
    "tries",
    "node",
    "time",
    "note",
)
_COLOUR = {
    "passed": "green",
    "failed": "red",
    "error": "red",
    "skipped": "yellow",
    "interrupted": "yellow",
    "ran": "green",
    "reused": "cyan",
}


def rows(result: MatrixResult) -> list[tuple[str, ...]]:
    jobs = {j.id: j for j in result.jobs}
    out = []
    for c in result.cells:
        shared = "; ".join(jobs[j].summary() for j in c.shared if j in jobs)
        own = " ".join(
            f"{s.stage}:{s.status}" for s in c.stages if not any(s.stage in jobs[j].owns for j in c.shared if j in jobs)
        )
        fps = f"{c.fps:.1f}" if c.fps is not None else ""
        out.append(
            (
                c.model,
                c.precision,
                c.target,
                c.status,
                shared,
                own,
                fps,
                str(c.attempts or ""),
                c.node,
                f"{c.seconds:.1f}s" if c.seconds else "",
                _note(c),
            )
        )
    return out


def _note(c: CellResult) -> str:
    text = c.error.splitlines()[0] if c.error else ""
    return text if len(text) <= 160 else text[:157] + "..."


def footer(result: MatrixResult) -> str:
    w = result.work()
    counts: dict[str, int] = {}
    for c in result.cells:
        counts[c.status.split()[0]] = counts.get(c.status.split()[0], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return (
        f"{len(result.cells)} cells ({summary}) on {result.executor} in {result.seconds:.1f}s; stages: "
        f"{w['ran']} ran ({w['shared_ran']} in shared jobs), {w['reused']} reused, of {w['cell_stages']} "
        f"the cells use"
    )


def rich_table(result: MatrixResult) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=f"deploykit matrix: {result.name}", title_justify="left", caption=footer(result), caption_justify="left"
    )
    for col in COLUMNS:
        table.add_column(col, overflow="fold", no_wrap=col in ("model", "precision", "target"))
    for row in rows(result):
        cells = [escape(v) for v in row]
        status = row[3].split()[0] if row[3] else ""
        cells[3] = f"[{_COLOUR.get(status, 'white')}]{cells[3]}[/]"
        table.add_row(*cells)
    return table


def text_table(result: MatrixResult) -> str:
    body = [COLUMNS[:8], *(r[:8] for r in rows(result))]
    widths = [max(len(r[i]) for r in body) for i in range(len(body[0]))]
    lines = [f"MatrixResult({result.name!r}, passed={result.passed}, exit_code={result.exit_code})"]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join([*lines, "  " + footer(result)])


def html_table(result: MatrixResult) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for row in rows(result):
        colour = {"green": "#1a7f37", "red": "#cf222e", "yellow": "#9a6700"}.get(
            _COLOUR.get(row[3].split()[0] if row[3] else "", ""), "inherit"
        )
        tds = [f"<td>{html.escape(v)}</td>" for v in row]
        tds[3] = f'<td style="color:{colour};font-weight:bold">{html.escape(row[3])}</td>'
        body.append(f"<tr>{''.join(tds)}</tr>")
    return (
        f"<div><b>deploykit matrix: {html.escape(result.name)}</b> — "
        f"{'PASS' if result.passed else 'FAIL'} (exit {result.exit_code})"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"<p>{html.escape(footer(result))}</p></div>"
    )


class LiveView:
    """A rich table redrawn as cells progress (on a terminal; elsewhere it prints once at the end)."""

    def __init__(self, console: Any) -> None:
        from rich.live import Live

        self._live = Live(console=console, refresh_per_second=4, transient=False)
        self._last: MatrixResult | None = None

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._last is not None:
            self._live.update(rich_table(self._last), refresh=True)
        self._live.__exit__(*exc)

    def update(self, result: MatrixResult) -> None:
        self._last = result
        self._live.update(rich_table(result))


class JsonView:
    """One JSON line per cell whose status changed, for log pipelines."""

    def __init__(self, stream: Any = None) -> None:
        from deploykit.progress import JsonReporter

        self._out = JsonReporter(stream)
        self._seen: dict[str, str] = {}

    def update(self, result: MatrixResult) -> None:
        for c in result.cells:
            if self._seen.get(c.id) != c.status:
                self._seen[c.id] = c.status
                self._out.event(
                    "cell", cell=c.id, status=c.status, attempts=c.attempts, node=c.node, fps=c.fps, error=c.error
                )
