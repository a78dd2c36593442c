"""Tests of the TensorRT backend.

Without TensorRT (CI, CPU machines) these check deploykit's own logic: availability reasons, profile
validation, the recipe-key fingerprint, inspector-JSON parsing, engine compatibility, and the
translation of config -> TensorRT calls through ``FakeTensorRT``, a recording TEST DOUBLE (see
``trt_double.py``). A double-backed test proves nothing about TensorRT itself. Tests marked
``tensorrt`` build and run real engines and skip with a reason where TensorRT or a GPU is missing.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from deploykit.backends import get_backend, trt_compat, trt_cuda, trt_plugins
from deploykit.backends.base import profiles_from_config
from deploykit.backends.profiles import validate_profiles
from deploykit.backends.tensorrt import (
    TensorRTBackend,
    build_fingerprint_from,
    plugin_digests,
    timing_cache_key,
)
from deploykit.backends.trt_compat import EngineIncompatible, check_engine_compatible
from deploykit.backends.trt_inspect import parse_inspector, summarize
from deploykit.backends.trt_session import TensorRTSession
from deploykit.config import BuildConfig, Config, Dim, InputSpec, Source, TensorRTOptions
from deploykit.errors import (
    ArtifactCorrupt,
    BackendUnavailable,
    ConfigError,
    DataError,
    EnvironmentProblem,
    InvalidInput,
    ModelError,
    UsageError,
)
from deploykit.store.hashing import digest_value

try:
    from .trt_double import Creator, FakeGpu, FakeTensorRT, Scenario
except ImportError:  # pytest's default (rootdir-relative) import mode: tests/ is not a package
    from trt_double import Creator, FakeGpu, FakeTensorRT, Scenario

REPO = Path(__file__).resolve().parents[2]
BACKENDS = REPO / "src" / "deploykit" / "backends"


# -- helpers -------------------------------------------------------------------------------------


def tiny_onnx(path: Path, *, extra_node: tuple[str, str] | None = None) -> Path:
    """y = 2 * x with a dynamic batch; ``extra_node`` = (op_type, domain) appends a node TensorRT may reject."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Mul", ["x", "two"], ["y"], name="double")]
    opsets = [helper.make_opsetid("", 17)]
    out = "y"
    if extra_node:
        op, domain = extra_node
        nodes.append(helper.make_node(op, ["y"], ["z"], name="post", domain=domain))
        opsets.append(helper.make_opsetid(domain, 1)) if domain else None
        out = "z"
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


PROFILES = {"x": ((1, 3, 8, 8), (4, 3, 8, 8), (8, 3, 8, 8))}


def use_double(
    monkeypatch: pytest.MonkeyPatch, scenario: Scenario | None = None, *, gpu: FakeGpu | None = None
) -> FakeTensorRT:
    """Make the backend see FakeTensorRT (a test double), a fake GPU and the fake CUDA runtime."""
    fake = FakeTensorRT(scenario)
    monkeypatch.setattr(trt_compat, "import_tensorrt", lambda: (fake, ""))
    monkeypatch.setattr(trt_cuda, "probe_driver", lambda: trt_cuda.DriverProbe("", "12.8", [gpu or FakeGpu()]))
    monkeypatch.setattr(trt_cuda, "import_cudart", lambda: (fake.cudart, ""))
    return fake


def build_with_double(tmp_path: Path, fake: FakeTensorRT, **tensorrt_options: object) -> dict:
    options = BuildConfig(backend="tensorrt", tensorrt=TensorRTOptions(**tensorrt_options))
    onnx_path = tiny_onnx(tmp_path / "model.onnx")
    return TensorRTBackend().build(
        onnx_path, options, tmp_path / "engine", profiles=PROFILES, timing_cache_out=tmp_path / "timing.cache"
    )


class FakeLibcuda:
    """A stand-in for libcuda.so.1 as seen through ctypes (the driver API writes through pointers)."""

    def __init__(self, init_rc: int = 0, count: int = 1) -> None:
        self.init_rc, self.count = init_rc, count

    def cuInit(self, flags):  # noqa: N802 - the driver API's names
        return self.init_rc

    def cuDriverGetVersion(self, out):  # noqa: N802
        out._obj.value = 12080
        return 0

    def cuDeviceGetCount(self, out):  # noqa: N802
        out._obj.value = self.count
        return 0

    def cuDeviceGet(self, out, ordinal):  # noqa: N802
        out._obj.value = ordinal
        return 0

    def cuDeviceGetName(self, buf, size, device):  # noqa: N802
        buf.value = b"NVIDIA Test GPU"
        return 0

    def cuDeviceGetAttribute(self, out, attribute, device):  # noqa: N802
        out._obj.value = {75: 8, 76: 6}[attribute]
        return 0

    def cuDeviceTotalMem_v2(self, out, device):  # noqa: N802
        out._obj.value = 16 * 2**30
        return 0

    def cuGetErrorName(self, rc, out):  # noqa: N802
        out._obj.value = b"CUDA_ERROR_FAKE"
        return 0


# -- availability ----------------------------------------------------------------------------------


