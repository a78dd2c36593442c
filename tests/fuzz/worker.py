"""A long-lived process that runs ``deploykit`` commands in-process, one per request, so a fuzzer
pays for the imports once. A command that crashes natively kills this process: the parent sees the
signal (a finding) and starts a new one.

Protocol: one JSON object per line on stdin ``{"argv": [...]}``; one per line on stdout
``{"code": int, "err": str, "out": str}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


def main() -> None:
    from deploykit.cli import app as cli

    protocol = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        sys.argv = ["deploykit", *request["argv"]]
        code = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException as e:  # main() must never let one out: report it as the finding it is
                code = -1000
                err.write(f"Traceback (most recent call last): escaped main(): {type(e).__name__}: {e}\n")
        protocol.write(json.dumps({"code": code, "err": err.getvalue()[-4000:], "out": out.getvalue()[-2000:]}) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
