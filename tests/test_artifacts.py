import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploykit.errors import ArtifactCorrupt, WorkdirError
from deploykit.store.artifacts import MANIFEST, Manifest, Store, recipe_key
from deploykit.store.check import gc, verify
from deploykit.store.tempspace import GRACE_S, clean_stale


def manifest(key: str, summary: dict | None = None, parents: dict | None = None) -> Manifest:
    return Manifest(
        kind="onnx",
        stage="test",
        stage_version=1,
        recipe_key=key,
        config={},
        parents=parents or {},
        files={},
        tools={},
        device={},
        timings={},
        summary=summary or {},
    )


def publish(store: Store, key: str, content: bytes, **kw: object) -> object:
    with store.staging("test") as tmp:
        (tmp / "model.onnx").write_bytes(content)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "extra.txt").write_text("x")
        return store.publish(tmp, manifest(key, **kw))


def test_publish_is_content_addressed_and_found_by_recipe(tmp_path):
    with Store(tmp_path) as store:
        a = publish(store, "k1", b"abc")
        assert a.path == tmp_path / "objects" / a.digest
        assert set(a.manifest.files) == {"model.onnx", "sub/extra.txt"}
        assert store.lookup("k1").digest == a.digest
        assert store.lookup("k2") is None
        assert publish(store, "k1", b"abc").digest == a.digest  # same recipe, same bytes: the same artifact
        b = publish(store, "k2", b"abc")  # same bytes from another recipe: its own artifact and manifest
        assert b.digest != a.digest and b.manifest.recipe_key == "k2" and a.manifest.recipe_key == "k1"
        assert publish(store, "k3", b"abd").digest != a.digest
        assert (
            publish(store, "k4", b"abc", summary={"passed": True}).digest
            != publish(store, "k4", b"abc", summary={"passed": False}).digest
        )  # the verdict is part of the identity
    assert list((tmp_path / "tmp").iterdir()) == []  # closing the store removes this process's temporaries


def test_artifacts_published_within_one_second_list_in_publish_order(tmp_path):
    # "newest first" (the search cache, the report's run) must not fall back to digest order
    with Store(tmp_path) as store:
        published = []
        for i in range(6):
            published.append(publish(store, f"k{i}", f"content {i}".encode()).digest)
            time.sleep(0.003)
        found, problems = store.scan()
    assert problems == [] and [a.digest for a in found] == published


def test_edited_file_is_an_error_not_a_rebuild(tmp_path):
    store = Store(tmp_path)
    a = publish(store, "k1", b"abc")
    (a.path / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(ArtifactCorrupt, match="model.onnx: content changed") as e:
        store.lookup("k1")
    assert str(a.path) in e.value.hint


def _edit_manifest(path: Path, change) -> None:
    data = json.loads((path / MANIFEST).read_text())
    change(data)
    (path / MANIFEST).write_text(json.dumps(data, indent=2, sort_keys=True))


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m["summary"].update(passed=True),  # a failed gate edited into a pass
        lambda m: m.update(created="2000-01-01T00:00:00Z"),
        lambda m: m["timings"].update(run_s=0.0),
        lambda m: m["config"].update(x=1),
        lambda m: m.update(stage="gate"),
    ],
    ids=["summary", "created", "timings", "config", "stage"],
)
def test_every_manifest_field_is_covered(tmp_path, change):
    store = Store(tmp_path)
    a = publish(store, "k1", b"abc", summary={"passed": False})
    _edit_manifest(a.path, change)
    with pytest.raises(ArtifactCorrupt, match="manifest"):
        store.lookup("k1")


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"kind": "onnx", ', "not valid JSON"),
        (b"[1, 2]", "a JSON list"),
        (b"\xff\xfe", "not valid JSON"),
        (None, "manifest missing"),
    ],
    ids=["truncated", "list", "binary", "missing"],
)
def test_corrupt_manifest_is_named_by_get_lookup_and_ls(tmp_path, content, message):
    store = Store(tmp_path)
    a = publish(store, "k1", b"abc")
    if content is None:
        (a.path / MANIFEST).unlink()
    else:
        (a.path / MANIFEST).write_bytes(content)
    for call in (lambda: store.get(a.digest), lambda: store.lookup("k1"), store.list):
        with pytest.raises(ArtifactCorrupt, match=message):
            call()
    good, problems = store.scan()
    assert good == [] and len(problems) == 1 and str(a.path) in problems[0]


