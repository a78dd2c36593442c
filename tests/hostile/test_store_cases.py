"""A store that cannot be fooled: every edit of an artifact, its manifest, a recipe or a run record is
ArtifactCorrupt (exit 4) naming the path, never a silent rebuild, pass or omission; a workdir that is
not laid out as a store is an environment error (exit 3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.hostile.harness import Suite

suite = Suite()


def _by_stage(store: Path, stage: str) -> Path:
    for m in sorted((store / "objects").glob("*/manifest.json")):
        if f'"stage": "{stage}"' in m.read_text(errors="replace"):
            return m.parent
    raise AssertionError(f"no {stage} artifact in {store}")


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def _convert(cfg: Path, store: Path) -> tuple:
    return ("convert", cfg, "-w", store)


@suite.case("gate-verdict-edited", 4, "manifest")
def _verdict(folder, cfg, store, files):
    gate = _by_stage(store, "gate")
    _edit(gate / "manifest.json", lambda m: m["summary"].update(passed=False, failures=["edited"]))
    return [_convert(cfg, store)]


@suite.case("gate-report-edited", 4, "gate.json", "content changed")
def _report(folder, cfg, store, files):
    gate = _by_stage(store, "gate")
    _edit(gate / "gate.json", lambda r: r.update(passed=True, fps=1e9))
    return [_convert(cfg, store)]


@suite.case("recipe-points-at-another-artifact", 4, "recipes/", "not this one")
def _recipe(folder, cfg, store, files):
    gate, build = _by_stage(store, "gate"), _by_stage(store, "build")
    key = json.loads((gate / "manifest.json").read_text())["recipe_key"]
    (store / "recipes" / key).write_text(build.name)  # a gate that "passed" by pointing at the engine
    return [_convert(cfg, store)]


@suite.case("recipe-holds-garbage", 4, "recipes/", "does not hold an artifact digest")
def _recipe_garbage(folder, cfg, store, files):
    key = json.loads((_by_stage(store, "ingest") / "manifest.json").read_text())["recipe_key"]
    (store / "recipes" / key).write_text("../../../../etc/passwd")
    return [_convert(cfg, store)]


@suite.case("recipe-is-a-folder", 4, "recipes/", "not a regular file")
def _recipe_folder(folder, cfg, store, files):
    key = json.loads((_by_stage(store, "ingest") / "manifest.json").read_text())["recipe_key"]
    (store / "recipes" / key).unlink()
    (store / "recipes" / key).mkdir()
    return [_convert(cfg, store)]


@suite.case("unlisted-file-in-artifact", 4, "smuggled.so", "not listed")
def _extra(folder, cfg, store, files):
    (_by_stage(store, "build") / "smuggled.so").write_bytes(b"\x7fELF")
    return [_convert(cfg, store), ("artifacts", "verify", "-w", store)]


@suite.case("symlink-in-artifact", 4, "links and special files")
def _link(folder, cfg, store, files):
    (_by_stage(store, "build") / "passwd").symlink_to("/etc/passwd")
    return [_convert(cfg, store)]


def _manifest_case(id: str, write, *names: str) -> None:
    @suite.case(f"manifest-{id}", 4, "manifest", *names)
    def manifest(folder, cfg, store, files):
        path, gate = _by_stage(store, "ingest") / "manifest.json", _by_stage(store, "gate")
        write(path)
        digest = path.parent.name
        return [
            _convert(cfg, store),
            ("artifacts", "show", digest[:12], "-w", store),
            ("artifacts", "ls", "-w", store),
            ("artifacts", "lineage", gate.name[:12], "-w", store),
            ("artifacts", "verify", "-w", store),
        ]


_manifest_case("truncated", lambda p: p.write_bytes(p.read_bytes()[:40]), "not valid JSON")
_manifest_case("a-list", lambda p: p.write_text("[1, 2, 3]"), "a JSON list")
_manifest_case("missing", lambda p: p.unlink(), "missing")
_manifest_case("binary", lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "not valid JSON")
_manifest_case("extra-field", lambda p: _edit(p, lambda m: m.update(trusted=True)), "unknown fields trusted")
_manifest_case("wrong-type", lambda p: _edit(p, lambda m: m.update(files="model.onnx")), "'files'")
_manifest_case(
    "file-outside", lambda p: _edit(p, lambda m: m["files"].update({"../../x": "0" * 64})), "outside the artifact"
)
_manifest_case("reformatted", lambda p: p.write_text(json.dumps(json.loads(p.read_text()))), "edited")
_manifest_case("old-schema", lambda p: _edit(p, lambda m: m.update(schema_version=1)), "schema")


RECORD = "records/conv.fp32.onnxruntime.json"  # the run record `deploykit report conv` renders
REFS = "runs/conv.fp32.onnxruntime.json"  # the run's role -> digest refs (gc roots)


@suite.case("run-record-corrupt", 4, RECORD)
def _run_corrupt(folder, cfg, store, files):
    (store / RECORD).write_text('{"model": ')
    return [("report", "conv", "-w", store, "-o", folder / "r.html")]


@suite.case("run-record-a-list", 4, RECORD)
def _run_list(folder, cfg, store, files):
    (store / RECORD).write_text("[]")
    return [("report", "conv", "-w", store, "-o", folder / "r.html"), ("artifacts", "verify", "-w", store)]


@suite.case("run-refs-corrupt", 4, REFS)
def _refs_corrupt(folder, cfg, store, files):
    (store / REFS).write_text('{"model": ')
    return [("artifacts", "verify", "-w", store)]


@suite.case("legacy-run-refs-a-list", 4, "runs/conv.json")
def _legacy_refs(folder, cfg, store, files):
    shutil.rmtree(store / "records")  # a store written before run records: the report reads the refs
    (store / "runs" / "conv.json").write_text("[]")
    return [("report", "conv", "-w", store, "-o", folder / "r.html")]


@suite.case("run-record-names-a-removed-artifact", 4, "named by the run but not in the store")
def _run_missing(folder, cfg, store, files):
    shutil.rmtree(_by_stage(store, "parity"))
    return [("report", "conv", "-w", store, "-o", folder / "r.html")]


@suite.case("report-bogus-ref", 2, "'../../etc'")
def _report_bogus(folder, cfg, store, files):
    return [("report", "../../etc", "-w", store, "-o", folder / "r.html")]


@suite.case("show-path-as-digest", 2, "'../x'")
def _show_path(folder, cfg, store, files):
    return [("artifacts", "show", "../x", "-w", store)]


@suite.case("lock-is-a-folder", 3, "lock", "not a regular file")
def _lock_folder(folder, cfg, store, files):
    (store / "lock").unlink(missing_ok=True)
    (store / "lock").mkdir()
    return [_convert(cfg, store), ("artifacts", "ls", "-w", store)]


@suite.case("objects-is-a-file", 3, "objects", "not a folder", store_kept=False)
def _objects_file(folder, cfg, store, files):
    shutil.rmtree(store / "objects")
    (store / "objects").write_text("x")
    return [_convert(cfg, store)]


@suite.case("workdir-is-a-file", 3, "workdir")
def _workdir_file(folder, cfg, store, files):
    (folder / "workdir").write_text("x")
    return [_convert(cfg, folder / "workdir")]


@suite.case("report-dir-is-a-file", 2, "--report-dir", "is a file")
def _report_dir(folder, cfg, store, files):
    (folder / "reports").write_text("x")
    return [("convert", cfg, "-w", store, "--report-dir", folder / "reports")]


DEFAULT = {
    "gate-verdict-edited",
    "recipe-points-at-another-artifact",
    "unlisted-file-in-artifact",
    "manifest-truncated",
    "run-record-corrupt",
    "lock-is-a-folder",
    "report-dir-is-a-file",
    "show-path-as-digest",
}
suite.in_default_suite(DEFAULT)


@pytest.fixture(scope="module")
def outcomes(request, built, tmp_path_factory):
    return suite.run_selected(request, tmp_path_factory.mktemp("store-cases"), built)


@pytest.mark.parametrize("case", suite.params())
def test_hostile_store(case, outcomes):
    suite.check(outcomes[case])
