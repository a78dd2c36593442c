"""What third-party code says while a run lasts goes to the workdir's log file, ``WORKDIR/third-party.log``,
never to the user's terminal.

Libraries speak on three channels, and all three are taken while a block of :func:`logged_to` runs:

* **logging**: ONNX Runtime's ``quant_pre_process`` logs two Python tracebacks with
  ``logger.error(traceback.format_exc())`` when its optimizer cannot save on a full disk, and with no
  handler configured Python's last-resort handler prints them on stderr, above deploykit's one error
  line. The root logger gets a handler that appends records of WARNING and above to the log file.
* **warnings**: ``warnings.warn`` from onnx, torch's exporters or a user pass; ``warnings.showwarning``
  is replaced by one that files them.
* **sys.stderr**: ``print(..., file=sys.stderr)``, ``traceback.print_exc()``, a progress bar; ``sys.stderr``
  is replaced by a stream that files them.

Who is speaking is read from the stack, not from a warning's attributed file (a library's
``stacklevel=2`` names deploykit's calling line): the innermost frame outside the plumbing that
carries text (``logging``, ``warnings``, ``traceback``, ``rich``, ``io``, ``threading`` ...). A deploykit
module, or a stack with nothing outside the plumbing (rich's refresh thread drawing deploykit's
progress bar), still reaches the terminal: deploykit's progress, warnings and verdicts are unchanged,
and its error line is printed after the block has ended. Writes made by native code straight to file
descriptor 2 are not taken: redirecting the descriptor would also swallow what a crash prints and the
output of the processes a stage starts.

The file is opened without following a link (the workdir is not trusted to point it elsewhere),
its folder is made when something is first written (``deploykit inspect`` has no store of its own),
it is restarted past ``MAX_BYTES``, and text that cannot be written (the disk is full) is dropped
silently: the error that matters is deploykit's. Blocks may nest and run on several threads: the
replacements are installed by the first block and removed by the last, and a thread's text goes to
the file of the block that thread entered (else to the newest one's).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

LOG = "third-party.log"
MAX_BYTES = 16 << 20
OWN = "deploykit"
# Modules that only carry text for whoever called them: the speaker is further out.
PLUMBING = frozenset(
    {
        "logging",
        "warnings",
        "traceback",
        "rich",
        "click",
        "typer",
        "io",
        "_io",
        "_pyio",
        "codecs",
        "encodings",
        "contextlib",
        "threading",
        "concurrent",
    }
)


class _LogFile(logging.Handler):
    def __init__(self, path: Path) -> None:
        super().__init__(logging.WARNING)
        self.path = path
        self.at_line_start = True  # the last text filed ended a line: the next one gets a header
        self.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a record that cannot be formatted is dropped, never printed
            self.append(self.format(record) + "\n")
            self.at_line_start = True

    def write_text(self, speaker: str, text: str) -> None:
        """File a piece of what ``speaker`` wrote to stderr; each line it starts gets a header."""
        with self.lock or contextlib.nullcontext():
            if self.at_line_start:
                text = self.format(logging.makeLogRecord({"name": speaker, "levelname": "STDERR", "msg": ""})) + text
            self.append(text)
            self.at_line_start = text.endswith("\n")

    def append(self, text: str) -> None:
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(self.path, flags, 0o644)
            except FileNotFoundError:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, flags, 0o644)
            try:
                if os.fstat(fd).st_size > MAX_BYTES:
                    os.ftruncate(fd, 0)
                os.write(fd, text.encode(errors="replace"))
            finally:
                os.close(fd)
        except Exception:  # a full disk, a link planted there: the text is dropped, nothing is printed
            pass


def speaker(frame: FrameType | None) -> str | None:
    """The module of the innermost frame outside the plumbing, or None where that is deploykit's own
    (or no frame is outside it)."""
    while frame is not None:
        name = frame.f_globals.get("__name__") or "?"
        top = name.partition(".")[0]
        if name != __name__ and top not in PLUMBING:
            return None if top == OWN else name
        frame = frame.f_back
    return None


class _State:
    """The blocks now running (innermost last) and what the first one replaced."""

    lock = threading.RLock()
    active: list[_LogFile] = []
    per_thread = threading.local()
    saved_stderr: Any = None
    saved_showwarning: Any = None


def _target() -> _LogFile | None:
    mine = getattr(_State.per_thread, "files", None)
    if mine:
        return mine[-1]
    active = _State.active
    return active[-1] if active else None


class _Stderr:
    """``sys.stderr`` during a block: deploykit's writes pass through, third-party code's are filed.
    Whoever kept a reference to it after the block (a handler made during a stage) writes through."""

    def __init__(self, terminal: Any) -> None:
        self._terminal = terminal

    def write(self, text: str) -> int:
        log = _target()
        who = speaker(sys._getframe(1)) if log is not None and isinstance(text, str) and text else None
        if who is None:
            return self._terminal.write(text)
        log.write_text(who, text)  # type: ignore[union-attr]
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, flush ...: the terminal's
        return getattr(self._terminal, name)


def _showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    log = _target()
    who = speaker(sys._getframe(1)) if log is not None and file is None else None
    if who is None:
        show = _State.saved_showwarning or warnings._showwarning_orig  # type: ignore[attr-defined]
        return show(message, category, filename, lineno, file, line)
    record = logging.makeLogRecord(
        {"name": who, "levelno": logging.WARNING, "levelname": "WARNING", "msg": "%s: %s (%s:%s)"}
    )
    record.args = (category.__name__, message, filename, lineno)
    log.handle(record)  # type: ignore[union-attr]


def _install() -> None:
    _State.saved_showwarning = warnings.showwarning
    warnings.showwarning = _showwarning
    _State.saved_stderr = sys.stderr
    if sys.stderr is not None:
        sys.stderr = _Stderr(sys.stderr)  # type: ignore[assignment]


def _uninstall() -> None:
    if warnings.showwarning is _showwarning:  # whoever replaced it since keeps theirs
        warnings.showwarning = _State.saved_showwarning
    if isinstance(sys.stderr, _Stderr):
        sys.stderr = _State.saved_stderr
    _State.saved_showwarning = _State.saved_stderr = None


@contextlib.contextmanager
def logged_to(workdir: Path | str) -> Iterator[Path]:
    """While the block runs, file what third-party code logs (WARNING and above), warns and writes to
    ``sys.stderr`` in ``workdir``/third-party.log (see the module docstring)."""
    path = Path(os.path.abspath(workdir)) / LOG
    with _State.lock:
        log = next((f for f in _State.active if f.path == path), None)
        if log is None:  # a nested block on the same file (profile around its build) adds no second handler
            log = _LogFile(path)
            logging.getLogger().addHandler(log)
        _State.active.append(log)
        if len(_State.active) == 1:
            _install()
    if not hasattr(_State.per_thread, "files"):
        _State.per_thread.files = []
    mine = _State.per_thread.files
    mine.append(log)
    try:
        yield path
    finally:
        mine.pop()
        with _State.lock:
            _State.active.remove(log)
            if log not in _State.active:
                logging.getLogger().removeHandler(log)
            if not _State.active:
                _uninstall()


__all__ = ["LOG", "MAX_BYTES", "logged_to", "speaker"]
