"""Hostile models and data: ONNX files that would crash or exhaust native code, point outside their
folder, hold types deploykit cannot feed; torch factories that fail; data files that are not
arrays. Each is ModelError/DataError (exit 4) naming the file and the input, tensor or function."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from tests.hostile import models
from tests.hostile.harness import Suite

# id -> (model builder, names the error line must contain)
ONNX_CASES = {
    "sequence-input": (models.sequence_input, ("'seq'", "sequence_type")),
    "map-input": (models.map_input, ("'table'", "map_type")),
    "string-input": (lambda: models.tensor_input(TensorProto.STRING, "text"), ("'text'", "string")),
    "double-input": (lambda: models.tensor_input(TensorProto.DOUBLE, "d"), ("'d'", "float64")),
    "huge-fixed-dim": (models.huge_fixed_dim, ("'wide'", "1000000000000")),
    "recursive-function": (models.recursive_function, ("local::F -> local::F",)),
    "mutual-recursion": (models.mutually_recursive, ("local::F -> local::G -> local::H -> local::F",)),
    "deep-function-chain": (lambda: models.deep_chain(200), ("nest deeper",)),
    "exponential-functions": (lambda: models.exponential(25), ("inline to",)),
    "cycle": (models.cyclic, ("cycle",)),
    "native-abort": (models.conv_rank_mismatch, ("crashed", "SIGABRT")),
    "dangling-input": (models.dangling, ("ghost",)),
    "nested-ifs": (lambda: models.nested_ifs(20), ("nest",)),
}

BYTES_CASES = {
    "empty-file": b"",
    "random-bytes": bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8)),
    "text-file": b"name: not an onnx model\n",
    "truncated": None,  # a valid model cut in half
}


EXTERNAL = {
    "offset-beyond-file": ({"offset": 10**6}, ("'w'", "beyond the end")),
    "length-beyond-file": ({"length": 10**7}, ("'w'", "beyond the end")),
    "negative-offset": ({"offset": -5}, ("'w'",)),
    "hard-link-outside": ({"link": "hard"}, ("'w'", "hard-linked")),
    "symlink-outside": ({"link": "symlink"}, ("'w'",)),
    "absolute-location": ({"location": "/etc/passwd"}, ("'w'", "outside the model's folder")),
    "parent-location": ({"location": "../secret.bin"}, ("'w'", "outside the model's folder")),
    "missing-file": ({"location": "gone.bin"}, ("gone.bin",)),
    "nul-in-location": ({"location": "w.bin\0/../../etc/passwd"}, ("'w'", "not a file name")),
}

suite = Suite()


def _model_path(case: str, folder: Path) -> Path:
    builder, _ = ONNX_CASES[case]
    return models.save(builder(), folder / f"{case}.onnx")


def _register_onnx(case: str, names: tuple[str, ...]) -> None:
    @suite.case(f"convert-{case}", 4, *names)
    def convert(folder, cfg, store, files):
        return [("convert", _model_path(case, folder / "models"), "-w", store)]


def _register_inspect(case: str) -> None:
    @suite.case(f"inspect-{case}", 4, *ONNX_CASES[case][1])
    def inspect(folder, cfg, store, files):
        return [("inspect", _model_path(case, folder / "models"))]


def _register_bytes(case: str, data: bytes | None) -> None:
    @suite.case(f"unreadable-{case}", 4, f"{case}.onnx")
    def unreadable(folder, cfg, store, files):
        path = folder / f"{case}.onnx"
        whole = models.conv().SerializeToString()
        path.write_bytes(whole[: len(whole) // 2] if data is None else data)
        return [("convert", path, "-w", store), ("inspect", path)]


def _register_external(case: str, settings: dict, names: tuple[str, ...]) -> None:
    @suite.case(f"external-{case}", 4, *names)
    def external(folder, cfg, store, files):
        path = models.with_external_data(folder / case, **settings)
        if case == "missing-file":
            (folder / case / "gone.bin").unlink()
        return [("convert", path, "-w", store), ("inspect", path)]


for _case, (_, _names) in ONNX_CASES.items():
    _register_onnx(_case, _names)
for _case in (
    "recursive-function",
    "mutual-recursion",
    "deep-function-chain",
    "exponential-functions",
    "nested-ifs",
    "native-abort",
):
    _register_inspect(_case)
for _case, _data in BYTES_CASES.items():
    _register_bytes(_case, _data)
for _case, (_settings, _names) in EXTERNAL.items():
    _register_external(_case, _settings, _names)


FAILING_FORWARD = """
import torch
from torch import nn


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, tokens, mask):
        if not torch.jit.is_tracing():  # as nested tensors do on a fully padded mask, in eager mode only
            raise RuntimeError("to_padded_tensor: at least one constituent tensor should have non-zero numel")
        return self.proj(tokens) * mask.unsqueeze(-1)


def build():
    return Masked().eval()