def test_import_of_backend_and_doctor_does_not_import_tensorrt_or_cuda() -> None:
    code = (
        "import sys, deploykit.backends.tensorrt, deploykit.cli.doctor; "
        "bad = [m for m in ('tensorrt', 'cuda') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_availability_says_tensorrt_is_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import now fails as if it were not installed
    status = TensorRTBackend().availability()
    assert not status.available
    assert "TensorRT is not importable" in status.reason and "deploykit[tensorrt]" in status.reason


def test_availability_refuses_tensorrt_older_than_10_12(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTensorRT(Scenario(version="10.3.0.26")))
    status = TensorRTBackend().availability()
    assert not status.available and "10.3.0.26 is too old" in status.reason and status.version == "10.3.0.26"


@pytest.mark.parametrize(
    ("libcuda", "expected"),
    [
        (None, "no CUDA driver"),
        (FakeLibcuda(init_rc=100), "no NVIDIA GPU visible"),
        (FakeLibcuda(count=0), "device count is 0"),
        (FakeLibcuda(init_rc=999), "failed to initialise (cuInit: CUDA_ERROR_FAKE (999))"),
    ],
)
def test_availability_names_the_missing_driver_or_gpu(monkeypatch: pytest.MonkeyPatch, libcuda, expected) -> None:
    def load(name: str):
        if libcuda is None:
            raise OSError(f"{name}: cannot open shared object file")
        return libcuda

    monkeypatch.setitem(sys.modules, "tensorrt", FakeTensorRT())
    real_probe = trt_cuda.probe_driver
    monkeypatch.setattr(trt_cuda, "probe_driver", lambda: real_probe(load=load))
    status = TensorRTBackend().availability()
    assert not status.available and expected in status.reason


def test_availability_needs_cuda_python(monkeypatch: pytest.MonkeyPatch) -> None:
    use_double(monkeypatch)
    monkeypatch.setattr(trt_cuda, "import_cudart", lambda: (None, "cuda-python is not importable (x)"))
    status = TensorRTBackend().availability()
    assert not status.available and "cuda-python" in status.reason


def test_availability_ok_with_everything_present(monkeypatch: pytest.MonkeyPatch) -> None:
    use_double(monkeypatch)
    assert TensorRTBackend().availability().available


@pytest.mark.parametrize(
    ("driver", "flavour", "cuda_python", "expected"),
    [
        ("12.8", "cu12", "12.9.0", ""),
        ("13.0", "cu12", "12.9.0", ""),  # a newer driver runs older CUDA majors
        ("13.1", "cu13", "13.0.1", ""),
        ("12.8", "cu13", "12.9.0", "TensorRT cannot start on this driver"),
        ("12.8", "cu12", "13.0.1", "cuda-python cannot start on this driver"),
        ("12.2", "cu13", "13.0.1", "TensorRT, cuda-python cannot start"),
    ],
)
def test_cuda_version_problem_names_the_three_versions(driver, flavour, cuda_python, expected) -> None:
    problem = trt_compat.cuda_version_problem(driver, flavour, cuda_python)
    if not expected:
        assert problem == ""
        return
    assert expected in problem and f"supports CUDA up to {driver}" in problem
    assert f"({flavour})" in problem and f"cuda-python {cuda_python}" in problem
    assert "R580" in problem and "pip install tensorrt-cu12" in problem


def test_availability_refuses_a_driver_older_than_the_wheels_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    use_double(monkeypatch)  # the fake driver supports CUDA 12.8
    monkeypatch.setattr(trt_compat, "tensorrt_cuda_flavour", lambda: "cu13")
    monkeypatch.setattr(trt_compat, "cuda_python_version", lambda: "13.0.1")
    status = TensorRTBackend().availability()
    assert not status.available and "supports CUDA up to 12.8" in status.reason and "cu13" in status.reason
    with pytest.raises(BackendUnavailable, match="update the driver to R580"):
        TensorRTBackend().build(Path("absent.onnx"), BuildConfig(backend="tensorrt"), Path("out"))


def test_probe_driver_reads_version_and_gpus() -> None:
    probe = trt_cuda.probe_driver(load=lambda name: FakeLibcuda())
    assert probe.problem == "" and probe.driver_version == "12.8"
    assert probe.gpus == [trt_cuda.Gpu(0, "NVIDIA Test GPU", "8.6", 16 * 2**30)]


def test_get_backend_exits_3_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(BackendUnavailable) as info:
        get_backend("tensorrt")
    assert info.value.exit_code == 3 and "TensorRT is not importable" in str(info.value)


def test_build_raises_backend_unavailable_before_anything_else(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(BackendUnavailable):
        TensorRTBackend().build(tmp_path / "absent.onnx", BuildConfig(backend="tensorrt"), tmp_path / "out")


# -- optimization profiles -------------------------------------------------------------------------


def test_profiles_from_config_uses_dims() -> None:
    cfg = Config(
        name="m",
        source=Source(onnx="m.onnx"),
        inputs=(InputSpec("x", ("batch", 3, 8, 8)),),
        dims={"batch": Dim(1, 4, 16)},
    )
    assert profiles_from_config(cfg) == {"x": ((1, 3, 8, 8), (4, 3, 8, 8), (16, 3, 8, 8))}


def test_profile_validation_accepts_a_good_profile() -> None:
    assert validate_profiles(PROFILES, {"x": ["batch", 3, 8, 8]}, "m.onnx") == PROFILES


@pytest.mark.parametrize(
    ("profiles", "message"),
    [
        ({"images": PROFILES["x"]}, "names input 'images'"),
        ({"x": ((1, 3, 8), (4, 3, 8), (8, 3, 8))}, "has rank 4 but its min shape [1, 3, 8] has rank 3"),
        ({"x": ((8, 3, 8, 8), (4, 3, 8, 8), (1, 3, 8, 8))}, "axis 0 needs min <= opt <= max, got min=8 opt=4 max=1"),
        ({"x": ((1, 3, 8, 8), (4, 3, 8, 8), (8, 4, 8, 8))}, "axis 1 is fixed to 3 in the model"),
        ({"x": ((0, 3, 8, 8), (4, 3, 8, 8), (8, 3, 8, 8))}, "has a dim below 1"),
        ({}, "have dynamic dims but no min/opt/max"),
    ],
)
def test_profile_validation_rejects_bad_profiles(profiles, message) -> None:
    with pytest.raises(ConfigError) as info:
        validate_profiles(profiles, {"x": ["batch", 3, 8, 8]}, "m.onnx")
    assert message in info.value.message


def test_profile_validation_suggests_the_closest_name() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'images'\?"):
        validate_profiles({"image": PROFILES["x"]}, {"images": [-1, 3, 8, 8]}, "network")


def test_unknown_profile_name_fails_before_any_tensorrt_call(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    with pytest.raises(ConfigError, match="names input 'imgs'"):
        TensorRTBackend().build(
            tiny_onnx(tmp_path / "m.onnx"),
            BuildConfig(backend="tensorrt"),
            tmp_path / "out",
            profiles={"imgs": PROFILES["x"]},
        )
    assert fake.calls == []


# -- recipe key ------------------------------------------------------------------------------------

ENV = {
    "tensorrt": "10.13.3.9",
    "tensorrt_cuda": "cu12",
    "cuda_python_runtime": "12.8",
    "cuda_driver": "12.8",
    "gpu": "NVIDIA L4",
    "compute_capability": "8.9",
}


def test_fingerprint_has_versions_gpu_and_plugin_digests() -> None:
    fp = build_fingerprint_from(ENV, {"libdeploykit_plugins.so": "ab" * 32})
    assert fp == {
        "backend": "tensorrt",
        "tensorrt": "10.13.3.9",
        "tensorrt_cuda": "cu12",
        "gpu": "NVIDIA L4",
        "compute_capability": "8.9",
        "plugins": {"libdeploykit_plugins.so": "ab" * 32},
    }


@pytest.mark.parametrize(
    ("change", "changes_key"),
    [
        ({"tensorrt": "11.4.0.106"}, True),
        ({"compute_capability": "9.0"}, True),
        ({"gpu": "NVIDIA A10"}, True),
        ({"tensorrt_cuda": "cu13"}, True),  # TensorRT's own CUDA builds the plan
        ({"cuda_python_runtime": "13.0"}, False),  # cuda-python only moves memory: not part of the plan
        ({"cuda_driver": "13.1"}, False),  # a driver update keeps plans valid
    ],
)
def test_fingerprint_changes_with_what_changes_a_plan(change, changes_key) -> None:
    base = digest_value(build_fingerprint_from(ENV, {}))
    assert (digest_value(build_fingerprint_from({**ENV, **change}, {})) != base) is changes_key


def test_plugin_library_content_changes_the_fingerprint(tmp_path: Path) -> None:
    lib = tmp_path / "libp.so"
    lib.write_bytes(b"v1")
    first = digest_value(build_fingerprint_from(ENV, plugin_digests((str(lib),))))
    lib.write_bytes(b"v2")
    assert digest_value(build_fingerprint_from(ENV, plugin_digests((str(lib),)))) != first


def test_missing_plugin_library_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        plugin_digests((str(tmp_path / "nope.so"),))


def test_timing_cache_key_is_tensorrt_version_and_compute_capability() -> None:
    assert timing_cache_key(build_fingerprint_from(ENV, {})) == {
        "kind": "tensorrt-timing-cache",
        "tensorrt": "10.13.3.9",
        "compute_capability": "8.9",
    }


# -- engine-inspector JSON -------------------------------------------------------------------------

INSPECTOR_11 = {
    "Layers": [
        {
            "Name": "conv1 + relu",
            "LayerType": "CaskConvolution",
            "TacticValue": "0x1f",
            "Inputs": [{"Name": "x", "Datatype": "Int8", "Format": "Channel major (kCHW32)"}],
            "Outputs": [{"Name": "c1", "Datatype": "Half", "Format": "Row major linear (kLINEAR)"}],
        },
        {
            "Name": "head",
            "LayerType": "CaskGemm",
            "Outputs": [{"Name": "y", "Datatype": "Float", "Format": "Row major linear (kLINEAR)"}],
        },
    ],
    "I/O Tensors": [
        {
            "Name": "x",
            "IOMode": "Input",
            "DataType": "Float",
            "Dimensions": [-1, 3, 224, 224],
            "Location": "Device",
            "IsShapeInferenceIO": False,
            "ProfileInfo": [
                {
                    "MinShape": [1, 3, 224, 224],
                    "OptShape": [4, 3, 224, 224],
                    "MaxShape": [8, 3, 224, 224],
                    "Format": "kLINEAR",
                }
            ],
        },
        {
            "Name": "y",
            "IOMode": "Output",
            "DataType": "Float",
            "Dimensions": [-1, 1000],
            "Location": "Device",
            "IsShapeInferenceIO": False,
        },
    ],
}
INSPECTOR_10 = {
    "Layers": [
        {
            "Name": "conv1",
            "LayerType": "CaskConvolution",
            "TacticName": "sm80_xmma_fprop",
            "Outputs": [
                {
                    "Name": "c1",
                    "Location": "Device",
                    "Dimensions": [1, 8, 8, 8],
                    "Format/Datatype": "Channel major FP16 format where channel % 8 == 0",
                }
            ],
        },
        {
            "Name": "reformat",
            "LayerType": "Reformat",
            "Outputs": [{"Name": "y", "Format/Datatype": "Row major linear FP32"}],
        },
    ],
    "Bindings": ["x", "y"],
}


def test_inspector_11x_layout() -> None:
    insp = parse_inspector(json.dumps(INSPECTOR_11))
    assert insp.layout == "11.x" and insp.detailed
    assert [(t.name, t.mode, t.dtype, t.shape) for t in insp.io] == [
        ("x", "input", "fp32", (-1, 3, 224, 224)),
        ("y", "output", "fp32", (-1, 1000)),
    ]
    assert insp.io[0].profiles[0]["max"] == [8, 3, 224, 224]
    assert [(x.name, x.output_dtypes, x.tactic) for x in insp.layers] == [
        ("conv1 + relu", ("fp16",), "0x1f"),
        ("head", ("fp32",), ""),
    ]


def test_inspector_10x_layout() -> None:
    insp = parse_inspector(json.dumps(INSPECTOR_10))
    assert insp.layout == "10.x" and [t.name for t in insp.io] == ["x", "y"]
    assert summarize(insp) == {
        "layout": "10.x",
        "detailed": True,
        "layers": 2,
        "layer_kinds": {"CaskConvolution": 1, "Reformat": 1},
        "output_dtypes": {"fp16": 1, "fp32": 1},
        "io": ["x", "y"],
    }


def test_inspector_without_detailed_verbosity_has_names_only() -> None:
    insp = parse_inspector(json.dumps({"Layers": ["conv1", "relu1"], "Bindings": ["x", "y"]}))
    assert not insp.detailed and [x.name for x in insp.layers] == ["conv1", "relu1"]


@pytest.mark.parametrize("text", ["{not json", json.dumps({"Bindings": []}), json.dumps([1, 2])])
def test_inspector_rejects_what_is_not_inspector_output(text: str) -> None:
    with pytest.raises(ArtifactCorrupt):
        parse_inspector(text)


# -- engine compatibility --------------------------------------------------------------------------

BUILT = {
    "tensorrt": "10.13.3.9",
    "compute_capability": "8.9",
    "gpu": "NVIDIA L4",
    "version_compatible": False,
    "hardware_compatibility": "none",
}


@pytest.mark.parametrize(
    ("recorded", "here", "message"),
    [
        ({}, {"tensorrt": "10.14.1.48"}, "built with TensorRT 10.13.3.9 but this machine has TensorRT 10.14.1.48"),
        (
            {},
            {"compute_capability": "9.0", "gpu": "NVIDIA H100"},
            "compute capability 8.9), this machine has NVIDIA H100",
        ),
        ({"version_compatible": True}, {"tensorrt": "10.12.0.36"}, "runs only on TensorRT 10.13.3.9 or later"),
        # Built by an older deploykit with EXCLUDE_LEAN_RUNTIME: only the exact version can run it here.
        (
            {"version_compatible": True, "settings": {"flags": ["VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME"]}},
            {"tensorrt": "10.14.1.48"},
            "without its lean runtime (EXCLUDE_LEAN_RUNTIME",
        ),
        ({"hardware_compatibility": "ampere_plus"}, {"compute_capability": "7.5"}, "Ampere and newer GPUs only"),
    ],
)
def test_incompatible_plans_are_refused_with_both_sides_named(recorded, here, message) -> None:
    with pytest.raises(EngineIncompatible) as info:
        check_engine_compatible({**BUILT, **recorded}, {**ENV, **here}, "out/engine")
    assert message in info.value.message and info.value.exit_code == 3
    assert "--rebuild-incompatible" in info.value.hint or "rebuild" in info.value.hint


@pytest.mark.parametrize(
    ("recorded", "here"),
    [
        ({}, {}),
        ({}, {"gpu": "NVIDIA RTX 4090"}),  # same compute capability, other model: TensorRT runs it
        ({"version_compatible": True}, {"tensorrt": "10.14.1.48"}),
        ({"version_compatible": True}, {"tensorrt": "11.4.0.106"}),  # the embedded lean runtime runs on a later major
        ({"hardware_compatibility": "ampere_plus"}, {"compute_capability": "9.0"}),
    ],
)
def test_compatible_plans_pass(recorded, here) -> None:
    check_engine_compatible({**BUILT, **recorded}, {**ENV, **here}, "out/engine")


# -- config -> builder settings, through FakeTensorRT (a recording test double, not TensorRT) -----


def test_double_build_translates_default_options_on_10x(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch, Scenario(version="10.13.3.9"))
    summary = build_with_double(tmp_path, fake)
    strongly_typed = 1 << int(fake.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    assert fake.called("create_network") == [("create_network", strongly_typed)]
    assert fake.called("set_memory_pool_limit") == [
        ("set_memory_pool_limit", fake.MemoryPoolType.WORKSPACE, 4096 << 20)
    ]
    assert ("config.builder_optimization_level", 3) in fake.calls
    assert ("config.hardware_compatibility_level", fake.HardwareCompatibilityLevel.NONE) in fake.calls
    assert ("config.profiling_verbosity", fake.ProfilingVerbosity.DETAILED) in fake.calls
    assert fake.called("set_flag") == []
    assert fake.called("set_shape") == [("set_shape", "x", (1, 3, 8, 8), (4, 3, 8, 8), (8, 3, 8, 8))]
    assert fake.called("init_libnvinfer_plugins") == [("init_libnvinfer_plugins", "")]
    # TF32 is on by default in TensorRT; deploykit clears it so FP32 parity stays strict.
    assert fake.called("clear_flag") == [("clear_flag", fake.BuilderFlag.TF32)]
    assert summary["settings"]["flags"] == [] and summary["settings"]["tf32"] is False
    assert summary["settings"]["profiles"]["x"] == {"min": [1, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [8, 3, 8, 8]}


def test_double_build_on_11x_passes_no_creation_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch, Scenario(version="11.4.0.106"))
    build_with_double(tmp_path, fake)
    assert fake.called("create_network") == [("create_network", 0)]  # strongly typed is implicit in 11


def test_double_build_writes_the_engine_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    summary = build_with_double(tmp_path, fake)
    engine = tmp_path / "engine"
    assert sorted(p.name for p in engine.iterdir()) == ["engine.json", "engine.plan", "engine_inspector.json"]
    meta = json.loads((engine / "engine.json").read_text())
    assert meta["plan_bytes"] == (engine / "engine.plan").stat().st_size == summary["plan_bytes"]
    assert meta["tensorrt"] == "10.13.3.9" and meta["gpu"] == "Fake GPU (test double)"
    assert meta["compute_capability"] == "8.9"
    # Both CUDA versions are recorded, apart: TensorRT's wheel flavour and cuda-python's runtime.
    assert meta["cuda_python_runtime"] == "12.8" and "tensorrt_cuda" in meta and "cuda_runtime" not in meta
    assert meta["io"] == [
        {
            "name": "x",
            "mode": "input",
            "dtype": "float32",
            "shape": [-1, 3, 8, 8],
            "profile": {"min": [1, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [8, 3, 8, 8]},
        },
        {"name": "y", "mode": "output", "dtype": "float32", "shape": [-1, 3, 8, 8]},
    ]
    assert meta["onnx_dims"]["x"] == ["batch", 3, 8, 8]
    assert meta["inspector"]["layers"] == 1 and json.loads((engine / "engine_inspector.json").read_text())["Bindings"]
    assert "build_seconds" not in meta  # engine.json has no timings: identical builds describe themselves alike
    assert (tmp_path / "timing.cache").read_bytes() == b"+entry"


@pytest.mark.parametrize(
    ("options", "flags"),
    [
        ({"version_compatible": True}, ["VERSION_COMPATIBLE"]),  # the lean runtime stays in the plan
        ({"sparse_weights": True}, ["SPARSE_WEIGHTS"]),
        ({"refit": True}, ["REFIT"]),
        ({"strip_plan": True}, ["STRIP_PLAN", "REFIT_IDENTICAL"]),
        ({"strip_plan": True, "refit": True}, ["REFIT", "STRIP_PLAN"]),
    ],
)
def test_double_build_sets_the_flags_options_ask_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, options, flags
) -> None:
    fake = use_double(monkeypatch)
    summary = build_with_double(tmp_path, fake, **options)
    assert [c[1] for c in fake.called("set_flag")] == [fake.BuilderFlag[f] for f in flags]
    assert summary["settings"]["flags"] == flags


def test_double_version_compatible_plans_allow_host_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    build_with_double(tmp_path, fake, version_compatible=True)
    assert fake.called("deserialize_cuda_engine")[0][2] is True


def test_double_version_compatible_plan_carries_its_plugins_and_loads_on_a_later_tensorrt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The compatibility check and the loader agree: a plan the check accepts on 10.14 is loaded there."""
    fake = use_double(monkeypatch)
    lib = tmp_path / "libdeploykit_plugins.so"
    lib.write_bytes(b"\x7fELF plugin")
    real_load = trt_plugins.load_libraries
    loads: list[list[Path]] = []

    def load(trt, paths):
        loads.append(list(paths))
        return real_load(trt, paths, opener=opener_registering(trt, [("BEVPoolV2", "1", "deploykit")]))

    monkeypatch.setattr(trt_plugins, "load_libraries", load)
    options = BuildConfig(backend="tensorrt", plugins=(str(lib),), tensorrt=TensorRTOptions(version_compatible=True))
    summary = TensorRTBackend().build(tiny_onnx(tmp_path / "m.onnx"), options, tmp_path / "engine", profiles=PROFILES)
    assert ("config.plugins_to_serialize", [str(lib.resolve())]) in fake.calls
    assert summary["settings"]["lean_runtime"] == "embedded"
    assert summary["settings"]["plugins_serialized"] == ["libdeploykit_plugins.so"]
    assert fake.called("set_flag") == [("set_flag", fake.BuilderFlag.VERSION_COMPATIBLE)]

    later = use_double(monkeypatch, Scenario(version="10.14.1.48"))
    loads.clear()
    TensorRTBackend().load(tmp_path / "engine")
    assert loads == []  # the plan runs its serialized plugins itself: no copy goes into the host registry
    assert later.called("deserialize_cuda_engine") == [("deserialize_cuda_engine", 31, True)]


def test_double_version_compatible_plan_also_carries_the_plugins_the_parser_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Defect A: the parser's own version-compatible plugin libraries (TensorRT's built-in plugins for a
    version-compatible build) go into the plan too, as trtexec serializes them; once each."""
    vc = tmp_path / "libnvinfer_vc_plugin.so.10"
    lib = tmp_path / "libdeploykit_plugins.so"
    fake = use_double(monkeypatch, Scenario(vc_plugin_libraries=(str(vc), str(vc))))
    monkeypatch.setattr(trt_plugins, "load_libraries", lambda trt, paths: [])
    lib.write_bytes(b"\x7fELF plugin")
    options = BuildConfig(backend="tensorrt", plugins=(str(lib),), tensorrt=TensorRTOptions(version_compatible=True))
    summary = TensorRTBackend().build(tiny_onnx(tmp_path / "m.onnx"), options, tmp_path / "engine", profiles=PROFILES)
    assert ("config.plugins_to_serialize", [str(lib.resolve()), str(vc.resolve())]) in fake.calls
    assert summary["settings"]["plugins_serialized"] == ["libdeploykit_plugins.so", "libnvinfer_vc_plugin.so.10"]
    plain = use_double(monkeypatch, Scenario(vc_plugin_libraries=(str(vc),)))
    (tmp_path / "plain").mkdir()
    build_with_double(tmp_path / "plain", plain)
    assert not plain.called("get_used_vc_plugin_libraries")  # only version-compatible plans carry them


def test_double_plain_build_serializes_no_plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    summary = build_with_double(tmp_path, fake)
    assert not [c for c in fake.calls if c[0] == "config.plugins_to_serialize"]
    assert summary["settings"]["lean_runtime"] == "none" and summary["settings"]["plugins_serialized"] == []


def test_double_build_levels_and_workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    build_with_double(
        tmp_path,
        fake,
        workspace_mib=512,
        builder_optimization_level=5,
        hardware_compatibility="same_compute_capability",
    )
    assert ("config.builder_optimization_level", 5) in fake.calls
    assert (
        "config.hardware_compatibility_level",
        fake.HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY,
    ) in fake.calls
    assert fake.called("set_memory_pool_limit")[0][2] == 512 * 2**20


def test_ampere_plus_on_an_older_gpu_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch, gpu=FakeGpu(compute_capability="7.5"))
    with pytest.raises(ConfigError, match="needs an Ampere or newer GPU"):
        build_with_double(tmp_path, fake, hardware_compatibility="ampere_plus")
    assert fake.called("Builder") == []


# -- timing cache ----------------------------------------------------------------------------------


def build_with_cache(tmp_path: Path, fake: FakeTensorRT, cache: bytes | None, **options: object) -> dict:
    return TensorRTBackend().build(
        tiny_onnx(tmp_path / "m.onnx"),
        BuildConfig(tensorrt=TensorRTOptions(**options)),
        tmp_path / "engine",
        profiles=PROFILES,
        timing_cache=cache,
        timing_cache_out=tmp_path / "new.cache",
    )


def test_double_timing_cache_is_seeded_and_returned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    summary = build_with_cache(tmp_path, fake, b"OLD")
    assert fake.called("create_timing_cache")[0] == ("create_timing_cache", b"OLD")
    assert fake.called("set_timing_cache")[0] == ("set_timing_cache", b"OLD", False)
    assert summary["timing_cache"] == {"used": True, "seeded_bytes": 3, "reused": True}
    assert (tmp_path / "new.cache").read_bytes() == b"OLD+entry"


@pytest.mark.parametrize("scenario,cache", [(Scenario(cache_accepted=False), b"OTHER-GPU"), (Scenario(), b"CORRUPT")])
def test_double_rejected_timing_cache_starts_empty(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scenario, cache
) -> None:
    fake = use_double(monkeypatch, scenario)
    summary = build_with_cache(tmp_path, fake, cache)
    assert summary["timing_cache"]["reused"] is False and "started empty" in summary["timing_cache"]["note"]
    assert (tmp_path / "new.cache").read_bytes() == b"+entry"


def test_error_on_cache_miss_without_a_cache_fails_before_building(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = use_double(monkeypatch)
    with pytest.raises(ConfigError, match="no timing cache"):
        build_with_cache(tmp_path, fake, None, error_on_timing_cache_miss=True)
    assert fake.called("build_serialized_network") == []


def test_double_error_on_cache_miss_sets_the_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    build_with_cache(tmp_path, fake, b"OLD", error_on_timing_cache_miss=True)
    assert fake.called("set_flag") == [("set_flag", fake.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)]


def test_timing_cache_off_returns_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    summary = build_with_cache(tmp_path, fake, None, timing_cache=False)
    assert summary["timing_cache"] == {"used": False} and not (tmp_path / "new.cache").exists()
    assert fake.called("create_timing_cache") == []


# -- failures, through the test double ---------------------------------------------------------------


def test_double_parse_failure_is_one_model_error_listing_every_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = use_double(
        monkeypatch,
        Scenario(
            parse_errors=[
                {
                    "index": 1,
                    "name": "post",
                    "op": "BevPool",
                    "error_code": "UNSUPPORTED_NODE",
                    "text": "No importer registered for op: BevPool",
                }
            ],
            unsupported=[1],
        ),
    )
    onnx_path = tiny_onnx(tmp_path / "m.onnx", extra_node=("BevPool", "deploykit"))
    with pytest.raises(ModelError) as info:
        TensorRTBackend().build(onnx_path, BuildConfig(), tmp_path / "engine", profiles=PROFILES)
    message = info.value.message
    assert "node 'post' (BevPool): UNSUPPORTED_NODE: No importer registered for op: BevPool" in message
    assert "nodes TensorRT does not support (1):\n  - 'post' (deploykit::BevPool)" in message
    assert info.value.hint.startswith("build a TensorRT plugin for custom op(s) BevPool")
    assert "--plugins" in info.value.hint and "surgery pass" in info.value.hint
    assert info.value.exit_code == 4
    assert not (tmp_path / "engine" / "engine.json").exists()
    assert fake.called("build_serialized_network") == []


def test_double_unsupported_standard_op_suggests_surgery_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_double(
        monkeypatch,
        Scenario(
            parse_errors=[
                {"index": 1, "name": "post", "op": "Unique", "error_code": "UNSUPPORTED_NODE", "text": "no importer"}
            ],
            unsupported=[1],
        ),
    )
    with pytest.raises(ModelError) as info:
        TensorRTBackend().build(
            tiny_onnx(tmp_path / "m.onnx", extra_node=("Unique", "")),
            BuildConfig(),
            tmp_path / "engine",
            profiles=PROFILES,
        )
    assert info.value.hint.startswith("rewrite or remove the nodes using Unique with a surgery pass")


def test_double_out_of_memory_reports_the_workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(
        monkeypatch,
        Scenario(
            build_fails=True,
            build_log=[
                (2, "Requested amount of GPU memory (8589934592 bytes) could not be allocated."),
                (1, "[optimizer.cpp::computeCosts] Error Code 2: OutOfMemory (no further information)"),
            ],
        ),
    )
    with pytest.raises(EnvironmentProblem) as info:
        build_with_double(tmp_path, fake, workspace_mib=8192)
    assert (
        "ran out of GPU memory" in info.value.message
        and "8192 MiB (build.tensorrt.workspace_mib)" in info.value.message
    )
    assert "Error Code 2: OutOfMemory" in info.value.message and "workspace_mib" in info.value.hint
    assert not (tmp_path / "engine").exists()


def test_double_other_build_failure_quotes_tensorrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch, Scenario(build_fails=True, build_log=[(1, "Error Code 4: mixed precision")]))
    with pytest.raises(ModelError, match="Error Code 4: mixed precision"):
        build_with_double(tmp_path, fake)


def test_double_shape_tensor_inputs_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch, Scenario(shape_tensor_inputs=("x",)))
    with pytest.raises(ConfigError, match="is a shape tensor"):
        build_with_double(tmp_path, fake)


def test_double_network_inputs_are_checked_again_after_parsing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch, Scenario(inputs={"x": [-1, 3, 8, 8], "mask": [-1, 8]}))
    with pytest.raises(ConfigError, match=r"as parsed by TensorRT.*'mask'"):
        build_with_double(tmp_path, fake)


def test_missing_plugin_library_fails_before_tensorrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch)
    options = BuildConfig(plugins=(str(tmp_path / "build/plugins/libdeploykit_plugins.so"),))
    with pytest.raises(ConfigError, match="libdeploykit_plugins.so' does not exist"):
        TensorRTBackend().build(tiny_onnx(tmp_path / "m.onnx"), options, tmp_path / "engine", profiles=PROFILES)
    assert fake.calls == []


