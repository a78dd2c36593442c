"""Shared by the Python-side plugin tests: the numpy references and input generators (those of
test_native.py, so every path is held to one reference), the CPU library built once per session,
and small ONNX models holding one plugin node."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.plugins.test_native import (  # noqa: F401  (re-exported for the tests)
    bev_pool_reference,
    make_bev_inputs,
    make_pillar_inputs,
    pillar_scatter_reference,
)

BEV_NAMES = ("depth", "feat", "ranks_depth", "ranks_feat", "ranks_bev", "interval_starts", "interval_lengths")
PILLAR_NAMES = ("features", "coords", "num_pillars")

# (B, N, D, H, W, C, bev_shape): a single point, channels 1 and 80, Z > 1, batch 2.
BEV_CASES = {
    "tiny": (1, 1, 1, 1, 1, 1, (1, 1, 1)),
    "B2-C16": (2, 2, 8, 4, 6, 16, (1, 8, 8)),
    "C1-Z2": (1, 3, 5, 3, 4, 1, (2, 3, 3)),
    "B2-C80": (2, 2, 10, 4, 8, 80, (1, 16, 16)),
}
# (B, P, C, grid, num_pillars, duplicates): grid corners come first in make_pillar_inputs.
PILLAR_CASES = {
    "B2-padded": (2, 8, 3, (10, 12), [8, 5], False),
    "all-cells": (1, 12, 4, (3, 4), [12], False),
    "none-live": (3, 6, 2, (4, 4), [0, 6, 0], False),
    "1x1": (1, 1, 1, (1, 1), [1], False),
    "duplicates": (1, 20, 5, (6, 7), [20], True),
}


@pytest.fixture(scope="session")
def cpu_kernels(tmp_path_factory: pytest.TempPathFactory):
    """The C++ CPU kernels built once per session (deploykit's own build path) and bound with ctypes."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake not on PATH")
    from deploykit.plugins.build import BuildOptions, build_plugins
    from deploykit.plugins.native import CpuKernels

    result = build_plugins(
        tmp_path_factory.mktemp("plugins-cpu-py"),
        BuildOptions(cuda=False, warnings_as_errors=True, targets=("deploykit_plugins_cpu",)),
    )
    return CpuKernels(Path(result.outputs["cpu"]))


def plugin_model(op_type: str, attrs: dict, *, float_type: int | None = None, opset: int = 18, bodies: bool = True):
    """A model holding one plugin node with the given attributes (given a body unless ``bodies`` is False)."""
    from onnx import TensorProto, helper

    from deploykit.plugins.descriptions import description
    from deploykit.plugins.onnx_functions import attach_bodies

    op = description(op_type)
    float_type = float_type or TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info(
            t.name,
            TensorProto.INT32 if t.dtype == "int32" else float_type,
            [d if isinstance(d, int) else None for d in t.shape],
        )
        for t in op.inputs
    ]
    output = helper.make_tensor_value_info("out", float_type, [None] * len(op.outputs[0].shape))
    node = helper.make_node(
        op_type,
        [t.name for t in op.inputs],
        ["out"],
        name="plugin",
        domain="deploykit",
        plugin_version="1",
        plugin_namespace="deploykit",
        **attrs,
    )
    graph = helper.make_graph([node], "one_plugin", inputs, [output])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("deploykit", 1)]
    )
    return attach_bodies(model)[0] if bodies else model


def run_onnx(model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # the tests read the errors from the exception, not ORT's log
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]