def test_unlisted_file_and_removed_file_are_detected(tmp_path):
    store = Store(tmp_path)
    a = publish(store, "k1", b"abc")
    (a.path / "sub" / "smuggled.so").write_bytes(b"\x7fELF")
    with pytest.raises(ArtifactCorrupt, match="smuggled.so: file not listed"):
        store.get(a.digest)
    (a.path / "sub" / "smuggled.so").unlink()
    (a.path / "sub" / "extra.txt").unlink()
    with pytest.raises(ArtifactCorrupt, match="extra.txt: file listed in the manifest is missing"):
        store.get(a.digest)


def test_a_symlink_inside_an_artifact_is_refused(tmp_path):
    store = Store(tmp_path)
    a = publish(store, "k1", b"abc")
    (a.path / "link").symlink_to("/etc/passwd")
    with pytest.raises(ArtifactCorrupt, match="links and special files"):
        store.get(a.digest)


def test_recipe_pointing_at_another_artifact_is_refused(tmp_path):
    store = Store(tmp_path)
    fp32 = publish(store, "fp32", b"float")
    int8 = publish(store, "int8", b"quantized")
    (tmp_path / "recipes" / "fp32").write_text(int8.digest)  # an fp32 run must never reuse the int8 engine
    with pytest.raises(ArtifactCorrupt, match="which recipe int8 made, not this one"):
        store.lookup("fp32")
    (tmp_path / "recipes" / "fp32").write_text("not a digest")
    with pytest.raises(ArtifactCorrupt, match="does not hold an artifact digest"):
        store.lookup("fp32")
    assert fp32.digest != int8.digest


def test_recipe_whose_object_was_deleted_reruns(tmp_path):
    import shutil

    store = Store(tmp_path)
    a = publish(store, "k1", b"abc")
    shutil.rmtree(a.path)
    assert store.lookup("k1") is None


def test_recipe_key_is_canonical():
    a = recipe_key("s", 1, {"model": "d"}, {"b": [1.0, 2], "a": {3, 1}}, {})
    b = recipe_key("s", 1, {"model": "d"}, {"a": {1, 3}, "b": [1, 2.0]}, {})
    assert a == b
    assert a != recipe_key("s", 2, {"model": "d"}, {"a": {1, 3}, "b": [1, 2]}, {})