# -- the logger (our ILogger subclass over the double's ILogger base) -----------------------------------


def test_double_logger_captures_per_thread_while_sessions_share_it() -> None:
    """Concurrent gate sessions share one logger: each capture must get its own thread's messages only."""
    import threading

    from deploykit.backends.trt_logger import get_logger

    fake = FakeTensorRT()
    logger = get_logger(fake)
    assert get_logger(fake) is logger  # one per TensorRT module
    barrier, seen = threading.Barrier(4), {}

    def worker(n: int) -> None:
        with logger.capture() as records:
            barrier.wait()  # every capture is open before anyone logs
            for i in range(200):
                logger.log(2, f"thread {n} message {i}")
            barrier.wait()  # nobody closes before everyone logged
        seen[n] = records

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in range(4):
        assert seen[n] == [(2, f"thread {n} message {i}") for i in range(200)]


def test_double_logger_nested_captures_and_unattributed_messages() -> None:
    import threading

    from deploykit.backends.trt_logger import get_logger

    logger = get_logger(FakeTensorRT())
    with logger.capture() as outer:
        with logger.capture() as inner:
            logger.log(1, "inside")
        logger.log(3, "info is not kept")
        logger.log(2, "after the inner block")
        # A TensorRT worker thread with no capture of its own: the message reaches every open capture.
        other = threading.Thread(target=lambda: logger.log(1, "from a worker thread"))
        other.start()
        other.join()
    assert inner == [(1, "inside")]
    assert outer == [(1, "inside"), (2, "after the inner block"), (1, "from a worker thread")]
    logger.log(1, "nobody listens")  # no capture open: nothing kept, nothing raised
    assert logger._open == {}


