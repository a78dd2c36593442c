"""Every command takes ``--log-format`` (plugins check, artifacts verify/show/ls/gc/lineage, inspect,
report, config show, doctor, plugins build/list, ...): with ``json`` stdout is exactly one JSON object,
the command's result or its error, and stderr holds no traceback."""

from __future__ import annotations

import json

import pytest
import typer

from tests.hostile import models
from tests.hostile.harness import assert_no_traceback, deploykit


def _commands(group, prefix=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):  # a group (typer may vendor click: no isinstance on click's classes)
            yield from _commands(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


def test_every_command_takes_log_format():
    from deploykit.cli.app import app

    commands = dict(_commands(typer.main.get_command(app)))
    assert {"plugins check", "artifacts verify", "artifacts show", "inspect", "report"} <= set(commands)
    missing = [name for name, c in commands.items() if not any("--log-format" in p.opts for p in c.params)]
    assert not missing, f"commands without --log-format: {missing}"


def _empty(path):
    path.write_bytes(b"")
    return ("plugins", "check", path)


def _one_object(run) -> dict:
    assert_no_traceback(run)
    return json.loads(run.out)  # one object: json.loads refuses trailing data


CASES = {
    "plugins-check-empty": (lambda tmp, store: _empty(tmp / "empty.so"), 4),
    "artifacts-verify": (lambda tmp, store: ("artifacts", "verify", "-w", store), 0),
    "artifacts-show-bogus": (lambda tmp, store: ("artifacts", "show", "../x", "-w", store), 2),
    "artifacts-ls": (lambda tmp, store: ("artifacts", "ls", "-w", store), 0),
    "artifacts-gc-dry-run": (lambda tmp, store: ("artifacts", "gc", "--dry-run", "-w", store), 0),
    "inspect": (
        lambda tmp, store: ("inspect", models.save(models.conv(), tmp / "m.onnx"), "--no-runtime"),
        0,
    ),
    "inspect-missing": (lambda tmp, store: ("inspect", tmp / "nope.onnx"), 4),
    "report": (lambda tmp, store: ("report", "conv", "-w", store, "-o", tmp / "r.html", "--no-plots"), 0),
    "report-unknown-run": (lambda tmp, store: ("report", "nosuch", "-w", store, "-o", tmp / "r.html"), 2),
    "plugins-list": (lambda tmp, store: ("plugins", "list"), 0),
}
DEFAULT = {"plugins-check-empty", "artifacts-verify", "inspect", "report"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c in DEFAULT else [pytest.mark.slow]) for c in CASES])
def test_log_format_json_gives_one_object(case, project, tmp_path):
    _, store = project
    make, code = CASES[case]
    run = deploykit(*make(tmp_path, store), "--log-format", "json")
    assert run.code == code, str(run)
    out = _one_object(run)
    if code:
        assert out["schema"] == "deploykit.error/1" and out["exit_code"] == code
    else:
        assert "schema" not in out or out["schema"] != "deploykit.error/1"
