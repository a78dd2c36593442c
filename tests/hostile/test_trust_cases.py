"""Who wrote the store: run records checked against the artifacts they name, measurements from
another machine, and the keyed store (``DEPLOYKIT_STORE_KEY``).

A writer of the store without the key can rewrite an artifact and recompute every digest
(:mod:`tests.hostile.forge`). Without a key that is the documented trust boundary (the forgery
verifies); a record that disagrees with its artifacts, or an artifact whose manifest says it was
made for another recipe or on another machine, is refused either way (exit 4). With the key set,
every forged artifact is re-made rather than reused, and every forged record is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.hostile.forge import by_stage, reseal, rewrite_record
from tests.hostile.harness import Suite, assert_fails_cleanly, assert_no_traceback, deploykit

KEY = "hostile-test-key-0123456789abcdef"
KEYED = {"DEPLOYKIT_STORE_KEY": KEY}
IDENTITY = "conv.fp32.onnxruntime"
RECORD = f"records/{IDENTITY}.json"


@contextlib.contextmanager
def store_key(key: str | None):
    """``DEPLOYKIT_STORE_KEY`` set (or unset) in this process for the ``with`` block."""
    saved = os.environ.pop("DEPLOYKIT_STORE_KEY", None)
    if key is not None:
        os.environ["DEPLOYKIT_STORE_KEY"] = key
    try:
        yield
    finally:
        os.environ.pop("DEPLOYKIT_STORE_KEY", None)
        if saved is not None:
            os.environ["DEPLOYKIT_STORE_KEY"] = saved


def _failed_run(cfg: Path, store: Path) -> None:
    """Run the config again with an FPS target no machine meets: its record says FAIL."""
    import deploykit
    from deploykit.errors import TargetMissed

    with pytest.raises(TargetMissed):
        deploykit.convert(cfg, workdir=store, overrides={"gate.targets": {"default": {"fps": 1e12}}})


def _claim_fps(fps: float):
    """A forger's edit of a gate artifact: gate.json and the summary claim ``fps`` and a pass."""

    def files(folder: Path) -> None:
        report = json.loads((folder / "gate.json").read_text())
        report.update(fps=fps, passed=True)
        for c in report["checks"]:
            c.update(measured=fps, passed=True)
        (folder / "gate.json").write_text(json.dumps(report))

    def manifest(m: dict) -> None:
        m["summary"].update(fps=fps, passed=True, failures=[])

    return files, manifest


def _report(folder: Path, store: Path) -> tuple:
    return ("report", "conv", "-w", store, "-o", folder / "r.html")


def _verify(store: Path) -> tuple:
    return ("artifacts", "verify", "-w", store)


suite = Suite()

# -- 1. a run record is what its artifacts say --------------------------------------------------


@suite.case("record-checks-flipped-to-pass", 4, RECORD, "checks disagree", "artifacts say gate")
def _flipped(folder, cfg, store, files):
    _failed_run(cfg, store)

    def flip(r: dict) -> None:
        for c in r["checks"]:
            c.update(status="pass", passed=True)
        for s in r["stages"]:
            s["error"] = ""

    rewrite_record(store, IDENTITY, flip)
    return [_verify(store), _report(folder, store)]


@suite.case("record-failed-check-dropped", 4, RECORD, "checks disagree", "holds 1 checks, its artifacts 2")
def _dropped(folder, cfg, store, files):
    _failed_run(cfg, store)
    rewrite_record(store, IDENTITY, lambda r: r.update(checks=[c for c in r["checks"] if c["passed"]]))
    return [_verify(store), _report(folder, store)]


@suite.case("record-verdict-field-edited", 4, RECORD, "was edited")
def _verdict_field(folder, cfg, store, files):
    _failed_run(cfg, store)
    path = store / RECORD
    path.write_text(path.read_text().replace('"verdict": "FAIL"', '"verdict": "PASS"'))
    return [_verify(store), _report(folder, store)]


