"""Progress and events: the pipeline reports through a Reporter, drawn where the user is.

:func:`reporting` picks one when the caller passed none: in a notebook a live block drawn with
IPython's display (no widgets: nothing to warn about, and the bar goes when the run ends, leaving
one line per stage), on a terminal rich's bars, elsewhere (a CI log, a pipe) a plain line per stage.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any, Protocol

from deploykit.store import clock


class Reporter(Protocol):
    def event(self, name: str, **fields: Any) -> None: ...

    def task(self, description: str, total: int) -> contextlib.AbstractContextManager[Any]:
        """A progress task; the yielded callable advances it by n."""
        ...


class SilentReporter:
    def event(self, name: str, **fields: Any) -> None:
        pass

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Any]:
        yield lambda n=1: None


class RichReporter:
    """Human-readable progress on stderr: a line per stage event, a bar for long loops."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)

    def event(self, name: str, **fields: Any) -> None:
        if name == "stage_end":  # the start is implied: long work inside a stage shows its own bar
            colour = {"ran": "green", "reused": "cyan", "failed": "red"}.get(fields["status"], "white")
            self.console.print(
                f"[bold]{fields['stage']}[/] [{colour}]{fields['status']}[/] "
                f"{fields['seconds']:.2f}s {fields.get('digest', '')[:12]}",
                highlight=False,
            )

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Any]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as progress:
            task_id = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task_id, n)


class JsonReporter:
    """One JSON object per line on stderr, for log pipelines: stage start/end (ran, reused or failed,
    with seconds and the artifact digest), and the start and end of long tasks. Nothing is written
    from inside a task's loop: ``advance`` is a no-op, so a timing loop stays free of I/O."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

    def event(self, name: str, **fields: Any) -> None:
        now = time.time()
        out = self.stream or sys.stderr
        out.write(json.dumps({"event": name, "ts": clock.stamp(now), "time": now, **fields}, default=str) + "\n")
        out.flush()  # a log shipper tailing the stream sees each event when it happens

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Any]:
        start = time.perf_counter()
        self.event("task_start", description=description, total=total)
        yield lambda n=1: None
        self.event("task_end", description=description, seconds=round(time.perf_counter() - start, 4))


class PlainReporter:
    """A plain line per finished stage (and per task that took a while) on stderr: readable in a CI
    log, where a redrawn bar would print hundreds of lines."""

    LONG_TASK_S = 2.0  # shorter tasks go unmentioned

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

    def _line(self, text: str) -> None:
        out = self.stream or sys.stderr
        out.write(text + "\n")
        out.flush()

    def event(self, name: str, **fields: Any) -> None:
        if name == "stage_end":
            self._line(stage_line(fields))

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Any]:
        start = time.perf_counter()
        yield lambda n=1: None
        seconds = time.perf_counter() - start
        if seconds >= self.LONG_TASK_S:
            self._line(f"  {description}: {total} in {seconds:.1f}s")


def stage_line(fields: dict[str, Any]) -> str:
    """``export ran 1.23s 3fa1c2d4e5f6`` (a stage_end event's fields)."""
    error = f": {fields['error']}" if fields.get("error") else ""
    return (
        f"{fields['stage']} {fields['status']} {fields['seconds']:.2f}s {fields.get('digest', '')[:12]}".rstrip()
        + error
    )


class NotebookReporter:
    """A live block in a notebook cell's output, drawn with ``IPython.display`` (a display handle
    updated in place): a line per finished stage, the stage running now and its task's bar. When the
    run ends (:meth:`close`) the bar goes and the stage lines stay; a run that reported nothing leaves
    nothing."""

    WIDTH = 24  # characters of the bar
    EVERY_S = 0.25  # redraw at most this often inside a task's loop

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._running = ""
        self._bar = ""
        self._handle: Any = None
        self._drawn = 0.0

    def event(self, name: str, **fields: Any) -> None:
        if name == "stage_start":
            self._running = f"{fields['stage']} running"
        elif name == "stage_end":
            self._lines.append(stage_line(fields))
            self._running = self._bar = ""
        else:
            return
        self._draw()

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Any]:
        start, done = time.perf_counter(), 0

        def advance(n: int = 1) -> None:
            nonlocal done
            done += n
            now = time.perf_counter()
            if now - self._drawn >= self.EVERY_S or done >= total:
                filled = min(self.WIDTH, round(self.WIDTH * done / total)) if total else self.WIDTH
                self._bar = (
                    f"  {description} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} {now - start:.1f}s"
                )
                self._draw()

        try:
            yield advance
        finally:
            self._bar = ""

    def close(self) -> None:
        """The run ended: drop the bar and the running line; an empty block is removed altogether."""
        self._running = self._bar = ""
        if self._handle is not None:
            self._draw()

    def _text(self) -> str:
        return "\n".join([*self._lines, *filter(None, (self._running, self._bar))])

    def _draw(self) -> None:
        from IPython.display import display

        self._drawn = time.perf_counter()
        bundle = {"text/plain": self._text()}
        if self._handle is None:
            if bundle["text/plain"]:
                self._handle = display(bundle, raw=True, display_id=True)
            return
        self._handle.update(bundle, raw=True)


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (a notebook, JupyterLab, VS Code, Colab)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def auto_reporter() -> Any:
    """The reporter for where the user is: a notebook, a terminal, or a log."""
    if in_notebook():
        return NotebookReporter()
    if sys.stderr is not None and sys.stderr.isatty():
        return RichReporter()
    return PlainReporter()


@contextlib.contextmanager
def reporting(reporter: Reporter | None, progress: bool | None) -> Iterator[Reporter]:
    """``reporter`` when given; else none for ``progress=False``, else :func:`auto_reporter`'s, closed
    when the run ends."""
    if reporter is not None:
        yield reporter
        return
    if progress is False:
        yield SilentReporter()
        return
    chosen = auto_reporter()
    try:
        yield chosen
    finally:
        close = getattr(chosen, "close", None)
        if close is not None:
            close()
