"""How every command ends: ``--log-format`` (every command takes it) and its one JSON result.

With ``--log-format json`` events go to stderr and stdout holds one JSON object: the command's result,
or the error (:func:`deploykit.cli.app.main`). A command with a ``--json`` flag treats the two alike. Kept
below the commands' modules (``cli.app``, ``cli.plugins``, ``cli.inspect``) so each can import it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from deploykit.choices import LogFormat

LogFormatOpt = Annotated[
    LogFormat,
    typer.Option(
        "--log-format", help="json: events on stderr, the result (or the error) as one JSON object on stdout."
    ),
]
STATE = {"json": False, "result_printed": False}  # --log-format json: errors go out as JSON too


def json_output(log_format: str, as_json: bool = False) -> bool:
    """Whether a command prints its result as JSON: ``--json``, or ``--log-format json``."""
    STATE["json"] = STATE["json"] or log_format == "json"
    return as_json or log_format == "json"


def emit_json(result: Any, sort_keys: bool = False) -> None:
    """A command's result as the one JSON object on stdout (an error after it goes to stderr only)."""
    typer.echo(json.dumps(result, indent=2, default=str, sort_keys=sort_keys))
    STATE["result_printed"] = True


__all__ = ["STATE", "LogFormatOpt", "emit_json", "json_output"]