@suite.case("record-gate-report-edited", 4, RECORD, "details disagree")
def _details(folder, cfg, store, files):
    rewrite_record(store, IDENTITY, lambda r: r["details"]["gate"].update(fps=2e7))
    return [_verify(store), _report(folder, store)]


@suite.case("record-warnings-edited", 4, RECORD, "warnings disagree")
def _warning(folder, cfg, store, files):
    rewrite_record(store, IDENTITY, lambda r: r.update(warnings=[] if r["warnings"] else ["gate: forged"]))
    return [_verify(store), _report(folder, store)]


@suite.case("record-names-another-stages-artifact", 4, RECORD, "names artifact", "a parity")
def _other_artifact(folder, cfg, store, files):
    parity = by_stage(store, "parity")
    manifest = json.loads((parity / "manifest.json").read_text())

    def point(r: dict) -> None:
        gate = next(s for s in r["stages"] if s["stage"] == "gate")
        gate.update(digest=parity.name, created=manifest["created"])

    rewrite_record(store, IDENTITY, point)
    return [_verify(store), _report(folder, store)]


@suite.case("record-of-another-run", 4, "records/conv.int8.onnxruntime.onnxruntime.json", "record of another run")
def _moved(folder, cfg, store, files):
    shutil.copy(store / RECORD, store / "records" / "conv.int8.onnxruntime.onnxruntime.json")
    return [_verify(store)]


@suite.case("record-stopped-run-error-removed", 4, RECORD, "without an artifact", "no error")
def _error_removed(folder, cfg, store, files):
    def stopped(r: dict) -> None:  # a run that stopped in the gate, its error removed to read as a pass
        gate = next(s for s in r["stages"] if s["stage"] == "gate")
        gate.update(status="failed", digest="", kind="", created="")
        r["checks"] = [c for c in r["checks"] if c["group"] != "gate"]
        r["details"].pop("gate")
        r["warnings"] = [w for w in r["warnings"] if not w.startswith("gate:")]

    rewrite_record(store, IDENTITY, stopped)
    return [_verify(store), _report(folder, store)]


# -- 2. a measurement belongs to the machine that made it ---------------------------------------


def _other_machine(m: dict) -> None:
    m["device"] = {**m["device"], "model": "Some Other CPU 9000", "features": ["avx512f", "amx_int8"]}


@suite.case("gate-from-another-machine", 4, "made on another machine", "Some Other CPU 9000")
def _gate_elsewhere(folder, cfg, store, files):
    reseal(store, by_stage(store, "gate"), manifest=_other_machine)
    return [("convert", cfg, "-w", store)]


@suite.case("parity-from-another-machine", 4, "made on another machine", "Some Other CPU 9000")
def _parity_elsewhere(folder, cfg, store, files):
    reseal(store, by_stage(store, "parity"), manifest=_other_machine)
    return [("convert", cfg, "-w", store)]


@suite.case("gate-with-another-config-repointed", 4, "not those of recipe")
def _gate_config(folder, cfg, store, files):
    def other(m: dict) -> None:  # measured with 1 iteration, then presented as this config's measurement
        m["config"]["iterations"] = 1

    reseal(store, by_stage(store, "gate"), manifest=other)
    return [("convert", cfg, "-w", store)]


@suite.case("gate-with-another-engine-repointed", 4, "not those of recipe")
def _gate_parent(folder, cfg, store, files):
    surgery = by_stage(store, "surgery").name
    reseal(store, by_stage(store, "gate"), manifest=lambda m: m["parents"].update(engine=surgery))
    return [("convert", cfg, "-w", store)]


# -- 3. the keyed store: no MAC, no trust ---------------------------------------------------------

keyed = Suite()


@keyed.case("keyed-forged-record", 4, RECORD, "MAC", env=KEYED)
def _keyed_record(folder, cfg, store, files):
    rewrite_record(store, IDENTITY, lambda r: r["details"]["gate"].update(note="forged"))
    return [_verify(store), _report(folder, store)]


