"""README drift: every command the README shows exists as written. The default suite parses each
``deploykit`` line with the CLI's own parser (commands, flags, choices: a renamed flag fails here);
the slow test runs the shell blocks that can run on this machine, in a copy of the examples, and
names why it skips the others (GPU, TensorRT, installs that CI's .ci/run makes)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PLACEHOLDER = re.compile(r"\[|\||\.\.\.|\b(CONFIG|RUN|DIGEST|LIB|DIR|STAGE|WORKDIR|B|P|N|SECONDS|FILE)\b")


def shell_lines() -> list[tuple[int, str, str]]:
    """(line number, command, marker of its block) for every line of the README's plain/shell code blocks."""
    out, block, marker, last = [], None, "", ""
    for no, line in enumerate(README.read_text().splitlines(), 1):
        if line.startswith("```"):
            if block is None:
                block = line[3:].strip()
                marker = last if last.startswith("<!-- ci:") else ""
            else:
                block = None
            continue
        if block in ("", "sh", "bash") and line.strip() and not line.startswith(" "):
            out.append((no, line.split("  #")[0].split(" # ")[0].strip(), marker))
        last = line.strip() if line.strip() else last
    return out


def deploykit_lines() -> list[tuple[int, str]]:
    return [(no, cmd) for no, cmd, _ in shell_lines() if cmd.startswith("deploykit ")]


def _command(words: list[str]):
    """The click command a README line names, and the words after its name."""
    import typer

    from deploykit.cli.app import app

    cmd = typer.main.get_command(app)
    words = list(words)
    while words and hasattr(cmd, "commands") and words[0] in cmd.commands:
        cmd = cmd.commands[words.pop(0)]
    return cmd, words


def test_the_readme_shows_deploykit_commands():
    assert len(deploykit_lines()) >= 20


@pytest.mark.parametrize(("no", "line"), deploykit_lines(), ids=lambda v: str(v)[:60])
def test_each_deploykit_line_parses_with_the_cli(no, line):
    import typer

    cmd, rest = _command(shlex.split(line)[1:])
    if rest and "|" in rest[0] and hasattr(cmd, "commands"):  # `plugins build|list|check`: each must exist
        assert all(c in cmd.commands for c in rest[0].split("|")), f"README line {no}: {line}"
        commands = [cmd.commands[c] for c in rest[0].split("|")]  # a flag belongs to one of them
    else:
        assert not hasattr(cmd, "commands") or rest and rest[0].startswith("-"), (
            f"README line {no}: no such command: {line}"
        )
        commands = [cmd]
    known = {o for c in commands for p in c.params for o in (*p.opts, *p.secondary_opts)}
    for flag in [w.split("=")[0].strip("[]") for w in line.replace("|", " ").split() if w.lstrip("[").startswith("-")]:
        if flag.rstrip(".") and not flag.startswith("--no-"):
            assert flag.rstrip(".") in known, f"README line {no}: {cmd.name} has no {flag}"
    if len(commands) == 1 and not PLACEHOLDER.search(
        line
    ):  # a concrete line: the parser takes it, values and choices included
        try:
            cmd.make_context(cmd.name, rest)
        except typer.Exit:  # --version
            pass


def test_make_demo_runs_a_command_the_cli_takes():
    cmd, rest = _command(shlex.split(demo_command())[1:])
    assert cmd.name == "convert" and not hasattr(cmd, "commands")
    cmd.make_context(cmd.name, rest)


# -- the slow part: run what can run here -----------------------------------------------------------------


def _skip_reason(cmd: str, marker: str) -> str:
    if cmd.startswith("make demo"):
        return ""  # its install is this venv; its command runs (demo_command)
    if marker == "<!-- ci: install-by-hand -->" or cmd.startswith(("make test", "python3 -m venv")):
        return "an install: .ci/run makes it in a fresh venv"
    if "tensorrt" in cmd.split("--backend")[-1:][0] and "--backend tensorrt" in cmd or "[tensorrt]" in cmd:
        return "needs TensorRT and a GPU"
    if cmd.startswith(("make gpu-check", "make plugins")):
        return "needs a GPU (make plugins: the same build as `deploykit plugins build`)"
    if "plugins check" in cmd or "--plugins build/plugins/" in cmd:
        return "needs the TensorRT plugin library (nvcc and TensorRT headers)"
    if cmd.startswith(("make bench", "make lint", "make test-all", "make fuzz")):
        return "a make target CI runs itself"
    if cmd.startswith("deploykit matrix") and ("--ray auto" in cmd or "ray://" in cmd):
        return "needs a running Ray cluster (tests/matrix/test_ray.py starts a two-node one)"
    if cmd.startswith("deploykit matrix"):
        return (
            "the README's matrix.yaml targets TensorRT on GPUs (h200, orin); tests/matrix runs "
            "examples/matrix/matrix.yaml locally and on Ray"
        )
    if not cmd.startswith("deploykit ") or PLACEHOLDER.search(cmd):
        return "a synopsis, not a command"
    return ""


def demo_command() -> str:
    """What `make demo` runs after installing: the Makefile's recipe, without the venv's path."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    recipe = lines[next(i for i, x in enumerate(lines) if x.startswith("demo:")) + 1].strip()
    assert recipe.startswith("$(VENV)/bin/deploykit "), recipe
    return recipe.removeprefix("$(VENV)/bin/")


def _only_speed_targets_missed(proc) -> str:
    """The failed checks when a run failed only its FPS/latency gate (how fast this shared machine
    is, not drift in the README), else ""."""
    line = next((x for x in proc.stdout.splitlines() if x.startswith("result: FAIL (exit 1)")), "")
    if proc.returncode != 1 or " failed: " not in line or "more" in line.rsplit(";", 1)[-1]:
        return ""
    failed = line.split(" failed: ", 1)[1].split("; ")
    return "; ".join(failed) if all(f.startswith(("gate ", "baseline ")) for f in failed) else ""


@pytest.mark.slow
def test_the_readme_shell_blocks_run_as_written(tmp_path):
    from tests.cli.console import deploykit as run

    for folder in ("examples", "calibration", "plugins"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    ran, skipped = [], []
    for no, cmd, marker in shell_lines():
        why = _skip_reason(cmd, marker)
        if why:
            skipped.append(f"line {no} ({why}): {cmd}")
            continue
        demo = cmd.startswith("make demo")
        proc = run(*shlex.split(demo_command() if demo else cmd)[1:], cwd=tmp_path, timeout=1800)
        missed = _only_speed_targets_missed(proc)
        assert proc.returncode == 0 or missed, (
            f"README line {no}: `{cmd}` exited {proc.returncode}:\n{proc.stderr[-2000:]}"
        )
        ran.append(cmd + (f"  (ran; this machine missed its speed target: {missed})" if missed else ""))
        if demo:  # the README names what it leaves in reports/detector/
            for name in ("run.json", "junit.xml", "summary.md", "parity.json", "gate.json"):
                assert (tmp_path / "reports" / "detector" / name).is_file(), f"make demo wrote no {name}"
    print("\n".join(["ran:", *ran, "skipped:", *skipped]))
    assert len(ran) >= 8
