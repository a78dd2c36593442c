"""A hostile matrix file is read with the guards a config has: no aliases, duplicate keys, deep
nesting, binary or huge files, non-finite numbers or names with a newline; a matrix too large to plan
says how large and what to do; ``-j`` out of range is a usage error. Each is exit 2 within seconds,
before any cell runs, naming the file (or the flag); the store is untouched."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.hostile.conftest import CONFIG
from tests.hostile.harness import Suite

GOOD = """
models:
  - {config: project/deploykit.yaml, name: conv}
precisions: [fp32]
targets:
  - {name: cpu, backend: onnxruntime}
"""
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def _replace(old: str, new: str) -> str:
    text = textwrap.dedent(GOOD)
    assert old in text
    return text.replace(old, new)


def _targets(n: int) -> str:
    return "models: [project/deploykit.yaml]\nprecisions: [fp32]\ntargets:\n" + "".join(
        f"  - {{name: t{i}}}\n" for i in range(n)
    )


# id -> (matrix text or bytes, extra args, names the error line must contain)
CASES: dict[str, tuple[str | bytes, tuple[str, ...], tuple[str, ...]]] = {
    "alias-bomb-in-overrides": (
        _replace("name: conv}", "name: conv, overrides: {gate.iterations: *i}}").replace("models:", BOMB + "models:"),
        (),
        ("alias",),
    ),
    "plain-alias": (_replace("precisions: [fp32]", "p: &p [fp32]\nprecisions: *p"), (), ("alias",)),
    "merge-key": (
        _replace("  - {name: cpu, backend: onnxruntime}", "  - &t {name: cpu}\n  - {<<: *t, name: b}"),
        (),
        ("alias",),
    ),
    "duplicate-key": (
        _replace("precisions: [fp32]", "precisions: [fp32]\nprecisions: [int8]"),
        (),
        ("duplicate key 'precisions'",),
    ),
    "binary-file": (b"models:\n  - \xff\xfe\x00\x80garbage\n", (), ("not UTF-8",)),
    "deep-overrides": (
        _replace("name: conv}", "name: conv, overrides: {x: " + "[" * 5000 + "]" * 5000 + "}}"),
        (),
        ("nested deeper",),
    ),
    "resources-nan": (
        _replace("backend: onnxruntime}", "backend: onnxruntime, resources: {CPU: .nan}}"),
        (),
        ("resources.CPU", "finite"),
    ),
    "resources-inf": (
        _replace("backend: onnxruntime}", "backend: onnxruntime, resources: {GPU: .inf}}"),
        (),
        ("resources.GPU", "finite"),
    ),
    "resources-huge": (
        _replace("backend: onnxruntime}", "backend: onnxruntime, resources: {CPU: 1e300}}"),
        (),
        ("resources.CPU",),
    ),
    "resource-name-newline": (
        _replace("backend: onnxruntime}", 'backend: onnxruntime, resources: {"a\\nb": 1}}'),
        (),
        ("not a Ray resource name",),
    ),
    "target-name-newline": (_replace("{name: cpu,", '{name: "cpu\\n",'), (), ("name 'cpu\\n'",)),
    "model-name-newline": (_replace("name: conv}", 'name: "conv\\nx"}'), (), ("models[0]", "'conv\\nx'")),
    "model-name-path": (_replace("name: conv}", "name: ../../etc}"), (), ("models[0]", "'../../etc'")),
    "override-key-newline": (
        _replace("name: conv}", 'name: conv, overrides: {"gate.\\niterations": 3}}'),
        (),
        ("not a dotted config field",),
    ),
    "retries-huge": (
        _replace("precisions: [fp32]", "precisions: [fp32]\nretries: 1000000000"),
        (),
        ("retries",),
    ),
    "python-tag": (
        _replace("precisions: [fp32]", "precisions: !!python/object/apply:os.system ['echo x']"),
        (),
        ("not valid YAML",),
    ),
    "huge-file": (textwrap.dedent(GOOD) + "#" * (2 << 20), (), ("larger than",)),
    "twenty-thousand-targets": (_targets(20_000), (), ("20,000 cells", "may hold (10,000)")),
    "three-thousand-models": (
        "models:\n"
        + "".join(f"  - {{config: m{i}/deploykit.yaml, name: m{i}}}\n" for i in range(3000))
        + "precisions: [fp32, int8]\ntargets: [{name: a}, {name: b}]\n",
        (),
        ("12,000 cells", "3,000 models"),
    ),
    "jobs-negative": (textwrap.dedent(GOOD), ("-j", "-3"), ("--jobs -3",)),
    "jobs-zero": (textwrap.dedent(GOOD), ("-j", "0"), ("--jobs 0",)),
    "jobs-huge": (textwrap.dedent(GOOD), ("-j", "100000"), ("--jobs 100000",)),
}
DEFAULT = {
    "alias-bomb-in-overrides",
    "binary-file",
    "deep-overrides",
    "resources-nan",
    "target-name-newline",
    "twenty-thousand-targets",
    "jobs-negative",
}

suite = Suite()


def _register(case: str) -> None:
    text, args, names = CASES[case]

    @suite.case(case, 2, *names, slow=case not in DEFAULT, timeout=60)
    def make(folder: Path, cfg: Path, store: Path, files: dict) -> list:
        matrix = folder / "matrix.yaml"
        matrix.write_bytes(text if isinstance(text, bytes) else text.encode())
        files["matrix"] = matrix
        return [("matrix", matrix, "-w", store, "--report-dir", folder / "reports", *args)]


for _case in CASES:
    _register(_case)


@suite.case("matrix-is-a-fifo", 2, "not a regular file", timeout=60, slow=True)
def _fifo(folder, cfg, store, files):
    os.mkfifo(folder / "matrix.yaml")
    return [("matrix", folder / "matrix.yaml", "-w", store)]


@suite.case("matrix-is-dev-zero", 2, "/dev/zero", timeout=60, slow=True)
def _zero(folder, cfg, store, files):
    return [("matrix", "/dev/zero", "-w", store)]


@pytest.fixture(scope="module")
def outcomes(request, built, tmp_path_factory):
    return suite.run_selected(request, tmp_path_factory.mktemp("matrix-cases"), built)


@pytest.mark.parametrize("case", suite.params())
def test_hostile_matrix_is_refused_before_any_cell(case, outcomes):
    outcome = outcomes[case]
    suite.check(outcome)
    matrix = outcome.files.get("matrix")
    if matrix is not None and not CASES[case][1]:  # a file problem names the file
        assert all(str(matrix) in r.error_lines[0] for r in outcome.runs), outcome.runs[0]
    assert not (outcome.store.parent / "reports").exists()


def test_a_model_config_that_is_an_alias_bomb_fails_its_cells_not_the_planner(built, tmp_path):
    """The matrix reads each model config's name with the bounded loader too: no hang, one cell error."""
    import shutil

    from tests.hostile.harness import deploykit

    cfg, store = built
    shutil.copytree(cfg.parent, tmp_path / "project")
    shutil.copytree(store, tmp_path / "store", symlinks=True)
    (tmp_path / "project" / "deploykit.yaml").write_text(BOMB + textwrap.dedent(CONFIG))
    (tmp_path / "matrix.yaml").write_text(textwrap.dedent(GOOD))
    run = deploykit(
        "matrix",
        tmp_path / "matrix.yaml",
        "-w",
        tmp_path / "store",
        "--report-dir",
        tmp_path / "reports",
        cwd=tmp_path,
        timeout=120,
    )
    assert run.code == 2, str(run)
    assert "alias" in run.out + run.err and "Traceback" not in run.out + run.err


def test_a_model_config_edited_after_the_matrix_was_read_is_planned_as_it_now_is(tmp_path):
    """Planning parses each model's config once (ids, checks and cells share the parse): the parse is
    keyed by the file's text, so an edit between reading the matrix and planning it is what gets planned,
    and a config that no longer parses fails its cells."""
    from deploykit.matrix.plan import make_plan
    from deploykit.matrix.spec import load_matrix, resolve_models
    from deploykit.store.artifacts import Store
    from tests.hostile.conftest import write_project

    cfg = write_project(tmp_path / "project")
    (tmp_path / "matrix.yaml").write_text(textwrap.dedent(GOOD))
    spec = load_matrix(tmp_path / "matrix.yaml")
    models = resolve_models(spec, tmp_path / "matrix.yaml")
    with Store(tmp_path / "store") as store:
        before = make_plan(spec, models, store).cells[0]
        cfg.write_text(cfg.read_text().replace("iterations: 5", "iterations: 6"))
        edited = make_plan(spec, models, store).cells[0]
        cfg.write_text("name: [unclosed\n")
        broken = make_plan(spec, models, store).cells[0]
    assert before.error is None and edited.error is None and edited.key != before.key
    assert broken.error is not None and str(cfg) in str(broken.error)