@keyed.case("keyed-record-mac-removed", 4, RECORD, "no MAC", env=KEYED)
def _keyed_record_mac(folder, cfg, store, files):
    (store / "records" / f"{IDENTITY}.mac").unlink()
    return [_verify(store), _report(folder, store)]


@keyed.case("keyed-record-mac-of-another-file", 4, RECORD, "does not match", env=KEYED)
def _keyed_record_swap(folder, cfg, store, files):
    gate = by_stage(store, "gate")
    shutil.copy(gate / "manifest.mac", store / "records" / f"{IDENTITY}.mac")
    return [_verify(store), _report(folder, store)]


@keyed.case("keyed-forged-gate-verify", 4, "manifest.json", "no MAC", env=KEYED)
def _keyed_gate_verify(folder, cfg, store, files):
    reseal(store, by_stage(store, "gate"), files=_claim_fps(2e7)[0], manifest=_claim_fps(2e7)[1])
    return [_verify(store)]


@keyed.case("keyed-mac-copied-from-another-artifact", 4, "manifest.json", "does not match", env=KEYED)
def _keyed_mac_copy(folder, cfg, store, files):
    gate = reseal(store, by_stage(store, "gate"), files=_claim_fps(2e7)[0], manifest=_claim_fps(2e7)[1])
    shutil.copy(by_stage(store, "parity") / "manifest.mac", gate / "manifest.mac")
    return [_verify(store), ("artifacts", "show", gate.name[:12], "-w", store)]


@keyed.case("keyed-short-key", 2, "DEPLOYKIT_STORE_KEY", "at least 16", env={"DEPLOYKIT_STORE_KEY": "short"})
def _short_key(folder, cfg, store, files):
    return [("convert", cfg, "-w", store), _verify(store)]


DEFAULT = {
    "record-checks-flipped-to-pass",
    "record-stopped-run-error-removed",
    "gate-from-another-machine",
    "gate-with-another-config-repointed",
}
suite.in_default_suite(DEFAULT)
keyed.in_default_suite({"keyed-forged-record", "keyed-forged-gate-verify"})


@pytest.fixture(scope="module")
def keyed_built(built, tmp_path_factory) -> tuple[Path, Path]:
    """The built project's store after a rerun with the key: every artifact and record re-made with a MAC."""
    import deploykit

    cfg, store = built
    root = tmp_path_factory.mktemp("keyed")
    shutil.copytree(cfg.parent, root / "project")
    shutil.copytree(store, root / "store", symlinks=True)
    from deploykit.store.artifacts import Store
    from deploykit.store.check import gc

    with store_key(KEY):
        deploykit.convert(root / "project" / "deploykit.yaml", workdir=root / "store")
        with Store(root / "store") as s:
            gc(s)  # the unkeyed run's gate measurement, which nothing names any more
    return root / "project" / "deploykit.yaml", root / "store"


@pytest.fixture(scope="module")
def outcomes(request, built, tmp_path_factory):
    return suite.run_selected(request, tmp_path_factory.mktemp("trust-cases"), built)


@pytest.fixture(scope="module")
def keyed_outcomes(request, keyed_built, tmp_path_factory):
    return keyed.run_selected(request, tmp_path_factory.mktemp("keyed-cases"), keyed_built)


@pytest.mark.parametrize("case", suite.params())
def test_hostile_trust(case, outcomes):
    suite.check(outcomes[case])


@pytest.mark.parametrize("case", keyed.params())
def test_hostile_keyed_store(case, keyed_outcomes):
    keyed.check(keyed_outcomes[case])


# -- outcomes that are not errors ------------------------------------------------------------------


def _gate_of(run) -> tuple[float, bool]:
    record = json.loads(run.out)
    fps = next(c["measured"] for c in record["checks"] if c["group"] == "gate")
    return fps, record["gate_cached"]


