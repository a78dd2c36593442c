"""The keyed store (DEPLOYKIT_STORE_KEY): MACs written with every manifest and record, checked on
every read; an artifact without one is re-made where a recipe would reuse it."""

from __future__ import annotations

import pytest

from deploykit.errors import ArtifactCorrupt, Untrusted, UsageError
from deploykit.store import key as storekey
from deploykit.store.artifacts import MANIFEST, Store
from deploykit.store.check import verify
from tests.test_artifacts import publish

KEY = "unit-test-key-0123456789abcdef"


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(storekey.ENV, KEY)


def test_the_mac_depends_on_key_domain_name_and_bytes():
    base = storekey.mac(b"k" * 16, "manifest", "manifest.json", b"data")
    others = [
        storekey.mac(b"j" * 16, "manifest", "manifest.json", b"data"),
        storekey.mac(b"k" * 16, "run record", "manifest.json", b"data"),
        storekey.mac(b"k" * 16, "manifest", "x.json", b"data"),
        storekey.mac(b"k" * 16, "manifest", "manifest.json", b"datb"),
    ]
    assert len({base, *others}) == 5 and len(base) == 64


def test_a_short_key_is_a_usage_error(monkeypatch, tmp_path):
    monkeypatch.setenv(storekey.ENV, "short")
    with pytest.raises(UsageError, match="DEPLOYKIT_STORE_KEY is 5 bytes"):
        Store(tmp_path)
    monkeypatch.setenv(storekey.ENV, "")
    assert storekey.store_key() is None  # empty is unset: the unkeyed store


def test_a_keyed_store_writes_and_checks_a_mac(keyed, tmp_path):
    with Store(tmp_path) as store:
        a = publish(store, "k1", b"abc")
        assert (a.path / storekey.MANIFEST_MAC).is_file()
        assert storekey.MANIFEST_MAC not in a.manifest.files
        assert store.lookup("k1").digest == a.digest
        (a.path / storekey.MANIFEST_MAC).write_text("0" * 64)
        with pytest.raises(Untrusted, match="does not match"):
            store.get(a.digest)
        assert store.lookup("k1") is None  # re-made, never trusted
        assert any("does not match" in p for p in verify(store).problems)


def test_a_keyed_publish_replaces_an_untrusted_object_of_the_same_content(keyed, monkeypatch, tmp_path):
    monkeypatch.delenv(storekey.ENV)
    with Store(tmp_path) as store:
        unkeyed = publish(store, "k1", b"abc")
    assert not (unkeyed.path / storekey.MANIFEST_MAC).exists()
    monkeypatch.setenv(storekey.ENV, KEY)
    with Store(tmp_path) as store:
        with pytest.raises(Untrusted, match="manifest.mac is missing"):
            store.get(unkeyed.digest)
        assert store.lookup("k1") is None
        again = publish(store, "k1", b"abc")
        assert again.digest == unkeyed.digest and (again.path / storekey.MANIFEST_MAC).is_file()
        assert verify(store).ok


def test_an_unkeyed_store_reads_a_keyed_one(keyed, monkeypatch, tmp_path):
    with Store(tmp_path) as store:
        a = publish(store, "k1", b"abc")
    monkeypatch.delenv(storekey.ENV)
    with Store(tmp_path) as store:
        assert store.lookup("k1").digest == a.digest  # the MAC file is tolerated, not checked
        assert verify(store).ok


def test_another_key_trusts_nothing(keyed, monkeypatch, tmp_path):
    with Store(tmp_path) as store:
        a = publish(store, "k1", b"abc")
    monkeypatch.setenv(storekey.ENV, KEY + "-other")
    with Store(tmp_path) as store:
        assert store.lookup("k1") is None
        with pytest.raises(ArtifactCorrupt, match=str(a.path / MANIFEST)):
            store.manifest(a.digest)


def test_a_keyed_record_is_refused_without_its_mac(keyed, tmp_path):
    from deploykit.record import model as records

    rec = records.RunRecord("m", "fp32", "onnxruntime", "")
    with Store(tmp_path) as store:
        path = records.write(store, rec)
    assert records.read(path) == rec
    path.with_suffix(storekey.RECORD_MAC).unlink()
    with pytest.raises(Untrusted, match="no MAC"):
        records.read(path)
    assert records.stored(tmp_path, rec.identity) is None  # the next run replaces it