# -- plugin libraries --------------------------------------------------------------------------------


def opener_registering(fake: FakeTensorRT, creators: list[tuple[str, str, str]], exports_get_creators: bool = False):
    """A stand-in for ctypes.CDLL: 'loading' registers ``creators`` into the fake registry."""

    class Handle:
        pass

    def opener(path: str):
        fake.registry.all_creators += [Creator(*c) for c in creators]
        handle = Handle()
        if exports_get_creators:
            handle.getCreators = object()
        return handle

    return opener


def test_plugin_library_that_registers_nothing_is_refused(tmp_path: Path) -> None:
    fake = FakeTensorRT()
    lib = tmp_path / "libempty.so"
    lib.write_bytes(b"\x7fELF")
    with pytest.raises(InvalidInput, match="registered no TensorRT plugin creator"):
        trt_plugins.load_libraries(fake, [lib], opener=opener_registering(fake, []))


def test_plugin_library_creators_are_recorded(tmp_path: Path) -> None:
    fake = FakeTensorRT()
    lib = tmp_path / "libdk.so"
    lib.write_bytes(b"\x7fELF")
    (loaded,) = trt_plugins.load_libraries(fake, [lib], opener=opener_registering(fake, [("bev_pool_v2", "1", "dk")]))
    assert loaded.creators == (("bev_pool_v2", "1", "dk"),) and len(loaded.sha256) == 64


