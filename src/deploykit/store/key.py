"""The keyed store: who wrote an artifact, not only whether it is consistent.

Digests prove a store consistent; anyone who can write it can recompute them. With
``DEPLOYKIT_STORE_KEY`` set (a CI secret), every manifest and run record the store writes gets a
keyed MAC (HMAC-SHA256) in a file beside it: ``objects/<digest>/manifest.mac`` and
``records/<identity>.mac``. Reads check it: an artifact without a valid MAC is re-made when a
recipe would reuse it (never trusted), and is an error (exit 4) anywhere else; a run record without
one is refused. Without the key nothing is checked: the store is as trusted as whoever can write it.

Each MAC covers a domain tag and the file's name as well as its bytes, so a record's MAC cannot
stand in for a manifest's, nor one record's for another's.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from deploykit.errors import Untrusted, UsageError

ENV = "DEPLOYKIT_STORE_KEY"
MANIFEST_MAC = "manifest.mac"  # beside manifest.json in an object folder, not listed in it
RECORD_MAC = ".mac"  # records/<identity>.mac beside records/<identity>.json
MIN_KEY_BYTES = 16
_MAC_BYTES = 64  # hex sha256


def store_key() -> bytes | None:
    """The key in ``DEPLOYKIT_STORE_KEY``, or None when it is unset or empty (an unkeyed store)."""
    text = os.environ.get(ENV, "")
    if not text:
        return None
    key = text.encode()
    if len(key) < MIN_KEY_BYTES:
        raise UsageError(
            f"{ENV} is {len(key)} bytes long; a store key needs at least {MIN_KEY_BYTES}",
            hint=f"set {ENV} to a secret of 32 random bytes or more, e.g. `openssl rand -hex 32`",
        )
    return key


def mac(key: bytes, domain: str, name: str, data: bytes) -> str:
    """The hex HMAC-SHA256 of ``data`` as the ``domain`` file ``name``."""
    return hmac.new(key, f"deploykit {domain}\0{name}\0".encode() + data, hashlib.sha256).hexdigest()


def check(key: bytes, domain: str, subject: Path, data: bytes, mac_path: Path) -> None:
    """Raise :class:`Untrusted` naming ``subject`` unless ``mac_path`` holds the MAC of ``data``."""
    try:
        if mac_path.is_symlink() or not mac_path.is_file():
            raise FileNotFoundError(mac_path)
        with open(mac_path, "rb") as f:
            stored = f.read(_MAC_BYTES + 2).strip()
    except OSError:
        raise Untrusted(
            f"{subject}: no MAC for this store's key ({ENV}): {mac_path.name} is missing, so it was "
            "written without the key",
            hint=_HINT,
        ) from None
    if not hmac.compare_digest(stored, mac(key, domain, subject.name, data).encode()):
        raise Untrusted(
            f"{subject}: its MAC ({mac_path.name}) does not match for this store's key ({ENV}): "
            "forged, or written with another key",
            hint=_HINT,
        )


_HINT = "deploykit never trusts it: a run re-makes such an artifact; delete what is named, or rerun with the key set"


__all__ = ["ENV", "MANIFEST_MAC", "MIN_KEY_BYTES", "RECORD_MAC", "check", "mac", "store_key"]
