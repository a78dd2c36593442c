"""Progress and events: the pipeline reports through a Reporter; the CLI draws it with rich."""

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
            self.console.print(f"[bold]{fields['stage']}[/] [{colour}]{fields['status']}[/] "
                               f"{fields['seconds']:.2f}s {fields.get('digest', '')[:12]}", highlight=False)

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
