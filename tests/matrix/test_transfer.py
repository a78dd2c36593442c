"""Artifacts and model files between stores that share no folder: verified on arrival, same keys."""

from __future__ import annotations

import copy

import pytest

import deploykit
from deploykit.config import load_config
from deploykit.errors import ArtifactCorrupt
from deploykit.matrix.bundle import bundle_model, materialize
from deploykit.matrix.transfer import pack, unpack
from deploykit.store.artifacts import Store
from tests.matrix.helpers import write_model


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("converted")
    config = write_model(root / "model", "net", seed=11)
    result = deploykit.convert(config, workdir=root / "store")
    return config, result


def test_a_package_lands_in_another_store_with_the_same_digests_and_recipes(converted, tmp_path):
    config, result = converted
    digests = [r.artifact.digest for r in result.stages]
    package = pack(Store(result.workdir), digests)
    other = Store(tmp_path / "other")
    landed = unpack(other, package)
    assert [a.digest for a in landed] == digests
    for record in result.stages:  # the receiving pipeline finds each artifact by its recipe key
        assert other.lookup(record.artifact.manifest.recipe_key).digest == record.artifact.digest
    again = deploykit.convert(config, workdir=tmp_path / "other")  # nothing left to run there
    assert {r.status for r in again.stages} == {"reused"}


def test_altered_bytes_never_land(converted, tmp_path):
    _, result = converted
    engine = result.artifacts["engine"]
    package = pack(Store(result.workdir), [engine.digest])
    name = next(iter(package[engine.digest]["files"]))
    bad = copy.deepcopy(package)
    data = bytearray(bad[engine.digest]["files"][name])
    data[len(data) // 2] ^= 0xFF
    bad[engine.digest]["files"][name] = bytes(data)
    other = Store(tmp_path / "other")
    with pytest.raises(ArtifactCorrupt, match=f"{name} of artifact {engine.digest[:12]} arrived with sha256"):
        unpack(other, bad, origin="test")
    assert other.lookup(engine.manifest.recipe_key) is None and other.list() == []
    missing = copy.deepcopy(package)
    del missing[engine.digest]["files"][name]
    with pytest.raises(ArtifactCorrupt, match="arrived without the files its manifest lists"):
        unpack(other, missing)
    escape = copy.deepcopy(package)
    escape[engine.digest]["files"]["../../evil"] = b"x"
    with pytest.raises(ArtifactCorrupt, match="names a file outside its folder"):
        unpack(other, escape)


def test_a_bundle_carries_every_file_the_config_names_and_keys_stay_equal(tmp_path):
    config = write_model(tmp_path / "src" / "model", "net", seed=12)
    data = tmp_path / "src" / "shared-data"  # a data folder outside the config's folder
    (config.parent / "calib").rename(data)
    config.write_text(config.read_text().replace("files: calib", "files: ../shared-data"))
    (config.parent / ".hidden").write_text("never carried")
    cfg = load_config(config, {"quantize.precision": "int8"})
    bundle = bundle_model(config, cfg)
    assert bundle.config == "model/deploykit.yaml"
    assert "model/model.onnx" in bundle.files and "model/.hidden" not in bundle.files
    assert sum(k.startswith("shared-data/") for k in bundle.files) == 12
    placed = materialize(bundle, tmp_path / "node" / "bundles")
    assert materialize(bundle, tmp_path / "node" / "bundles") == placed  # once per node
    there = load_config(placed, {"quantize.precision": "int8"})
    from deploykit.matrix.plan import shared_chain

    assert shared_chain(cfg, Store(tmp_path / "a")) == shared_chain(
        there, Store(tmp_path / "b")
    )  # paths never enter keys
