"""Leave ``deploykit.metrics.divergence`` out of the package namespace after each test.

The repair loop imports ``deploykit.metrics.divergence``, which sets the package attribute; the parity
tests replace ``sys.modules["deploykit.metrics.divergence"]`` and rely on
``from deploykit.metrics import divergence as diagnose`` finding their replacement, which a leftover
attribute shadows. (The module stays in ``sys.modules``.)
"""

from __future__ import annotations

import pytest

import deploykit


@pytest.fixture(autouse=True)
def _no_diagnose_attribute_left_behind():
    yield
    vars(deploykit).pop("diagnose", None)
