import os
import subprocess
from pathlib import Path

import pytest

from deploykit.artifacts import Manifest, Store, recipe_key
from deploykit.errors import ArtifactCorrupt, WorkdirError


def manifest(key: str) -> Manifest:
    return Manifest(kind="onnx", stage="test", stage_version=1, recipe_key=key, config={}, parents={}, files={},
                    tools={}, device={}, timings={})


def publish(store: Store, key: str, content: bytes) -> object:
    with store.staging("test") as tmp:
        (tmp / "model.onnx").write_bytes(content)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "extra.txt").write_text("x")
        return store.publish(tmp, manifest(key))


def test_publish_is_content_addressed_and_found_by_recipe(tmp_path):
    store = Store(tmp_path)
    a = publish(store, "k1", b"abc")
    assert a.path == tmp_path / "objects" / a.digest
    assert set(a.manifest.files) == {"model.onnx", "sub/extra.txt"}
    assert store.lookup("k1").digest == a.digest
    assert store.lookup("k2") is None
    assert publish(store, "k1", b"abc").digest == a.digest  # same recipe, same bytes: the same artifact
    b = publish(store, "k2", b"abc")  # same bytes from another recipe: its own artifact and manifest
    assert b.digest != a.digest and b.manifest.recipe_key == "k2" and a.manifest.recipe_key == "k1"
    assert publish(store, "k3", b"abd").digest != a.digest
    assert list((tmp_path / "tmp").iterdir()) == []


def test_edited_file_is_an_error_not_a_rebuild(tmp_path):
    store = Store(tmp_path)
    a = publish(store, "k1", b"abc")
    (a.path / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(ArtifactCorrupt, match="model.onnx: content changed") as e:
        store.lookup("k1")
    assert str(a.path) in e.value.hint


def test_removed_file_and_edited_manifest_are_detected(tmp_path):
    store = Store(tmp_path)
    a = publish(store, "k1", b"abc")
    (a.path / "sub" / "extra.txt").unlink()
    with pytest.raises(ArtifactCorrupt):
        store.get(a.digest)


def test_recipe_key_is_canonical():
    a = recipe_key("s", 1, {"model": "d"}, {"b": [1.0, 2], "a": {3, 1}}, {})
    b = recipe_key("s", 1, {"model": "d"}, {"a": {1, 3}, "b": [1, 2.0]}, {})
    assert a == b
    assert a != recipe_key("s", 2, {"model": "d"}, {"a": {1, 3}, "b": [1, 2]}, {})


def test_stale_staging_folders_of_dead_processes_are_removed(tmp_path):
    Store(tmp_path)
    proc = subprocess.Popen(["true"])
    proc.wait()
    stale = tmp_path / "tmp" / f"build-{proc.pid}-abcd1234"
    stale.mkdir()
    (stale / "model.onnx").write_bytes(b"half")
    live = tmp_path / "tmp" / f"build-{os.getpid()}-abcd1234"
    live.mkdir()
    Store(tmp_path)
    assert not stale.exists() and live.exists()


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
