"""The matrix file's validation (before anything runs) and the plan: which work cells share."""

from __future__ import annotations

import sys

import pytest

from deploykit.errors import ConfigError, EnvironmentProblem
from deploykit.matrix import load_matrix
from deploykit.matrix.plan import make_plan, unsatisfiable
from deploykit.matrix.spec import resolve_models
from deploykit.store.artifacts import Store
from tests.conftest import run_cli
from tests.matrix.helpers import two_by_two, write_matrix, write_model


def _plan(matrix, tmp_path, **extra):
    spec = load_matrix(matrix)
    return make_plan(spec, resolve_models(spec, matrix), Store(tmp_path / "store"), extra)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"precision": ["int8"]}, "matrix: unknown key 'precision' (did you mean 'precisions'?)"),
        ({"targets": [{"name": "cpu", "backend": "onnxrt"}]}, "targets[0] (cpu): unknown backend 'onnxrt'"),
        ({"targets": [{"name": "cpu"}, {"name": "cpu"}]}, "targets[0] and targets[1] are both named 'cpu'"),
        ({"targets": [{"name": "cpu", "resources": {"GPU": -1}}]}, "resources.GPU must be between 0 and"),
        ({"targets": [{"name": "cpu", "gpus": 1}]}, "matrix.targets[0]: unknown key 'gpus'"),
        (
            {"models": ["a/deploykit.yaml", "missing/deploykit.yaml"]},
            "models[1]: model config missing/deploykit.yaml not found",
        ),
        ({"models": ["a/deploykit.yaml", "a/deploykit.yaml"]}, "models[0] and models[1] are both named 'net_a'"),
        ({"precisions": ["int7"]}, "matrix.precisions[0]: 'int7' is not one of"),
    ],
)
def test_file_level_errors_exit_2_naming_the_entry_before_anything_runs(tmp_path, edit, message):
    import yaml

    matrix = two_by_two(tmp_path)
    raw = yaml.safe_load(matrix.read_text())
    raw.update(edit)
    matrix.write_text(yaml.safe_dump(raw))
    code, out, err = run_cli("matrix", str(matrix), "-w", str(tmp_path / "store"), "--report-dir", str(tmp_path / "r"))
    assert code == 2, err
    assert message in " ".join(err.split()), err
    assert "Traceback" not in err and not (tmp_path / "store").exists() and not (tmp_path / "r").exists()