HOLD = """
import sys, time
from deploykit.store.artifacts import Store
store = Store(sys.argv[1])
with store.staging("build") as tmp:
    (tmp / "half").write_bytes(b"x")
    print(tmp, flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(store: Path, seconds: float, prefix: tuple[str, ...] = ()) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-c", HOLD, str(store), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return proc, Path(proc.stdout.readline().strip())


def test_a_live_writers_temporaries_survive_and_a_killed_ones_are_removed(tmp_path):
    proc, staging = _holder(tmp_path, 60)
    try:
        assert staging.is_dir()
        Store(tmp_path)  # another store opened while the writer lives: its folder stays
        assert staging.is_dir()
    finally:
        proc.kill()
        proc.wait()
    Store(tmp_path)
    assert not staging.parent.exists()


def test_cleanup_ignores_pids(tmp_path):
    """A folder named with a dead pid but held by a live lock stays; a free one goes at once."""
    Store(tmp_path)
    legacy = tmp_path / "tmp" / "build-999999-abcd1234"  # the old PID-named layout: only age removes it
    legacy.mkdir()
    clean_stale(tmp_path / "tmp")
    assert legacy.exists()
    clean_stale(tmp_path / "tmp", now=time.time() + GRACE_S + 1)
    assert not legacy.exists()


def _unshare_works() -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs root and `unshare -p` (PID namespaces)")
def test_writers_in_two_pid_namespaces_share_a_workdir(tmp_path):
    # The writer runs as pid 1 of its own namespace; here pid 1 is alive and its pid means nothing.
    proc, staging = _holder(tmp_path, 60, prefix=("unshare", "-p", "-f", "--kill-child", "--mount-proc"))
    try:
        assert staging.is_dir()
        code = subprocess.run(
            [
                "unshare",
                "-p",
                "-f",
                "--mount-proc",
                sys.executable,
                "-c",
                f"from deploykit.store.artifacts import Store; Store({str(tmp_path)!r})",
            ],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        ).returncode
        assert code == 0
        assert staging.is_dir()  # the other namespace's cleanup left it alone
    finally:
        proc.kill()  # --kill-child: the writer (pid 1 there) dies with it
        proc.wait()
    deadline = time.time() + 10
    while staging.parent.exists() and time.time() < deadline:
        Store(tmp_path)  # the lock is free once the kernel has reaped the namespace
        time.sleep(0.1)
    assert not staging.parent.exists()


def test_verify_names_every_problem_and_gc_keeps_what_is_referenced(tmp_path):
    store = Store(tmp_path)
    parent = publish(store, "p", b"parent")
    child = publish(store, "c", b"child", parents={"model": parent.digest})
    (tmp_path / "recipes" / "p").unlink()  # the parent is still needed: the child names it
    orphan = publish(store, "o", b"orphan")
    (tmp_path / "recipes" / "o").unlink()
    store.name_run("r", {"model": child.digest})
    assert verify(store).ok
    (tmp_path / "recipes" / "gone").write_text("0" * 64)
    (orphan.path / "model.onnx").write_bytes(b"edited")
    report = verify(store)
    assert len(report.problems) == 2 and any("recipes/gone" in p for p in report.problems)
    store.close()
    with Store(tmp_path) as store:
        out = gc(store)
    assert out.removed_objects == [orphan.digest] and out.removed_recipes == ["gone"]
    with Store(tmp_path) as store:
        assert verify(store).ok
        assert {a.digest for a in store.list()} == {parent.digest, child.digest}


def test_gc_refuses_while_another_process_has_the_store_open(tmp_path):
    proc, _ = _holder(tmp_path, 60)
    try:
        with Store(tmp_path) as store, pytest.raises(WorkdirError, match="another deploykit process"):
            gc(store)
    finally:
        proc.kill()
        proc.wait()


def _make_read_only(path: Path) -> None:
    if os.geteuid() != 0:
        path.chmod(0o555)
        return
    # root ignores permission bits: use the immutable attribute where the filesystem has it.
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root and chattr +i is not available: cannot make a read-only folder")


def test_read_only_workdir_is_a_clear_environment_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    _make_read_only(ro)
    try:
        with pytest.raises(WorkdirError, match="not writable") as e:
            Store(ro / "store")
        assert e.value.exit_code == 3
    finally:
        subprocess.run(["chattr", "-i", str(ro)], capture_output=True)
        ro.chmod(0o755)


def test_a_workdir_not_laid_out_as_a_store_is_named(tmp_path):
    (tmp_path / "lock").mkdir()
    with pytest.raises(WorkdirError, match="lock: is not a regular file"):
        Store(tmp_path)


def test_concurrent_runs_share_one_temporary_folder_until_the_last_ends(tmp_path):
    import tempfile

    before = tempfile.gettempdir()
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    with a.tempdir() as first:
        with b.tempdir() as second:  # another run in this process (a thread, say): the same folder
            assert first == second and tempfile.gettempdir() == str(first) == os.environ["TMPDIR"]
            (first / "quantizer-temp").write_text("x")
        assert tempfile.gettempdir() == str(first) and (first / "quantizer-temp").exists()  # a is still running
    assert tempfile.gettempdir() == before and not first.exists()
