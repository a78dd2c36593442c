"""A quantize flavour lives in three places (docs/architecture.md, 'Where to add'): its name in
``choices.Flavour``, the backends that can build its Q/DQ graph in ``choices.FLAVOUR_BACKENDS``, and its
module in ``quant/flavours.REGISTRY``. They must agree; where the backends are missing, a config load says
so (a bug in deploykit, exit 70) instead of a KeyError."""

import pytest

from deploykit import choices
from deploykit.choices import BackendName, Flavour, values
from deploykit.config import load_config
from deploykit.errors import InternalError
from deploykit.quant.flavours import REGISTRY
from tests.standins import gate_model


def test_every_flavour_is_in_all_three_places():
    flavours = set(values(Flavour))
    assert set(choices.FLAVOUR_BACKENDS) == flavours == set(REGISTRY)
    for flavour, backends in choices.FLAVOUR_BACKENDS.items():
        assert backends and set(backends) <= set(values(BackendName)), flavour


def test_a_flavour_missing_from_flavour_backends_fails_the_load_naming_the_table(tmp_path, monkeypatch):
    model = gate_model(tmp_path)
    int8 = {"quantize.precision": "int8", "build.backend": "onnxruntime"}
    assert load_config(model, int8).quantize.precision == "int8"  # loads with the table whole
    monkeypatch.delitem(choices.FLAVOUR_BACKENDS, "onnxruntime")  # as if a new flavour forgot its entry
    with pytest.raises(InternalError) as e:
        load_config(model, int8)
    assert e.value.message.startswith("quantize flavour 'onnxruntime' has no entry in choices.FLAVOUR_BACKENDS")
    assert "docs/architecture.md" in e.value.hint and e.value.exit_code == 70
