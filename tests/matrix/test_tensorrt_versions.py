"""A TensorRT target names its TensorRT version; each of its cells lints for that version only, as a
device-independent step shared by the targets of that version."""

from __future__ import annotations

import pytest

from deploykit.config import load_config
from deploykit.matrix import load_matrix
from deploykit.matrix.plan import make_plan, shared_chain
from deploykit.matrix.spec import resolve_models
from deploykit.store.artifacts import Store
from tests.conftest import run_cli
from tests.matrix.helpers import write_matrix, write_model

TARGETS = [
    {"name": "orin", "backend": "tensorrt", "tensorrt": "10.13"},
    {"name": "h200", "backend": "tensorrt", "tensorrt": "11"},
    {"name": "h100", "backend": "tensorrt", "tensorrt": "11", "overrides": {"gate.iterations": 5}},
]


def test_each_tensorrt_targets_cells_lint_for_its_own_version(tmp_path):
    config = write_model(tmp_path / "a", "net_a", seed=1)
    matrix = write_matrix(tmp_path / "matrix.yaml", [config], ["fp32", "int8"], TARGETS)
    spec = load_matrix(matrix)
    assert [t.tensorrt for t in spec.targets] == ["10.13", "11", "11"]
    store = Store(tmp_path / "store")
    plan = make_plan(spec, resolve_models(spec, matrix), store)
    assert len(plan.cells) == 6 and all(c.error is None for c in plan.cells)
    for precision in ("fp32", "int8"):
        cells = {c.target.name: c for c in plan.cells if c.precision == precision}
        lint = {name: dict(c.chain)["lint"] for name, c in cells.items()}
        for name, version in (("orin", "10.13"), ("h200", "11"), ("h100", "11")):
            assert cells[name].overrides["lint.versions"] == [version]
            # the lint step's key is the one a config linting for that version alone gets
            alone = load_config(config, {**cells[name].overrides, "lint.versions": [version]})
            assert dict(shared_chain(alone, store))["lint"] == lint[name]
        assert lint["orin"] != lint["h200"] == lint["h100"]  # one lint per version, shared across targets
        assert cells["orin"].key != cells["h200"].key
    # one lint job per (precision, version): orin's cells alone, h200's and h100's together
    lint_jobs = [j for j in plan.jobs.values() if j.kind == "shared" and j.stages[-1] == "lint"]
    assert sorted(len(j.cells) for j in lint_jobs) == [1, 1, 2, 2]
    assert all(j.requests == {"CPU": 1.0} for j in lint_jobs)  # device-independent: any node runs it


def test_a_target_without_a_version_lints_every_version(tmp_path):
    config = write_model(tmp_path / "a", "net_a", seed=1)
    matrix = write_matrix(tmp_path / "matrix.yaml", [config], ["fp32"], [{"name": "trt", "backend": "tensorrt"}])
    spec = load_matrix(matrix)
    (cell,) = make_plan(spec, resolve_models(spec, matrix), Store(tmp_path / "store")).cells
    assert "lint.versions" not in cell.overrides
    assert load_config(config, cell.overrides).lint.versions == ("10.13", "11")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({"name": "cpu", "backend": "onnxruntime", "tensorrt": "11"}, "the TensorRT version of a tensorrt target"),
        ({"name": "trt", "backend": "tensorrt", "tensorrt": "10.1"}, "'10.1' is not one of '10.13', '11'"),
        ({"name": "trt", "backend": "tensorrt", "tensorrt_version": "11"}, "unknown key 'tensorrt_version'"),
    ],
)
def test_a_wrong_version_is_a_file_level_error(tmp_path, target, message):
    config = write_model(tmp_path / "a", "net_a", seed=1)
    matrix = write_matrix(tmp_path / "matrix.yaml", [config], ["fp32"], [target])
    code, _, err = run_cli("matrix", str(matrix), "-w", str(tmp_path / "store"), "--report-dir", str(tmp_path / "r"))
    assert code == 2 and message in " ".join(err.split()), err
    assert not (tmp_path / "store").exists()


def test_a_version_written_as_a_yaml_number_is_read_as_that_version(tmp_path):
    # `tensorrt: 11` and `tensorrt: 10.13` unquoted are numbers to YAML; the text is what is meant
    config = write_model(tmp_path / "a", "net_a", seed=1)
    targets = [
        {"name": "orin", "backend": "tensorrt", "tensorrt": 10.13},
        {"name": "h200", "backend": "tensorrt", "tensorrt": 11},
    ]
    matrix = write_matrix(tmp_path / "matrix.yaml", [config], ["fp32"], targets)
    assert "tensorrt: 11\n" in matrix.read_text()  # unquoted in the file
    assert [t.tensorrt for t in load_matrix(matrix).targets] == ["10.13", "11"]
    wrong = write_matrix(tmp_path / "wrong.yaml", [config], ["fp32"], [{**targets[1], "tensorrt": 12}])
    code, _, err = run_cli("matrix", str(wrong), "-w", str(tmp_path / "store"), "--report-dir", str(tmp_path / "r"))
    assert code == 2 and "12 is not one of '10.13', '11'" in " ".join(err.split()), err