def test_ray_without_ray_installed_is_one_line_exit_3(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without the package looks like to import
    code, out, err = run_cli("matrix", str(two_by_two(tmp_path)), "--ray", "auto", "-w", str(tmp_path / "store"))
    assert code == 3
    assert "pip install 'deploykit[ray]'" in err and len(err.strip().splitlines()) == 2  # error + hint
    assert not (tmp_path / "store").exists()


def test_shared_stages_are_planned_once_per_model_precision_and_flavour(tmp_path):
    targets = [
        {"name": "cpu"},
        {"name": "cpu-b", "overrides": {"gate.iterations": 5}},
        {"name": "cpu-basic", "overrides": {"build.optimization_level": "basic"}},
    ]
    plan = _plan(two_by_two(tmp_path, targets=targets), tmp_path)
    assert len(plan.cells) == 12 and all(c.error is None for c in plan.cells)
    shared = {j.id: j for j in plan.jobs.values() if j.kind == "shared"}
    # Per model: one ingest+surgery job for all 6 cells; int8 quantizes once for cpu and cpu-b (gate
    # settings do not reach the quantizer) and once more for cpu-basic (the ORT level does).
    assert sorted((j.model, j.stages, len(j.cells)) for j in shared.values()) == [
        ("net_a", ("ingest", "surgery"), 6),
        ("net_a", ("quantize",), 1),
        ("net_a", ("quantize",), 2),
        ("net_b", ("ingest", "surgery"), 6),
        ("net_b", ("quantize",), 1),
        ("net_b", ("quantize",), 2),
    ]
    a_int8_cpu, a_int8_b = (next(c for c in plan.cells if c.id == f"net_a/int8/{t}") for t in ("cpu", "cpu-b"))
    assert a_int8_cpu.job == a_int8_b.job and plan.jobs[a_int8_cpu.job].until == "quantize"
    assert plan.jobs[a_int8_cpu.job].deps == (
        next(j.id for j in shared.values() if j.model == "net_a" and j.stages == ("ingest", "surgery")),
    )
    fp32 = next(c for c in plan.cells if c.id == "net_a/fp32/cpu")
    assert plan.jobs[fp32.job].stages == ("ingest", "surgery")
    assert plan.jobs[fp32.id].deps == (fp32.job,) and plan.jobs[fp32.id].until is None


def test_an_invalid_cell_is_an_error_row_while_the_others_plan(tmp_path):
    good = write_model(tmp_path / "good", "good", seed=1)
    nocal = write_model(tmp_path / "nocal", "nocal", seed=2)
    nocal.write_text(nocal.read_text().replace("calibration: {files: calib, samples: 12}\n", ""))
    matrix = write_matrix(tmp_path / "matrix.yaml", [good, nocal], ["fp32", "int8"], [{"name": "cpu"}])
    plan = _plan(matrix, tmp_path)
    errors = {c.id: c.error for c in plan.cells if c.error is not None}
    assert list(errors) == ["nocal/int8/cpu"]
    assert isinstance(errors["nocal/int8/cpu"], ConfigError)
    assert "needs calibration data" in str(errors["nocal/int8/cpu"])
    assert {c.id for c in plan.cells if c.job} == {"good/fp32/cpu", "good/int8/cpu", "nocal/fp32/cpu"}


def test_target_overrides_reach_the_cell_config_and_precision_and_backend_win(tmp_path):
    targets = [{"name": "cpu", "overrides": {"gate.iterations": 7, "quantize.precision": "fp16"}}]
    matrix = two_by_two(tmp_path, targets=targets, overrides={"gate.trials": 3})
    plan = _plan(matrix, tmp_path, **{"parity.samples": 1})
    cell = next(c for c in plan.cells if c.id == "net_a/int8/cpu")
    assert cell.overrides["gate.iterations"] == 7 and cell.overrides["gate.trials"] == 3
    assert cell.overrides["parity.samples"] == 1
    assert cell.overrides["quantize.precision"] == "int8" and cell.overrides["build.backend"] == "onnxruntime"


def test_unsatisfiable_names_what_was_asked_and_what_nodes_have():
    nodes = {"n1": {"CPU": 4.0, "GPU": 1.0, "memory": 1e9, "node:1.2.3.4": 1.0}, "n2": {"CPU": 2.0, "orin": 1.0}}
    assert unsatisfiable({"CPU": 1.0, "GPU": 1.0}, nodes) == ""
    assert unsatisfiable({"CPU": 1.0, "orin": 1.0}, nodes) == ""
    why = unsatisfiable({"CPU": 1.0, "GPU": 1.0, "orin": 1.0}, nodes)  # no single node has both
    assert why == "no node has CPU: 1, GPU: 1, orin: 1 (nodes: n1: CPU 4, GPU 1; n2: CPU 2, orin 1)"


def test_accelerator_type_becomes_rays_resource(tmp_path):
    from deploykit.matrix.plan import Job
    from deploykit.matrix.ray_executor import task_options
    from deploykit.matrix.spec import TargetSpec

    target = TargetSpec("h200", backend="tensorrt", resources={"GPU": 1}, accelerator_type="H200")
    assert target.requests() == {"CPU": 1.0, "GPU": 1.0, "accelerator_type:H200": 0.001}
    job = Job("j", "cell", "m", tmp_path, {}, None, (), (), target.requests(), "k", ())
    opts = task_options(job, retries=2)
    assert opts["num_cpus"] == 1.0 and opts["num_gpus"] == 1.0 and opts["resources"] == {"accelerator_type:H200": 0.001}
    assert opts["max_retries"] == 2 and opts["retry_exceptions"] is False


def test_ray_errors_are_environment_problems(monkeypatch):
    from deploykit.matrix.ray_executor import require_ray

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(EnvironmentProblem, match="pip install 'deploykit\\[ray\\]'"):
        require_ray()
