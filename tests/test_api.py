"""The Python API takes overrides as a mapping (what the CLI passes) or as ``a__b=value`` keywords."""

import pytest

from deploykit import api
from deploykit.errors import UsageError
from tests.conftest import TINY_CONFIG


def test_overrides_come_as_a_mapping_or_as_keywords(tmp_path):
    path = tmp_path / "deploykit.yaml"
    path.write_text(TINY_CONFIG.replace("EXPORTER", "auto"))
    merged = api.merged_overrides({"gate.iterations": 7}, {"gate__trials": 2, "build__tensorrt": {"refit": True}})
    assert merged == {"gate.trials": 2, "build.tensorrt": {"refit": True}, "gate.iterations": 7}
    cfg = api.resolve_config(path, merged)
    assert (cfg.gate.iterations, cfg.gate.trials, cfg.build.tensorrt.refit) == (7, 2, True)
    assert api.merged_overrides({"gate.trials": 2}, {"gate__trials": 2}) == {"gate.trials": 2}
    with pytest.raises(UsageError, match="'gate.trials' is given twice, as 3 and 2"):
        api.merged_overrides({"gate.trials": 2}, {"gate__trials": 3})
