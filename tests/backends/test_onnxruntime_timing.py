"""trtexec's --noDataTransfers on ONNX Runtime: honoured on the CPU (there is no device to copy to),
refused for a GPU provider (no I/O binding: every run copies its inputs), before anything runs.

The refusal reads only the configured provider's name, so no GPU provider has to start here: the
same exit 2 comes on a machine where CUDA works and on one where it does not."""

import pytest

import deploykit
from deploykit.backends import get_backend
from deploykit.config import BuildConfig
from deploykit.errors import ConfigError
from tests.conftest import run_cli
from tests.standins import gate_model


def test_only_a_gpu_provider_refuses_no_data_transfers():
    backend = get_backend("onnxruntime", require_available=False)
    assert "no_data_transfers" not in backend.timing_refusals(BuildConfig(provider="cpu"))
    for provider in ("cuda", "tensorrt"):
        refused = backend.timing_refusals(BuildConfig(provider=provider))
        assert refused["no_data_transfers"] == (
            f"the {provider} provider copies inputs to the device on every run (no I/O binding here)"
        )


@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_no_data_transfers_on_a_gpu_provider_exits_2_before_anything_runs(tmp_path, provider):
    model, store = gate_model(tmp_path), tmp_path / "store"
    code, out, err = run_cli(
        "gate", str(model), "-w", str(store), "--set", f"build.provider={provider}", "--noDataTransfers"
    )
    assert code == 2, err
    assert err.splitlines() == [
        "error: gate.data_transfers: false (--noDataTransfers): the onnxruntime backend cannot honour it: "
        f"the {provider} provider copies inputs to the device on every run (no I/O binding here)",
        "hint: drop --noDataTransfers, or time on a backend that can (--backend tensorrt on a GPU)",
    ]
    assert not (store / "objects").exists() or not list((store / "objects").iterdir())  # refused before export
    with pytest.raises(ConfigError) as e:
        deploykit.gate(model, workdir=store, build__provider=provider, gate__data_transfers=False, progress=False)
    assert e.value.message.startswith("gate.data_transfers: false (gate__data_transfers=False): the onnxruntime")
    assert "build__backend='tensorrt'" in e.value.hint and "--" not in str(e.value)
