"""Each enumerated value is defined once (deploykit.choices): config validation, CLI help and
dispatch tables are derived from it, so adding a value in one place cannot leave another behind."""

import typing

import pytest

from deploykit import choices
from deploykit.config import BuildConfig, ExportConfig, QuantizeConfig, Target, load_config
from deploykit.errors import ConfigError
from tests.conftest import TINY_CONFIG, run_cli


def test_config_fields_are_typed_by_the_one_definition():
    hints = {**typing.get_type_hints(QuantizeConfig), **typing.get_type_hints(BuildConfig)}
    assert hints["precision"] == choices.Precision and hints["method"] == choices.Method
    assert hints["target"] == choices.QuantizeTarget and hints["provider"] == choices.Provider
    assert hints["optimization_level"] == choices.OptimizationLevel
    assert typing.get_type_hints(ExportConfig)["exporter"] == choices.Exporter
    assert typing.get_type_hints(Target)["precision"] == choices.TargetPrecision
    assert choices.values(choices.QuantizeTarget) == ("auto", *choices.values(choices.Flavour))
    assert choices.values(choices.Method) == ("auto", *choices.values(choices.CalibrationMethod), "per_tensor")
    assert typing.get_type_hints(QuantizeConfig)["equalize_hardswish"] == choices.EqualizeHardSwish


def test_dispatch_tables_cover_every_value():
    from deploykit.graph import run
    from deploykit.quant.flavours import flavour_for
    from deploykit.quant.ranges import AUTO_METHODS, NO_HISTOGRAM, SEARCHES

    assert set(SEARCHES) == set(choices.values(choices.CalibrationMethod)) - set(NO_HISTOGRAM)
    assert set(AUTO_METHODS) <= set(choices.values(choices.CalibrationMethod))
    assert set(run.PROVIDERS) == set(choices.values(choices.Provider))
    assert set(run._LEVELS) == set(choices.values(choices.OptimizationLevel))
    evaluators = {flavour_for(f).evaluator for f in choices.values(choices.Flavour)}
    assert evaluators == set(choices.values(choices.Evaluator))


def test_a_bad_value_is_refused_with_the_valid_ones(tmp_path):
    path = tmp_path / "deploykit.yaml"
    path.write_text(TINY_CONFIG.replace("EXPORTER", "auto"))
    with pytest.raises(ConfigError) as e:
        load_config(path, {"quantize.method": "kl"})
    assert all(repr(m) in str(e.value) for m in choices.values(choices.Method))


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("quantize", choices.Method),
        ("quantize", choices.Flavour),
        ("convert", choices.Precision),
        ("build", choices.Provider),
    ],
)
def test_cli_help_lists_the_values(command, kind):
    code, out, _ = run_cli(command, "--help")
    assert code == 0
    assert all(v in out for v in choices.values(kind))


def test_the_readme_documents_every_value():
    from pathlib import Path

    row = next(
        line
        for line in (Path(__file__).parents[1] / "README.md").read_text().splitlines()
        if line.startswith("| `quantize` |")
    )
    for kind in (choices.Precision, choices.QuantizeTarget, choices.Method):
        missing = [v for v in choices.values(kind) if v not in row]
        assert not missing, f"README's quantize row lacks {missing}"