def _copy(src: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    cfg, store = src
    shutil.copytree(cfg.parent, tmp_path / "project")
    shutil.copytree(store, tmp_path / "store", symlinks=True)
    return tmp_path / "project" / "deploykit.yaml", tmp_path / "store"


def test_without_a_key_a_resealed_forgery_verifies_the_documented_boundary(project):
    """The README's trust boundary, as a test: without a key the store is as trusted as its writers."""
    cfg, store = project
    files, manifest = _claim_fps(2e7)
    reseal(store, by_stage(store, "gate"), files=files, manifest=manifest)
    run = deploykit("convert", cfg, "-w", store, "--log-format", "json")
    assert run.code == 0, str(run)
    assert _gate_of(run) == (2e7, True)


@pytest.mark.parametrize(
    "stage",
    ["gate", pytest.param("parity", marks=pytest.mark.slow), pytest.param("build", marks=pytest.mark.slow)],
)
def test_with_the_key_a_forged_artifact_is_remade_never_reused(keyed_built, tmp_path, stage):
    cfg, store = _copy(keyed_built, tmp_path)
    files, manifest = _claim_fps(2e7) if stage == "gate" else (lambda f: None, lambda m: m["summary"].update(forged=1))
    forged = reseal(store, by_stage(store, stage), files=files, manifest=manifest)
    run = deploykit("convert", cfg, "-w", store, "--log-format", "json", env=KEYED)
    assert run.code == 0, str(run)
    assert_no_traceback(run)
    record = json.loads(run.out)
    row = next(s for s in record["stages"] if s["stage"] == stage)
    assert row["status"] == "ran" and row["digest"] != forged.name
    if stage == "gate":
        fps, cached = _gate_of(run)
        assert fps != 2e7 and not cached
    assert deploykit("report", "conv", "-w", store, "-o", tmp_path / "r.html", env=KEYED).code == 0


def test_setting_a_key_on_an_unkeyed_store_remakes_everything_then_reuses(project, tmp_path):
    cfg, store = project
    first = deploykit("convert", cfg, "-w", store, "--log-format", "json", env=KEYED)
    assert first.code == 0, str(first)
    assert {s["status"] for s in json.loads(first.out)["stages"]} == {"ran"}
    second = deploykit("convert", cfg, "-w", store, "--log-format", "json", env=KEYED)
    assert {s["status"] for s in json.loads(second.out)["stages"]} == {"reused"}, str(second)
    stale = deploykit("artifacts", "verify", "-w", store, env=KEYED)  # the unkeyed run's gate measurement
    assert_fails_cleanly(stale, 4, "no MAC")
    assert "1 problem(s)" in stale.out, str(stale)
    assert deploykit("artifacts", "gc", "-w", store, env=KEYED).code == 0  # nothing names it any more
    assert deploykit("artifacts", "verify", "-w", store, env=KEYED).code == 0


def test_a_reused_gate_names_the_machine_it_was_measured_on(project):
    from deploykit.store.environment import device_fingerprint

    cfg, store = project
    run = deploykit("convert", cfg, "-w", store)
    assert run.code == 0, str(run)
    assert f"on {device_fingerprint()['model']} reused" in " ".join(run.out.split())


def test_a_failed_runs_record_renders_fail_in_every_view(project, tmp_path):
    """The unforged counterpart of record-checks-flipped-to-pass: the report says what the gate said."""
    cfg, store = project
    run = deploykit("convert", cfg, "-w", store, "--set", "gate.targets.default.fps=1e12", "--remeasure")
    assert run.code == 1, str(run)
    assert deploykit("artifacts", "verify", "-w", store).code == 0
    report = deploykit("report", "conv", "-w", store, "-o", tmp_path / "r.html")
    assert report.code == 0, str(report)
    assert "FAIL" in (tmp_path / "r.html").read_text()
