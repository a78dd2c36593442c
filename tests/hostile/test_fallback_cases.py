"""A store that does not verify is never the exporter's fault: with ``exporter: auto`` a tampered or
corrupt artifact stops the run (exit 4, naming it) without the trial run of the other exporter, its
objects and ``-torchscript`` record, or a hint to switch exporters. The same holds in a keyed store
(``DEPLOYKIT_STORE_KEY``), and where the store re-makes what it cannot trust (an object gone, a forged
MAC) the configured exporter re-makes it, never the fallback."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import write_tiny
from tests.hostile.forge import by_stage
from tests.hostile.harness import Suite, deploykit, snapshot
from tests.hostile.test_trust_cases import KEY, KEYED, store_key

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


@suite.case("auto-export-model-truncated", 4, "model.onnx", "content changed")
def _export_truncated(folder, cfg, store, files):
    model = by_stage(store, "export") / "model.onnx"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    return [_convert(cfg, store)]


@suite.case("auto-surgery-object-renamed", 4, "manifest.json", "does not match the artifact's digest")
def _renamed(folder, cfg, store, files):
    """The object moved to another digest's name and its recipe repointed: the manifest's digest disagrees."""
    surgery = by_stage(store, "surgery")
    key = json.loads((surgery / "manifest.json").read_text())["recipe_key"]
    surgery.rename(surgery.parent / ("0" * 64))
    (store / "recipes" / key).write_text("0" * 64)
    return [_convert(cfg, store)]


@suite.case("auto-export-recipe-not-a-digest", 4, "recipes/", "does not hold an artifact digest")
def _recipe_garbage(folder, cfg, store, files):
    key = json.loads((by_stage(store, "export") / "manifest.json").read_text())["recipe_key"]
    (store / "recipes" / key).write_text("../../../etc")
    return [_convert(cfg, store)]


@suite.case("auto-export-model-replaced-by-folder", 4, "model.onnx", "missing")
def _model_folder(folder, cfg, store, files):
    model = by_stage(store, "export") / "model.onnx"
    model.unlink()
    model.mkdir()
    return [_convert(cfg, store)]


suite.in_default_suite({"auto-surgery-model-edited", "auto-build-recipe-elsewhere", "auto-export-model-truncated"})

# -- a keyed store: its MACs cover manifests; a file edited under a valid MAC is still refused ----------

keyed = Suite()


def _keyed_object(store: Path, stage: str) -> Path:
    """The stage's object written with the key (the unkeyed run's may still lie beside it)."""
    for m in sorted((store / "objects").glob("*/manifest.json")):
        if json.loads(m.read_text()).get("stage") == stage and (m.parent / "manifest.mac").is_file():
            return m.parent
    raise AssertionError(f"no keyed {stage} artifact in {store}")


@keyed.case("keyed-auto-export-model-truncated", 4, "model.onnx", "content changed", env=KEYED, slow=True)
def _keyed_truncated(folder, cfg, store, files):
    model = _keyed_object(store, "export") / "model.onnx"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    return [_convert(cfg, store)]


@keyed.case("keyed-auto-surgery-model-edited", 4, "model.onnx", "content changed", env=KEYED, slow=True)
def _keyed_edited(folder, cfg, store, files):
    model = _keyed_object(store, "surgery") / "model.onnx"
    model.write_bytes(model.read_bytes()[:-8] + b"\0" * 8)
    return [_convert(cfg, store)]


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
def keyed_torch_built(torch_built, tmp_path_factory) -> tuple[Path, Path]:
    """The same store after a run with the key: every artifact re-made with a MAC."""
    import deploykit

    root = tmp_path_factory.mktemp("auto-keyed")
    shutil.copytree(torch_built[0].parent, root / "project")
    shutil.copytree(torch_built[1], root / "store", symlinks=True)
    with store_key(KEY):
        deploykit.convert(root / "project" / "deploykit.yaml", workdir=root / "store")
    sys.modules.pop("tiny_model", None)
    return root / "project" / "deploykit.yaml", root / "store"


@pytest.fixture(scope="module")
def outcomes(request, torch_built, tmp_path_factory):
    return suite.run_selected(request, tmp_path_factory.mktemp("fallback-cases"), torch_built)


@pytest.fixture(scope="module")
def keyed_outcomes(request, keyed_torch_built, tmp_path_factory):
    return keyed.run_selected(request, tmp_path_factory.mktemp("keyed-fallback-cases"), keyed_torch_built)


@pytest.mark.parametrize("case", suite.params())
def test_a_store_error_never_runs_the_exporter_fallback(case, outcomes):
    _assert_no_fallback(suite, outcomes[case])


@pytest.mark.parametrize("case", keyed.params())
def test_a_keyed_store_error_never_runs_the_exporter_fallback(case, keyed_outcomes):
    _assert_no_fallback(keyed, keyed_outcomes[case])


def _assert_no_fallback(cases: Suite, outcome) -> None:
    cases.check(outcome)
    for run in outcome.runs:
        assert "torchscript exporter" not in run.err and "export.exporter" not in run.err, str(run)
    assert not list((outcome.store / "records").glob("*-torchscript*")), "the fallback's trial run was recorded"
    after = {k for k in snapshot(outcome.store) if k.startswith("objects/")}
    assert after <= {k for k in outcome.before if k.startswith("objects/")}, "the fallback made new objects"


def _export_gone(store: Path) -> None:
    shutil.rmtree(by_stage(store, "export"))  # as `artifacts gc` or a half-restored CI cache leaves it


def _export_mac_forged(store: Path) -> None:
    (_keyed_object(store, "export") / "manifest.mac").write_text("0" * 64 + "\n")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("remade", "keyed_store"), [(_export_gone, False), (_export_mac_forged, True)], ids=["object-gone", "mac-forged"]
)
def test_an_export_the_store_re_makes_is_made_by_the_configured_exporter(
    torch_built, keyed_torch_built, tmp_path, remade, keyed_store
):
    """Not an error: a store re-makes what it no longer has (or, keyed, cannot trust). The re-made export
    is the dynamo exporter's, as configured; nothing tries the torchscript exporter."""
    cfg, store = keyed_torch_built if keyed_store else torch_built
    shutil.copytree(cfg.parent, tmp_path / "project")
    shutil.copytree(store, tmp_path / "store", symlinks=True)
    store = tmp_path / "store"
    remade(store)
    before = {p.name for p in (store / "objects").iterdir()}
    run = deploykit("convert", tmp_path / "project" / "deploykit.yaml", "-w", store, env=KEYED if keyed_store else {})
    assert run.code == 0, str(run)
    assert "torchscript" not in run.err and "export.exporter" not in run.err, str(run)
    assert not list((store / "records").glob("*-torchscript*")), "the fallback's trial run was recorded"
    made = [store / "objects" / d for d in {p.name for p in (store / "objects").iterdir()} - before]
    exports = [json.loads((d / "manifest.json").read_text()) for d in made]
    exports = [m for m in exports if m["stage"] == "export"]
    assert [m["summary"]["exporter"] for m in exports] == ["dynamo"], exports
