"""What third-party code says through Python's ``logging`` while a run lasts goes to the workdir's log
file, ``WORKDIR/third-party.log``, never to the user's terminal.

Libraries log their own failures before (or instead of) raising: ONNX Runtime's ``quant_pre_process``
logs two Python tracebacks with ``logger.error(traceback.format_exc())`` when its optimizer cannot save
on a full disk, and with no handler configured Python's last-resort handler prints them on stderr,
above deploykit's one error line. While a pipeline runs, the root logger has a handler that appends
such records (WARNING and above) to the log file instead. The file is opened without following a
link (the workdir is not trusted to point it elsewhere), restarted past ``MAX_BYTES``, and a record
that cannot be written (the disk is full) is dropped silently: the error that matters is deploykit's.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

LOG = "third-party.log"
MAX_BYTES = 16 << 20


class _LogFile(logging.Handler):
    def __init__(self, path: Path) -> None:
        super().__init__(logging.WARNING)
        self.path = path
        self.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode(errors="replace")
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o644)
            try:
                if os.fstat(fd).st_size > MAX_BYTES:
                    os.ftruncate(fd, 0)
                os.write(fd, line)
            finally:
                os.close(fd)
        except Exception:  # a full disk, a link planted there: the record is dropped, nothing is printed
            pass


@contextlib.contextmanager
def logged_to(workdir: Path) -> Iterator[Path]:
    """Send log records of WARNING and above to ``workdir``/third-party.log while the block runs."""
    handler = _LogFile(Path(workdir) / LOG)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.path
    finally:
        root.removeHandler(handler)


__all__ = ["LOG", "MAX_BYTES", "logged_to"]