"""


def _npz_with_object(path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:  # np.savez refuses to write objects without pickle: write it by hand
        import io

        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.array([None, 1], dtype=object), allow_pickle=True)
        z.writestr("x.npy", buf.getvalue())


def _npz_claiming_huge(path: Path) -> None:
    import io
    import zipfile

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", buf.getvalue() + b"\0" * 64)


def _npy_truncated(path: Path) -> None:
    np.save(path, np.ones((2, 3, 8, 8), np.float32))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])


def _npy_strings(path: Path) -> None:
    np.save(path, np.array(["a", "b"]))


def _npz_not_zip(path: Path) -> None:
    path.write_bytes(b"PK\x03\x04 this is not really a zip")


def _npy_bomb_header(path: Path) -> None:
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**7, 10**7)})


DATA_CASES = {
    "npz-object-array": ("calib.npz", _npz_with_object, ("'x'", "object")),
    "npz-claims-terabytes": ("calib.npz", _npz_claiming_huge, ("'x'",)),
    "npy-truncated": ("calib.npy", _npy_truncated, ("calib.npy",)),
    "npy-strings": ("calib.npy", _npy_strings, ("calib.npy",)),
    "npz-not-zip": ("calib.npz", _npz_not_zip, ("calib.npz",)),
    "npy-bomb-header": ("calib.npy", _npy_bomb_header, ("calib.npy",)),
}


def _register_data(case: str, name: str, write, names: tuple[str, ...]) -> None:
    @suite.case(f"data-{case}", 4, name, *names)
    def data(folder, cfg, store, files):
        (folder / "calib").mkdir()
        write(folder / "calib" / name)
        return [("quantize", cfg, "--precision", "int8", "--calib-data", folder / "calib" / name, "-w", store)]


for _case, (_name, _write, _names) in DATA_CASES.items():
    _register_data(_case, _name, _write, _names)


@suite.case("data-corrupt-image", 4, "bad.png")
def _corrupt_image(folder, cfg, store, files):
    (folder / "images").mkdir()
    (folder / "images" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    cfg.write_text(cfg.read_text() + "calibration:\n  folder: ../images\n  preprocess: {resize: [8, 8]}\n")
    return [("quantize", cfg, "--precision", "int8", "-w", store)]


@suite.case("data-fifo-is-not-read", 4, "arrays", timeout=60)
def _fifo(folder, cfg, store, files):
    (folder / "arrays").mkdir()
    os.mkfifo(folder / "arrays" / "blocking.npy")
    return [("quantize", cfg, "--precision", "int8", "--calib-data", folder / "arrays", "-w", store)]


@suite.case(
    "torch-error-in-export-check",
    4,
    "RuntimeError",
    "to_padded_tensor",
    "tokens=[1, 3, 4]",
    "mask=[1, 3]",
    store_kept=False,
)
def _torch_error(folder, cfg, store, files):
    (folder / "masked.py").write_text(FAILING_FORWARD)
    cfg = folder / "deploykit.yaml"
    cfg.write_text(
        textwrap.dedent("""
        name: masked
        source: {factory: "masked:build"}
        inputs:
          - {name: tokens, shape: [1, 3, 4]}
          - {name: mask, shape: [1, 3]}
        export: {exporter: torchscript}
        gate: {allow_missing_target: true}
    """)
    )
    return [("export", cfg, "-w", store)]


@suite.case("factory-does-not-import", 4, "broken", store_kept=False)
def _broken_factory(folder, cfg, store, files):
    (folder / "broken.py").write_text("def build(:\n")
    cfg = folder / "deploykit.yaml"
    cfg.write_text(
        'name: b\nsource: {factory: "broken:build"}\ninputs: [{name: x, shape: [1, 4]}]\n'
        "gate: {allow_missing_target: true}\n"
    )
    return [("convert", cfg, "-w", store)]


def _non_utf8(field: bytes, skip: int = 0) -> object:
    def make(folder, cfg, store, files):
        data = bytearray(models.conv().SerializeToString())
        data[data.index(field) + skip] = 0x80  # protobuf hands such a string back as bytes
        (folder / "bad.onnx").write_bytes(bytes(data))
        return [("convert", folder / "bad.onnx", "-w", store), ("inspect", folder / "bad.onnx")]

    return make


suite.case("non-utf8-op-type", 4, "not UTF-8 text", slow=True)(_non_utf8(b"Relu"))
suite.case("non-utf8-dim-name", 4, "not UTF-8 text", slow=True)(_non_utf8(b"batch"))
suite.case("non-utf8-tensor-name", 4, "not UTF-8 text", slow=True)(_non_utf8(b"\x12\x01y", skip=2))


# One case of each kind runs in the default suite; every run here imports onnx (a second of CPU).
DEFAULT = {
    "convert-recursive-function",
    "inspect-recursive-function",
    "convert-sequence-input",
    "convert-native-abort",
    "convert-exponential-functions",
    "unreadable-truncated",
    "external-offset-beyond-file",
    "external-hard-link-outside",
    "data-npz-object-array",
    "torch-error-in-export-check",
}
suite.in_default_suite(DEFAULT)


@pytest.fixture(scope="module")
def outcomes(request, built, tmp_path_factory):
    return suite.run_selected(request, tmp_path_factory.mktemp("model-cases"), built)


@pytest.mark.parametrize("case", suite.params())
def test_hostile_model_or_data(case, outcomes):
    suite.check(outcomes[case])