def test_plugin_library_with_get_creators_goes_through_the_registry(tmp_path: Path) -> None:
    fake = FakeTensorRT()
    lib = tmp_path / "libv3.so"
    lib.write_bytes(b"\x7fELF")
    with pytest.raises(EnvironmentProblem, match="via getCreators"):  # the double's load_library returns None
        trt_plugins.load_libraries(fake, [lib], opener=opener_registering(fake, [], exports_get_creators=True))
    assert fake.called("load_library") == [("load_library", str(lib))]


def test_plugin_library_the_loader_rejects(tmp_path: Path) -> None:
    lib = tmp_path / "libbad.so"
    lib.write_bytes(b"not elf")
    with pytest.raises(EnvironmentProblem, match="cannot be loaded") as info:
        trt_plugins.load_libraries(FakeTensorRT(), [lib])  # the real dynamic loader
    assert "compiled against the headers of TensorRT 10.x" in info.value.hint


def test_plugin_nodes_without_a_creator_are_listed(tmp_path: Path) -> None:
    import onnx
    from onnx import helper

    path = tiny_onnx(tmp_path / "m.onnx", extra_node=("bev_pool_v2", "deploykit"))
    model = onnx.load(str(path))
    model.graph.node[1].attribute.extend(
        [helper.make_attribute("plugin_version", "1"), helper.make_attribute("plugin_namespace", "deploykit")]
    )
    onnx.save(model, str(path))
    nodes = trt_plugins.plugin_nodes(path)
    assert [(n.node, n.creator) for n in nodes] == [("post", ("bev_pool_v2", "1", "deploykit"))]
    fake = FakeTensorRT()
    lib = tmp_path / "libother.so"
    lib.write_bytes(b"\x7fELF")
    loaded = trt_plugins.load_libraries(fake, [lib], opener=opener_registering(fake, [("voxelize", "1", "deploykit")]))
    with pytest.raises(InvalidInput) as info:
        trt_plugins.check_plugin_nodes(fake, nodes, loaded)
    assert "node 'post': plugin 'bev_pool_v2' version '1' namespace 'deploykit'" in info.value.message
    assert "libother.so: voxelize v1" in info.value.message
    fake.registry.all_creators.append(Creator("bev_pool_v2", "1", "deploykit"))
    trt_plugins.check_plugin_nodes(fake, nodes, loaded)


