"""``deploykit doctor``: every probe becomes a row, and GPU execution providers are checked for real use."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from deploykit.backends import trt_plugins
from deploykit.backends.trt_cuda import DriverProbe, Gpu
from deploykit.cli import doctor

NO_DRIVER = DriverProbe("no CUDA driver (libcuda.so.1 cannot be loaded: not found); install the NVIDIA driver")
ONE_GPU = DriverProbe("", "12.8", [Gpu(0, "NVIDIA L4", "8.9", 24 * 2**30)])


def rows(report: doctor.Report) -> dict[str, doctor.Row]:
    return {r.component: r for r in report.rows}


def test_doctor_runs_here_and_serializes(tmp_path: Path) -> None:
    report = doctor.collect(cwd=tmp_path)
    by_name = rows(report)
    for component in ("python", "onnx", "onnxruntime", "TensorRT", "cuda-python", "CUDA driver"):
        assert component in by_name
    assert all(r.status in ("ok", "missing", "warn") for r in report.rows)
    data = json.loads(report.to_json())
    assert data["ok"] == report.ok and {"component", "status", "detail"} == set(data["rows"][0])


def test_gpu_providers_without_a_driver_are_listed_but_unusable() -> None:
    status, detail = doctor.provider_usability("CUDAExecutionProvider", NO_DRIVER)
    assert status == "warn" and detail.startswith("listed by onnxruntime but unusable: no CUDA driver")
    assert doctor.provider_usability("CPUExecutionProvider", NO_DRIVER) == ("ok", "usable")


def test_tensorrt_provider_needs_tensorrt_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_version", lambda dist: "")
    status, detail = doctor.provider_usability("TensorrtExecutionProvider", ONE_GPU)
    assert status == "warn" and "TensorRT is not installed" in detail


def test_onnxruntime_rows_report_each_provider(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import onnxruntime

    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    by_name = rows(doctor.collect(cwd=tmp_path, probe=lambda: NO_DRIVER))
    assert by_name["onnxruntime CUDAExecutionProvider"].status == "warn"
    assert by_name["onnxruntime CPUExecutionProvider"].status == "ok"


def test_tensorrt_row_says_why_it_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    row = rows(doctor.collect(cwd=tmp_path, probe=lambda: NO_DRIVER))["TensorRT"]
    assert row.status == "missing" and "TensorRT is not importable" in row.detail


def test_tensorrt_row_with_an_old_version_warns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", type("FakeTensorRTModule", (), {"__version__": "8.6.1"})())
    row = rows(doctor.collect(cwd=tmp_path, probe=lambda: NO_DRIVER))["TensorRT"]
    assert row.status == "warn" and "8.6.1 is too old" in row.detail


def test_driver_and_gpu_rows(tmp_path: Path) -> None:
    by_name = rows(doctor.collect(cwd=tmp_path, probe=lambda: ONE_GPU))
    assert by_name["CUDA driver"].status == "ok" and by_name["CUDA driver"].detail.startswith("12.8")
    assert by_name["GPU 0"].detail.startswith("NVIDIA L4, compute capability 8.9, 24.0 GiB")
    assert rows(doctor.collect(cwd=tmp_path, probe=lambda: NO_DRIVER))["CUDA driver"].status == "missing"


def test_a_failing_probe_becomes_a_row(tmp_path: Path) -> None:
    def broken() -> DriverProbe:
        raise RuntimeError("driver exploded")

    report = doctor.collect(cwd=tmp_path, probe=broken)
    assert rows(report)["CUDA driver"] == doctor.Row(
        "CUDA driver", "warn", "probe failed: RuntimeError: driver exploded"
    )


def test_plugin_rows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    found = tmp_path / "build" / "plugins" / "libdeploykit_plugins.so"
    by_name = rows(doctor.collect(["extra/libmine.so"], cwd=tmp_path, probe=lambda: NO_DRIVER))
    assert by_name["plugin libdeploykit_plugins.so"].status == "missing"
    assert by_name["plugin libmine.so"].status == "warn"  # asked for explicitly, and absent
    found.parent.mkdir(parents=True)
    found.write_bytes(b"\x7fELF")
    row = rows(doctor.collect(cwd=tmp_path, probe=lambda: NO_DRIVER))["plugin libdeploykit_plugins.so"]
    assert row.status == "ok" and "cannot be listed here: TensorRT is not importable" in row.detail


def test_plugin_row_lists_registered_creators(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent / "backends"))
    try:
        from trt_double import Creator, FakeTensorRT  # the recording TEST DOUBLE of tensorrt, not TensorRT
    finally:
        sys.path.pop(0)
    fake = FakeTensorRT()
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    real_load = trt_plugins.load_libraries

    def load(trt, paths):  # "opening" the library registers one creator in the fake registry
        def opener(path: str) -> object:
            fake.registry.all_creators.append(Creator("bev_pool_v2", "1", "deploykit"))
            return object()

        return real_load(trt, paths, opener=opener)

    monkeypatch.setattr(trt_plugins, "load_libraries", load)
    lib = tmp_path / "build" / "plugins" / "libdeploykit_plugins.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    row = rows(doctor.collect(cwd=tmp_path, probe=lambda: ONE_GPU))["plugin libdeploykit_plugins.so"]
    assert row.status == "ok" and row.detail.endswith("registers 1 plugin(s): bev_pool_v2 v1 (deploykit)")


def test_doctor_command_prints_a_table_and_json() -> None:
    import json

    from tests.conftest import run_cli

    code, out, _ = run_cli("doctor")
    assert code == 0 and "onnxruntime" in out and "TensorRT" in out
    code, out, _ = run_cli("doctor", "--json")
    components = {row["component"] for row in json.loads(out)["rows"]}
    assert {"python", "onnxruntime", "TensorRT", "backend tensorrt"} <= components


def test_cuda_versions_row_names_driver_tensorrt_and_cuda_python(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from deploykit.backends import trt_compat

    monkeypatch.setattr(trt_compat, "tensorrt_cuda_flavour", lambda: "cu13")
    monkeypatch.setattr(trt_compat, "cuda_python_version", lambda: "13.0.1")
    row = rows(doctor.collect(cwd=tmp_path, probe=lambda: ONE_GPU))["CUDA versions"]
    assert row.status == "warn" and "supports CUDA up to 12.8" in row.detail and "tensorrt-cu12" in row.detail
    monkeypatch.setattr(trt_compat, "tensorrt_cuda_flavour", lambda: "cu12")
    monkeypatch.setattr(trt_compat, "cuda_python_version", lambda: "12.9.0")
    row = rows(doctor.collect(cwd=tmp_path, probe=lambda: ONE_GPU))["CUDA versions"]
    assert row == doctor.Row(
        "CUDA versions", "ok", "driver supports CUDA 12.8; TensorRT wheel cu12; cuda-python 12.9.0"
    )
    monkeypatch.setattr(trt_compat, "cuda_python_version", lambda: "13.0.1")
    row = rows(doctor.collect(cwd=tmp_path, probe=lambda: DriverProbe("", "13.0", ONE_GPU.gpus)))["CUDA versions"]
    assert row.status == "warn" and "different CUDA majors" in row.detail
    assert "CUDA versions" not in rows(doctor.collect(cwd=tmp_path, probe=lambda: NO_DRIVER))
