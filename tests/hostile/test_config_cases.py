"""Hostile configuration: YAML that expands, repeats or nests without bound, numbers that are not
finite or exhaust the machine, names that are paths, command-line values that do not parse. Each is
refused with exit 2 before any stage runs, naming the file, line or field; the store is untouched."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.hostile.conftest import CONFIG
from tests.hostile.harness import SRC, Suite, assert_fails_cleanly, deploykit

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def _with(section: str) -> str:
    return textwrap.dedent(CONFIG) + textwrap.dedent(section)


def _replace(old: str, new: str) -> str:
    text = textwrap.dedent(CONFIG)
    assert old in text
    return text.replace(old, new)


# id -> (config text, extra args, names the error line must contain)
CASES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "alias-bomb": (BOMB + textwrap.dedent(CONFIG), (), ("line 2", "alias")),
    "plain-alias": (_replace("parity: {samples: 1}", "x: &one 1\nparity: {samples: *one}"), (), ("alias",)),
    "merge-key-alias": (_replace("parity: {samples: 1}", "base: &b {samples: 1}\nparity: {<<: *b}"), (), ("alias",)),
    "duplicate-top-key": (_with("name: other\n"), (), ("duplicate key 'name'", "first at line 2")),
    "duplicate-nested-key": (
        _replace("iterations: 5", "iterations: 5\n  iterations: 6"),
        (),
        ("duplicate key 'iterations'",),
    ),
    "duplicate-flow-key": (
        _replace("parity: {samples: 1}", "parity: {samples: 1, samples: 2}"),
        (),
        ("duplicate key 'samples'",),
    ),
    "warmup-inf": (_replace("warmup_s: 0", "warmup_s: .inf"), (), ("gate.warmup_s", "not finite")),
    "warmup-huge": (_replace("warmup_s: 0", "warmup_s: 1e9"), (), ("gate.warmup_s",)),
    "iterations-huge": (_replace("iterations: 5", "iterations: 1000000000000"), (), ("gate.iterations",)),
    "nan-tolerance": (
        _with("parity:\n  default: {max_abs: .nan}\n").replace("parity: {samples: 1}\n", ""),
        (),
        ("parity.default.max_abs", "NaN"),
    ),
    "nan-string-tolerance": (
        _with("parity:\n  default: {rel_l2: 'nan'}\n").replace("parity: {samples: 1}\n", ""),
        (),
        ("parity.default.rel_l2", "NaN"),
    ),
    "nan-fps-target": (_replace("{fps: 1}", "{fps: .nan}"), (), ("gate.targets.default.fps", "NaN")),
    "concurrency-huge": (_replace("trials: 2", "trials: 2\n  concurrency: 100000"), (), ("gate.concurrency",)),
    "samples-huge": (_replace("parity: {samples: 1}", "parity: {samples: 1000000000}"), (), ("parity.samples",)),
    "name-traversal": (_replace("name: conv", "name: ../../x"), (), ("config.name", "'../../x'")),
    "name-absolute": (_replace("name: conv", "name: /tmp/x"), (), ("config.name",)),
    "name-empty": (_replace("name: conv", "name: ''"), (), ("config.name",)),
    "name-not-string": (_replace("name: conv", "name: [a, b]"), (), ("config.name",)),
    "dim-huge": (_replace("max: 2}", "max: 100000000000000}"), (), ("'x'", "larger than")),
    "input-too-big": (_replace("max: 2}", "max: 1500000}"), (), ("'x'", "limits.max_input_mib")),
    "deep-nesting": ("name: " + "[" * 5000 + "]" * 5000 + "\n", (), ("nested deeper",)),
    "huge-integer": (_replace("iterations: 5", "iterations: " + "9" * 5000), (), ("usable YAML value",)),
    "python-tag": (
        _replace("name: conv", "name: !!python/object/apply:os.system ['echo pwned']"),
        (),
        ("not valid YAML",),
    ),
    "unknown-key": (_with("gaet: {}\n"), (), ("unknown key 'gaet'", "did you mean 'gate'")),
    "top-level-list": ("- a\n- b\n", (), ("expected a mapping",)),
    "empty": ("", (), ("expected a mapping",)),
    "unclosed-flow": ("name: [conv\n", (), ("not valid YAML",)),
    "tab-indent": ("name: conv\n\tsource: x\n", (), ("not valid YAML",)),
    "stage-timeout-unknown": (_with("limits: {stage_timeouts: {bogus: 1}}\n"), (), ("limits.stage_timeouts", "bogus")),
    "stage-timeout-negative": (_with("limits: {stage_timeout_s: -1}\n"), (), ("stage_timeout_s",)),
    "bad-regex": (_with("quantize: {exclude_patterns: ['(']}\n"), (), ("exclude_patterns",)),
    "set-unclosed": (textwrap.dedent(CONFIG), ("--set", "x=[unclosed"), ("--set x", "not valid YAML")),
    "set-alias": (textwrap.dedent(CONFIG), ("--set", "gate.iterations=*a"), ("--set gate.iterations",)),
    "set-bad-key": (textwrap.dedent(CONFIG), ("--set", "gate..iterations=3"), ("--set gate..iterations",)),
    "set-no-equals": (textwrap.dedent(CONFIG), ("--set", "gate.iterations"), ("--set 'gate.iterations'",)),
    "set-name-path": (textwrap.dedent(CONFIG), ("--set", "name=../../etc/x"), ("config.name",)),
    "set-warmup-inf": (textwrap.dedent(CONFIG), ("--set", "gate.warmup_s=.inf"), ("gate.warmup_s",)),
    "set-section-scalar": (textwrap.dedent(CONFIG), ("--set", "gate=3"), ("gate",)),
    "set-into-scalar": (textwrap.dedent(CONFIG), ("--set", "name.x=3"), ("'name' is not a section",)),
    "dim-1e14": (textwrap.dedent(CONFIG), ("--dim", "batch=1e14"), ("--dim", "batch=1e14")),
    "dim-huge-int": (textwrap.dedent(CONFIG), ("--dim", "batch=100000000000000"), ("--dim",)),
    "dim-zero": (textwrap.dedent(CONFIG), ("--dim", "batch=0"), ("--dim",)),
    "rerun-bogus": (textwrap.dedent(CONFIG), ("--rerun", "bogus"), ("--rerun 'bogus'", "no such stage")),
    "log-format-bogus": (textwrap.dedent(CONFIG), ("--log-format", "xml"), ("--log-format",)),
    "unknown-option": (textwrap.dedent(CONFIG), ("--bogus-flag",), ("--bogus-flag",)),
    "duplicate-input-name": (
        _replace(
            "  - {name: x, shape: [batch, 3, 8, 8]}",
            "  - {name: x, shape: [batch, 3, 8, 8]}\n  - {name: x, shape: [1, 4]}",
        ),
        (),
        ("config.inputs", "'x' is listed twice"),
    ),
    "zero-parity-samples": (_replace("parity: {samples: 1}", "parity: {samples: 0}"), (), ("parity.samples",)),
    "negative-tolerance": (
        _replace("parity: {samples: 1}", "parity: {samples: 1, default: {max_abs: -1}}"),
        (),
        ("parity.default.max_abs",),
    ),
    "baseline-device": (textwrap.dedent(CONFIG), ("--baseline", "/dev/zero"), ("/dev/zero", "not a regular file")),
    "baseline-in-config-device": (_replace("trials: 2", "trials: 2\n  baseline: /dev/zero"), (), ("/dev/zero",)),
    "baseline-not-json": (textwrap.dedent(CONFIG), ("--baseline", "/etc/hostname"), ("/etc/hostname",)),
}

ONNX_DIM_CASES = {
    "dim-1e14": ("--dim", "batch=1e14"),
    "dim-huge": ("--dim", "batch=100000000000000"),
    "dim-unknown": ("--dim", "nosuch=4"),
}


suite = Suite()
# One of each kind in the default suite (a run costs half a second of CPU); the rest under -m slow.
DEFAULT = {
    "alias-bomb",
    "merge-key-alias",
    "duplicate-nested-key",
    "warmup-inf",
    "iterations-huge",
    "nan-tolerance",
    "name-traversal",
    "input-too-big",
    "deep-nesting",
    "huge-integer",
    "python-tag",
    "set-unclosed",
    "set-name-path",
    "dim-1e14",
    "rerun-bogus",
    "duplicate-input-name",
    "baseline-device",
    "onnx-dim-1e14",
    "zero-parity-samples",
    "stage-timeout-unknown",
}


def _register(case: str) -> None:
    text, args, names = CASES[case]
    names_file = not case.startswith(
        ("set-", "dim-", "rerun", "log-", "unknown-option", "stage-timeout-unknown", "baseline")
    )

    @suite.case(case, 2, *names, names_file=names_file, slow=case not in DEFAULT)
    def make(folder: Path, cfg: Path, store: Path, files: dict) -> list:
        cfg.write_text(text)
        return [("convert", cfg, "-w", store, *args)]


for _case in CASES:
    _register(_case)
for _case, _args in ONNX_DIM_CASES.items():
    suite.case(f"onnx-{_case}", 2, "--dim", slow=f"onnx-{_case}" not in DEFAULT)(
        lambda folder, cfg, store, files, _args=_args: [("convert", cfg.parent / "model.onnx", "-w", store, *_args)]
    )


@pytest.fixture(scope="module")
def outcomes(request, built, tmp_path_factory):
    return suite.run_selected(request, tmp_path_factory.mktemp("config-cases"), built)


@pytest.mark.parametrize("case", suite.params())
def test_hostile_config_is_refused_before_any_stage(case, outcomes):
    suite.check(outcomes[case])


def test_a_config_that_is_not_utf8(project):
    cfg, store = project
    cfg.write_bytes(textwrap.dedent(CONFIG).encode().replace(b"name: conv", b"name: conv\xff\xfe"))
    assert_fails_cleanly(deploykit("config", "show", cfg), 2, str(cfg), "not UTF-8", "line 2")


@pytest.mark.parametrize("what", ["folder", "device", "missing", "huge"])
def test_a_config_that_is_not_a_config_file(project, what):
    cfg, _ = project
    target = {"folder": cfg.parent, "device": Path("/dev/zero"), "missing": cfg.parent / "nope.yaml", "huge": cfg}[what]
    if what == "huge":
        cfg.write_text(textwrap.dedent(CONFIG) + "#" * (2 << 20))
    assert_fails_cleanly(deploykit("config", "show", target, timeout=60), 2, str(target))


def test_the_alias_bomb_is_refused_in_bounded_memory(tmp_path):
    """The 2 KB bomb used to take > 6 GB; refused while parsing, it peaks at what the interpreter needs."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB + textwrap.dedent(CONFIG))
    # VmHWM is this process's own peak: ru_maxrss survives exec, so it would report the forking
    # parent's (a pytest that already loaded torch) instead.
    probe = (
        "import re, sys\nfrom deploykit.config import load_config\nfrom deploykit.errors import ConfigError\n"
        "def hwm():\n    return int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])\n"
        "base = hwm()\n"
        "try:\n    load_config(sys.argv[1])\nexcept ConfigError as e:\n    print('refused', e.message)\n"
        "print(base, hwm())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(bomb)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused") and "alias" in lines[0], done.stdout + done.stderr
    base_kib, peak_kib = map(int, lines[1].split())
    assert peak_kib - base_kib < 20 * 1024, f"parsing the bomb grew memory by {(peak_kib - base_kib) / 1024:.1f} MiB"
    assert peak_kib < 500 * 1024  # the whole interpreter, deploykit's config imported (about 55 MiB)