# -- loading an engine folder, through the test double ----------------------------------------------


def built_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scenario: Scenario | None = None, **options: object
) -> tuple[FakeTensorRT, Path]:
    fake = use_double(monkeypatch, scenario)
    build_with_double(tmp_path, fake, **options)
    return fake, tmp_path / "engine"


def test_double_load_refuses_a_truncated_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake, engine = built_engine(monkeypatch, tmp_path)
    plan = engine / "engine.plan"
    plan.write_bytes(plan.read_bytes()[:10])
    with pytest.raises(ArtifactCorrupt, match="was written with 31 \\(truncated\\)"):
        TensorRTBackend().load(engine)
    assert fake.called("deserialize_cuda_engine")[1:] == []  # only the build's own check deserialized


def test_double_load_refuses_a_plan_from_another_tensorrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, engine = built_engine(monkeypatch, tmp_path)
    use_double(monkeypatch, Scenario(version="10.14.1.48"))
    with pytest.raises(
        EngineIncompatible, match="built with TensorRT 10.13.3.9 but this machine has TensorRT 10.14.1.48"
    ):
        TensorRTBackend().load(engine)


def test_double_load_refuses_a_plan_from_another_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, engine = built_engine(monkeypatch, tmp_path)
    use_double(monkeypatch, gpu=FakeGpu(name="NVIDIA H100", compute_capability="9.0"))
    with pytest.raises(EngineIncompatible, match="compute capability 8.9"):
        TensorRTBackend().load(engine)


def test_double_load_translates_a_version_tag_refusal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake, engine = built_engine(monkeypatch, tmp_path)
    fake.scenario.deserialize_fails_with = (
        "IRuntime::deserializeCudaEngine: Error Code 1: Serialization "
        "(Serialization assertion plan->header.magicTag == rt::kPLAN_MAGIC_TAG failed.)"
    )
    with pytest.raises(EngineIncompatible, match="refuses the plan"):
        TensorRTBackend().load(engine)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "IPluginRegistry::getCreator: Error Code 4: API Usage Error (Cannot find plugin: BEVPoolV2, version: 1, "
            "namespace: deploykit.)",
            "plugin BEVPoolV2 (version 1, namespace 'deploykit') not loaded: pass --plugins",
        ),
        (
            "Cannot find plugin: ROIAlign_TRT, version: 2, namespace:.)",
            "plugin ROIAlign_TRT (version 2, namespace '') not loaded: pass --plugins",
        ),
    ],
)
def test_double_load_names_a_missing_plugin_not_a_version_mismatch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, message, expected
) -> None:
    fake, engine = built_engine(monkeypatch, tmp_path)
    fake.scenario.deserialize_fails_with = message
    with pytest.raises(EnvironmentProblem) as info:
        TensorRTBackend().load(engine)
    assert expected in info.value.message and info.value.exit_code == 3


def test_double_load_does_not_read_any_version_word_as_a_version_mismatch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake, engine = built_engine(monkeypatch, tmp_path)
    fake.scenario.deserialize_fails_with = "Error Code 1: Serialization (weights of layer conv1: unknown version 3)"
    with pytest.raises(ArtifactCorrupt, match="cannot deserialize the plan"):
        TensorRTBackend().load(engine)


def test_double_load_of_a_folder_without_engine_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_double(monkeypatch)
    with pytest.raises(ModelError, match="no engine.json"):
        TensorRTBackend().load(tmp_path)


# -- the session, through the test doubles (FakeTensorRT + FakeCudart: y = 2 * x on the host) ---------


def double_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scenario: Scenario | None = None, **options: object
) -> tuple[FakeTensorRT, TensorRTSession]:
    fake, engine = built_engine(monkeypatch, tmp_path, scenario, **options)
    return fake, TensorRTBackend().load(engine)


def feeds(batch: int = 2, dtype: type = np.float32) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(dtype)}


def test_double_session_specs_use_the_onnx_dim_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, session = double_session(monkeypatch, tmp_path)
    assert [(s.name, s.dtype, s.shape) for s in session.inputs] == [("x", "float32", ("batch", 3, 8, 8))]
    assert [(s.name, s.shape) for s in session.outputs] == [("y", ("batch", 3, 8, 8))]
    assert "TensorRT 10.13.3.9 on Fake GPU (test double)" in session.evaluator


def test_double_session_infer_copies_in_runs_and_copies_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake, session = double_session(monkeypatch, tmp_path)
    for batch in (2, 8, 1):  # dynamic batch, growing and shrinking the buffers
        x = feeds(batch)
        out = session.infer(x)
        np.testing.assert_array_equal(out["y"], 2 * x["x"])
    assert fake.cudart.calls.count("H2D") == 3 and fake.cudart.calls.count("D2H") == 3


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (feeds(9), "axis 0 is 9, outside the engine's profile [1, 8]"),
        (feeds(2, np.float16), "is float16, the engine expects float32"),
        ({"x": np.zeros((2, 4, 8, 8), np.float32)}, "axis 1 is 4, the engine was built for 3"),
        ({"x": np.zeros((2, 3, 8), np.float32)}, "the engine expects rank 4"),
        ({"images": np.zeros((2, 3, 8, 8), np.float32)}, "do not match the engine's inputs ['x']"),
    ],
)
def test_double_session_rejects_bad_feeds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bad, message) -> None:
    _, session = double_session(monkeypatch, tmp_path)
    with pytest.raises(DataError) as info:
        session.infer(bad)
    assert message in info.value.message


