"""Progress and events: the pipeline reports through a Reporter; the CLI draws it with rich."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any, Protocol


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
    """One JSON object per event on stderr, for log pipelines."""

    def event(self, name: str, **fields: Any) -> None:
        sys.stderr.write(json.dumps({"event": name, "time": time.time(), **fields}, default=str) + "\n")

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Any]:
        self.event("task_start", description=description, total=total)
        yield lambda n=1: None
        self.event("task_end", description=description)
