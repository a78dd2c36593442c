"""A store that does not verify is never the exporter's fault: with ``exporter: auto`` a tampered or
corrupt artifact stops the run (exit 4, naming it) without the trial run of the other exporter, its
objects and ``-torchscript`` record, or a hint to switch exporters."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import write_tiny
from tests.hostile.forge import by_stage
from tests.hostile.harness import Suite, snapshot

suite = Suite()


def _convert(cfg: Path, store: Path) -> tuple:
    return ("convert", cfg, "-w", store)


@suite.case("auto-surgery-model-edited", 4, "model.onnx", "content changed")
def _model_edited(folder, cfg, store, files):
    model = by_stage(store, "surgery") / "model.onnx"
    model.write_bytes(model.read_bytes()[:-8] + b"\0" * 8)
    return [_convert(cfg, store)]


@suite.case("auto-export-verdict-edited", 4, "manifest")
def _export_manifest(folder, cfg, store, files):
    path = by_stage(store, "export") / "manifest.json"
    data = json.loads(path.read_text())
    data["summary"]["exporter"] = "torchscript"
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
    return [_convert(cfg, store)]


@suite.case("auto-build-recipe-elsewhere", 4, "recipes/", "not this one")
def _recipe(folder, cfg, store, files):
    build, parity = by_stage(store, "build"), by_stage(store, "parity")
    key = json.loads((build / "manifest.json").read_text())["recipe_key"]
    (store / "recipes" / key).write_text(parity.name)
    return [_convert(cfg, store)]


@suite.case("auto-parity-unlisted-file", 4, "smuggled.json", "not listed")
def _unlisted(folder, cfg, store, files):
    (by_stage(store, "parity") / "smuggled.json").write_text("{}")
    return [_convert(cfg, store)]


@suite.case("auto-gate-manifest-truncated", 4, "not valid JSON")
def _truncated(folder, cfg, store, files):
    path = by_stage(store, "gate") / "manifest.json"
    path.write_bytes(path.read_bytes()[:50])
    return [_convert(cfg, store)]


@suite.case("auto-engine-file-removed", 4, "missing")
def _removed(folder, cfg, store, files):
    (by_stage(store, "build") / "model.onnx").unlink()
    return [_convert(cfg, store)]


@suite.case("auto-link-in-export", 4, "links and special files")
def _link(folder, cfg, store, files):
    (by_stage(store, "export") / "passwd").symlink_to("/etc/passwd")
    return [_convert(cfg, store)]


@suite.case("auto-surgery-object-replaced-by-file", 4, "not an artifact folder")
def _object_file(folder, cfg, store, files):
    surgery = by_stage(store, "surgery")
    shutil.rmtree(surgery)
    surgery.write_text("x")
    return [_convert(cfg, store)]


suite.in_default_suite({"auto-surgery-model-edited", "auto-build-recipe-elsewhere"})


@pytest.fixture(scope="module")
def torch_built(tmp_path_factory) -> tuple[Path, Path]:
    """A torch factory with ``exporter: auto`` after one convert (its export ran the dynamo exporter)."""
    import deploykit

    root = tmp_path_factory.mktemp("auto")
    cfg = write_tiny(root / "project", exporter="auto")
    deploykit.convert(cfg, workdir=root / "store")
    sys.modules.pop("tiny_model", None)
    return cfg, root / "store"


@pytest.fixture(scope="module")
def outcomes(request, torch_built, tmp_path_factory):
    return suite.run_selected(request, tmp_path_factory.mktemp("fallback-cases"), torch_built)


@pytest.mark.parametrize("case", suite.params())
def test_a_store_error_never_runs_the_exporter_fallback(case, outcomes):
    outcome = outcomes[case]
    suite.check(outcome)
    for run in outcome.runs:
        assert "torchscript exporter" not in run.err and "export.exporter" not in run.err, str(run)
    assert not list((outcome.store / "records").glob("*-torchscript*")), "the fallback's trial run was recorded"
    after = {k for k in snapshot(outcome.store) if k.startswith("objects/")}
    assert after <= {k for k in outcome.before if k.startswith("objects/")}, "the fallback made new objects"