def test_double_engine_runner_replays_a_cuda_graph(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake, session = double_session(monkeypatch, tmp_path)
    run = session.engine_timed_runner(feeds(4))
    fake.cudart.calls.clear()
    run()
    run()
    assert session.runner_info == {"mode": "cuda-graph", "why": ""}
    assert fake.cudart.calls == ["graph", "sync", "graph", "sync"]  # engine only: no copies


def test_double_end_to_end_runner_includes_the_copies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake, session = double_session(monkeypatch, tmp_path)
    x = feeds(4)
    run = session.timed_runner(x)
    fake.cudart.calls.clear()
    run()
    assert fake.cudart.calls == ["H2D", "graph", "D2H", "sync"]
    np.testing.assert_array_equal(session.infer(x)["y"], 2 * x["x"])


def test_double_capture_failure_falls_back_to_enqueue(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake, session = double_session(monkeypatch, tmp_path, Scenario(capture_fails=True))
    run = session.engine_timed_runner(feeds(4))
    before = fake.last_context.enqueues
    run()
    assert session.runner_info["mode"] == "enqueue" and "capture failed" in session.runner_info["why"]
    assert fake.last_context.enqueues == before + 1


def test_double_cuda_graphs_off_in_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, session = double_session(monkeypatch, tmp_path, cuda_graphs=False)
    session.engine_timed_runner(feeds(4))()
    assert session.runner_info == {"mode": "enqueue", "why": "cuda_graphs is off in the build options"}


def test_double_runner_goes_stale_when_shapes_change(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake, session = double_session(monkeypatch, tmp_path)
    run = session.engine_timed_runner(feeds(4))
    other = session.timed_runner(feeds(4))  # same shapes and buffers: both stay valid
    run()
    other()
    session.infer(feeds(8))
    with pytest.raises(UsageError, match="create a new runner"):
        run()
    assert fake.cudart.live_graphs == 0  # the stale graph was destroyed


def test_double_data_dependent_outputs_use_the_allocator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, session = double_session(monkeypatch, tmp_path, Scenario(data_dependent_output=True))
    x = feeds(3)
    out = session.infer(x)["y"]
    expected = 2 * x["x"].ravel()
    np.testing.assert_array_equal(out, expected[expected > 0])
    session.engine_timed_runner(x)()
    assert session.runner_info["mode"] == "enqueue" and "data-dependent" in session.runner_info["why"]


def test_double_shape_tensor_outputs_are_bound_to_host_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A host-located output (get_tensor_location HOST) gets a host buffer, never a device one nor a copy."""
    fake, session = double_session(monkeypatch, tmp_path, Scenario(shape_output=True))
    for batch in (3, 5):
        x = feeds(batch)
        out = session.infer(x)
        np.testing.assert_array_equal(out["y"], 2 * x["x"])
        assert out["y_shape"].dtype == np.int64 and out["y_shape"].tolist() == [batch, 3, 8, 8]
    assert fake.last_context.addresses["y_shape"] not in fake.cudart.device_addresses
    run = session.timed_runner(feeds(2))
    fake.cudart.calls.clear()
    run()
    assert fake.cudart.calls.count("D2H") == 1  # y only: y_shape is already on the host


def test_double_session_close_frees_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake, session = double_session(monkeypatch, tmp_path)
    session.infer(feeds(2))
    session.close()
    assert fake.cudart._buffers == {}


# -- TensorRT names against the real 10.13 and 11.4 bindings -------------------------------------------


def _find_checker() -> Path:
    """$DEPLOYKIT_TRT_NAMES_CHECKER, else ``shared/tensorrt-api`` beside the checkout or above it (worktrees)."""
    if os.environ.get("DEPLOYKIT_TRT_NAMES_CHECKER"):
        return Path(os.environ["DEPLOYKIT_TRT_NAMES_CHECKER"])
    candidates = [up / "shared" / "tensorrt-api" / "check_trt_names.py" for up in REPO.parents]
    return next((c for c in candidates if c.is_file()), candidates[0])


CHECKER = _find_checker()
TRT_FILES = [
    BACKENDS / "tensorrt.py",
    *sorted(BACKENDS.glob("trt_*.py")),
    REPO / "src" / "deploykit" / "cli" / "doctor.py",
    REPO / "src" / "deploykit" / "profiling" / "tensorrt.py",
    REPO / "scripts" / "gpu_check.py",
    REPO / "bench" / "lint_corpus.py",  # the issue corpus through the real parser, where TensorRT runs
]
# Qualified names both versions have but the checker's identifier lists lack (they were extracted with
# `strings`, which misses short enum members), each with where the real bindings define it. An entry
# exempts only uses written exactly so (``<...>.TensorIOMode.INPUT``): a bare ``.INPUT`` on anything
# else is still reported. Keep this minimal: a test checks every entry is still used.
LIST_GAPS = {
    "TensorIOMode.INPUT": "NVIDIA/TensorRT python/src/infer/pyCore.cpp (release/10.13 and 11.x): "
    'py::enum_<TensorIOMode>(m, "TensorIOMode").value("INPUT", TensorIOMode::kINPUT)',
}
_GUARD_WORDS = ("major", "version", "hasattr")


def run_names_checker(files: list[Path]) -> list[tuple[Path, int, str, str]]:
    """(file, line, name, where) for every name the checker reports as missing from a version."""
    if not CHECKER.is_file():
        pytest.skip(f"TensorRT names checker not found at {CHECKER} (set DEPLOYKIT_TRT_NAMES_CHECKER)")
    proc = subprocess.run([sys.executable, str(CHECKER), *map(str, files)], capture_output=True, text=True, check=False)
    assert "files checked" in proc.stdout, proc.stdout + proc.stderr
    findings = []
    for line in proc.stdout.splitlines():
        if line.startswith("  ") and " — " in line:
            location, where = line.strip().rsplit(" — ", 1)
            path, lineno, name = location.rsplit(":", 2)
            findings.append((Path(path), int(lineno), name.strip(), where))
    return findings


def unguarded_uses(path: Path, name: str) -> list[int]:
    """Lines where attribute ``name`` is used outside an ``if`` on the TensorRT version (or a hasattr)."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr == name):
            continue
        up, guarded = node, False
        while up in parents and not guarded:
            up = parents[up]
            if isinstance(up, (ast.If, ast.IfExp)):
                guarded = any(w in ast.unparse(up.test) for w in _GUARD_WORDS)
        if not guarded:
            lines.append(node.lineno)
    return lines


def qualified_uses(path: Path, name: str) -> set[str]:
    """How attribute ``name`` is reached in ``path``: ``{"TensorIOMode.INPUT", ...}`` (its owner and itself)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == name:
            owner = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "?")
            out.add(f"{owner}.{name}")
    return out


def unlisted_gaps(findings: list[tuple[Path, int, str, str]]) -> list[tuple[Path, int, str, str]]:
    """Names in neither version, except uses that are all an allow-listed qualified name."""
    return [f for f in findings if f[3] == "neither" and not qualified_uses(f[0], f[2]) <= set(LIST_GAPS)]


def test_no_tensorrt_name_is_missing_from_both_versions() -> None:
    findings = run_names_checker(TRT_FILES)
    neither = unlisted_gaps(findings)
    assert not neither, "names in neither TensorRT 10.13 nor 11.4:\n" + "\n".join(map(str, neither))
    used = {q for f in findings if f[3] == "neither" for q in qualified_uses(f[0], f[2])}
    assert set(LIST_GAPS) <= used, f"LIST_GAPS lists a name the code no longer uses: {set(LIST_GAPS) - used}"


def test_the_allow_list_exempts_only_the_qualified_name(tmp_path: Path) -> None:
    code = tmp_path / "snippet.py"
    code.write_text("def f(trt, engine, name):\n    return engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT\n")
    findings = run_names_checker([code])
    assert [f[2] for f in findings] == ["INPUT"] and unlisted_gaps(findings) == []  # the checker's false positive
    code.write_text("def f(trt, layer):\n    return layer.type == trt.LayerType.INPUT\n")  # no such member
    assert [f[2] for f in unlisted_gaps(run_names_checker([code]))] == ["INPUT"]


def test_names_of_one_version_only_sit_behind_a_version_check() -> None:
    one_version = [f for f in run_names_checker(TRT_FILES) if f[3].startswith("only")]
    bad = {(str(path), name): unguarded_uses(path, name) for path, _, name, _ in one_version}
    assert not {k: v for k, v in bad.items() if v}, f"version-specific names used without a version check: {bad}"


def test_the_version_guard_check_catches_an_unguarded_name(tmp_path: Path) -> None:
    code = tmp_path / "snippet.py"
    code.write_text(
        textwrap.dedent("""
        def check(trt, parser, data):
            if trt_compat.major(trt) < 11:
                return parser.supports_model(data)
            return parser.supports_model(data)
    """)
    )
    (finding,) = run_names_checker([code])
    assert finding[2:] == ("supports_model", "only 10.13")
    assert unguarded_uses(code, "supports_model") == [5]


# -- real TensorRT (skipped without TensorRT and a GPU) -----------------------------------------------

_TRT_STATUS = TensorRTBackend().availability()
needs_tensorrt = pytest.mark.skipif(not _TRT_STATUS.available, reason=f"needs TensorRT and a GPU: {_TRT_STATUS.reason}")


def conv_onnx(path: Path, *, fp16: bool = False) -> Path:
    """A small conv net with a dynamic batch, built with onnx.helper (FP32, or FP16 with FP32 I/O via casts)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    dtype, elem = (np.float16, TensorProto.FLOAT16) if fp16 else (np.float32, TensorProto.FLOAT)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(dtype), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(dtype), "w2")
    nodes = [
        helper.make_node("Cast", ["x"], ["xc"], to=elem),
        helper.make_node("Conv", ["xc", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Cast", ["c2"], ["y"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 32, 32])],
        [w1, w2],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def int8_qdq_onnx(fp32: Path, out: Path) -> Path:
    """Symmetric INT8 Q/DQ (per-channel weights) with ONNX Runtime's quantizer, the form TensorRT's parser accepts."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._data = iter([{"x": feeds_for(b)} for b in (1, 2, 4)])

        def get_next(self):
            return next(self._data, None)

    quantize_static(
        str(fp32),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        # TensorRT's parser rejects an INT32 bias DequantizeLinear: biases stay float.
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False},
    )
    return out


def feeds_for(batch: int) -> np.ndarray:
    return np.random.default_rng(100 + batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_tensorrt
@pytest.mark.parametrize(("variant", "tolerance"), [("fp32", 5e-3), ("fp16", 5e-3), ("int8", 5e-2)])
def test_tensorrt_builds_and_matches_onnxruntime(tmp_path: Path, variant: str, tolerance: float) -> None:
    """A real build: TF32 (on by default) bounds FP32 error; INT8 may differ by one quantization step."""
    from deploykit.graph.run import session_from_onnx

    model = conv_onnx(tmp_path / "fp32.onnx", fp16=variant == "fp16")
    if variant == "int8":
        model = int8_qdq_onnx(model, tmp_path / "int8.onnx")
    profiles = {"x": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}
    backend = TensorRTBackend()
    summary = backend.build(model, BuildConfig(backend="tensorrt"), tmp_path / "engine", profiles=profiles)
    assert summary["plan_bytes"] > 0 and (tmp_path / "engine" / "engine_inspector.json").is_file()
    session = backend.load(tmp_path / "engine")
    reference = session_from_onnx(model, "onnxruntime", level="disabled")  # the same graph as written, on the CPU
    for batch in (1, 4):
        x = {"x": feeds_for(batch)}
        assert rel_l2(session.infer(x)["y"], reference.infer(x)["y"]) < tolerance
    session.engine_timed_runner({"x": feeds_for(2)})()
    session.timed_runner({"x": feeds_for(2)})()
    assert session.runner_info["mode"] in ("cuda-graph", "enqueue")
    session.close()


def test_double_plugin_library_travels_with_the_engine_and_loads_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = use_double(monkeypatch)
    opened: list[str] = []
    real_load = trt_plugins.load_libraries

    def opener(path: str) -> object:
        opened.append(path)
        fake.registry.all_creators.append(Creator("bev_pool_v2", "1", "deploykit"))
        return object()

    monkeypatch.setattr(trt_plugins, "load_libraries", lambda trt, paths: real_load(trt, paths, opener=opener))
    lib = tmp_path / "build" / "plugins" / "libdeploykit_plugins.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF plugin")
    options = BuildConfig(backend="tensorrt", plugins=(str(lib),))
    TensorRTBackend().build(tiny_onnx(tmp_path / "m.onnx"), options, tmp_path / "engine", profiles=PROFILES)
    meta = json.loads((tmp_path / "engine" / "engine.json").read_text())
    assert meta["plugins"][0]["file"] == "plugins/libdeploykit_plugins.so"
    assert meta["plugins"][0]["creators"] == [["bev_pool_v2", "1", "deploykit"]]
    assert (tmp_path / "engine" / "plugins" / "libdeploykit_plugins.so").read_bytes() == lib.read_bytes()
    TensorRTBackend().load(tmp_path / "engine")  # same content: not opened a second time (creators would clash)
    assert opened == [str(lib)]
    (tmp_path / "engine" / "plugins" / "libdeploykit_plugins.so").write_bytes(b"changed")
    with pytest.raises(ArtifactCorrupt, match="plugin library missing or changed"):
        TensorRTBackend().load(tmp_path / "engine")


def _fp8_skip_reason() -> str:
    if not _TRT_STATUS.available:
        return f"needs TensorRT and a GPU: {_TRT_STATUS.reason}"
    try:
        import modelopt.onnx.quantization  # noqa: F401
    except ImportError:
        return "needs NVIDIA ModelOpt (pip install 'deploykit[quant]') to write FP8 Q/DQ"
    gpus = trt_cuda.probe_driver().gpus
    if not gpus or trt_compat.parse_compute_capability(gpus[0].compute_capability) < (8, 9):
        return "FP8 needs a GPU with compute capability 8.9+"
    return ""


@pytest.mark.tensorrt
@pytest.mark.gpu
@pytest.mark.skipif(bool(_fp8_skip_reason()), reason=_fp8_skip_reason() or "runs")
def test_tensorrt_builds_fp8_qdq_from_modelopt(tmp_path: Path) -> None:
    """FP8 Q/DQ written by ModelOpt on the CPU, built by TensorRT, compared with ORT running the same graph."""
    import onnx
    from modelopt.onnx.quantization import quantize
    from onnx import TensorProto, helper, numpy_helper

    from deploykit.graph.run import session_from_onnx

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32), n)
        for n, s in (("w1", (32, 3, 3, 3)), ("w2", (64, 32, 3, 3)))
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1] * 4),
        ],
        "fp8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64, 32, 32])],
        weights,
    )
    fp32 = tmp_path / "fp32.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))
    model = tmp_path / "fp8.onnx"
    quantize(
        str(fp32),
        quantize_mode="fp8",
        calibration_data={"x": np.concatenate([feeds_for(4)] * 2)},
        calibration_eps=["cpu"],
        output_path=str(model),
    )
    backend = TensorRTBackend()
    backend.build(
        model,
        BuildConfig(backend="tensorrt"),
        tmp_path / "engine",
        profiles={"x": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))},
    )
    session, x = backend.load(tmp_path / "engine"), {"x": feeds_for(2)}
    assert rel_l2(session.infer(x)["y"], session_from_onnx(model, "onnxruntime", level="disabled").infer(x)["y"]) < 5e-2
    session.close()


@pytest.mark.tensorrt
@pytest.mark.gpu
@pytest.mark.slow
@needs_tensorrt
def test_tensorrt_converts_the_example_detector(tmp_path: Path) -> None:
    """The whole pipeline on the example detector with the tensorrt backend: export, build, parity, gate."""
    import deploykit

    config = REPO / "examples" / "detector" / "deploykit.yaml"
    result = deploykit.convert(config, workdir=tmp_path / "store", build__backend="tensorrt")
    assert result.passed and result.artifacts["engine"].manifest.summary["backend"] == "tensorrt"
