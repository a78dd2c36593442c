"""Small ONNX graphs built in code for the lint tests, and fake plugin libraries compiled with the C
compiler (real ELF files that export what a TensorRT plugin library exports: nothing here loads them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def value(name: str, elem: int = F, shape: list | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def model(
    nodes: list,
    inputs: list,
    outputs: list,
    initializers: list = (),
    opset: int = 17,
    functions: list = (),
    domains: dict | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    imports = [
        helper.make_opsetid("", opset),
        *(helper.make_opsetid(d, v) for d, v in (domains or {}).items()),
    ]
    m = helper.make_model(graph, opset_imports=imports, functions=list(functions))
    m.ir_version = 10
    return m


def conv_net(opset: int = 17) -> onnx.ModelProto:
    """x[1,3,8,8] -> Conv -> Relu -> y: clean for every TensorRT version."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return model(nodes, [value("x", F, [1, 3, 8, 8])], [value("y", F, [1, 4, 8, 8])], [init("w", w)], opset=opset)


def single(
    op: str,
    inputs: list[str],
    values: list,
    initializers: list = (),
    out_elem: int = F,
    out_shape: list | None = None,
    opset: int = 17,
    name: str = "n",
    outputs: tuple = ("y",),
    **attrs,
) -> onnx.ModelProto:
    """One node ``op`` reading ``inputs`` (graph inputs ``values`` plus ``initializers``)."""
    node = helper.make_node(op, inputs, list(outputs), name=name, **attrs)
    return model([node], values, [value(o, out_elem, out_shape) for o in outputs], initializers, opset=opset)


def rules(report, version: str | None = None) -> set[str]:
    return {f.rule for f in report.findings if version is None or version in f.versions}


def errors(report, version: str | None = None) -> set[str]:
    return {f.rule for f in report.findings if f.severity == "error" and (version is None or version in f.versions)}


LIBRARY = r"""
#include <stdint.h>
const char* const kNames[] = {NAMES};
int32_t const deploykit_tensorrt_headers[3] = {HEADERS};
void* getCreators(int32_t* n) { *n = 0; return (void*) kNames; }
void setLoggerFinder(void* f) { (void) f; }
"""


def plugin_library(
    folder: Path,
    names: tuple[str, ...],
    headers: tuple[int, int, int] | None = (10, 13, 0),
    exports: bool = True,
) -> Path:
    """A shared library shaped like a TensorRT plugin library: plugin names in its read-only data,
    ``getCreators`` exported (unless ``exports`` is False), and deploykit's headers record."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build a test library")
    folder.mkdir(parents=True, exist_ok=True)
    source = LIBRARY.replace("NAMES", ", ".join(f'"{n}"' for n in names))
    source = source.replace("HEADERS", ", ".join(map(str, headers)) if headers else "0, 0, 0")
    if headers is None:
        source = source.replace("int32_t const deploykit_tensorrt_headers[3] = {0, 0, 0};\n", "")
    if not exports:
        source = source.replace("getCreators", "notCreators")
    (folder / "lib.c").write_text(source)
    out = folder / "libfake_plugins.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-o", str(out), str(folder / "lib.c")], check=True)
    return out
