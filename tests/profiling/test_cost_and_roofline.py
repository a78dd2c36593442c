"""The cost model (FLOPs, bytes) and the roofline columns, against closed-form counts and hand computations."""

from __future__ import annotations

import math

import pytest

from deploykit.profiling.cost import kind_of, layer_cost
from deploykit.profiling.layers import Layer, Tensor, compute_precision
from deploykit.profiling.peaks import Peaks, monotonic
from deploykit.profiling.summary import layer_row, render_markdown, summarize


def conv_layer(
    n: int, cin: int, cout: int, hw: int, k: int, groups: int = 1, op: str = "Conv", dtype: str = "fp32"
) -> Layer:
    x = Tensor(dtype, (n, cin, hw, hw))
    w = Tensor(dtype, (cout, cin // groups, k, k))
    y = Tensor(dtype, (n, cout, hw, hw))
    return Layer("conv", op, compute_precision(op, [x, w]), [x, w], [y])


@pytest.mark.parametrize(
    ("cin", "cout", "k", "groups"), [(3, 16, 3, 1), (32, 32, 3, 32), (64, 128, 1, 1), (8, 16, 5, 2)]
)
def test_conv_flops_are_two_macs_per_output_element_and_weight(cin, cout, k, groups) -> None:
    n, hw = 2, 7
    layer = conv_layer(n, cin, cout, hw, k, groups)
    macs = n * cout * hw * hw * (cin // groups) * k * k  # each output element: Cin/groups x k x k multiply-adds
    cost = layer_cost(layer)
    assert cost.kind == "conv" and cost.flops == 2 * macs
    assert cost.bytes == 4 * (n * cin * hw * hw + cout * (cin // groups) * k * k + n * cout * hw * hw)


def test_qlinearconv_reads_its_weight_at_input_3_and_computes_in_int8() -> None:
    x, scale, zero = Tensor("uint8", (1, 8, 5, 5)), Tensor("fp32", ()), Tensor("uint8", ())
    w = Tensor("int8", (4, 8, 3, 3))
    layer = Layer(
        "q", "QLinearConv", "", [x, scale, zero, w, scale, zero, scale, zero], [Tensor("uint8", (1, 4, 5, 5))]
    )
    assert compute_precision("QLinearConv", layer.inputs) == "int8"
    assert layer_cost(layer).flops == 2 * (4 * 5 * 5) * (8 * 3 * 3)


def test_matmul_gemm_pool_reduce_movement() -> None:
    a, b = Tensor("fp32", (4, 6, 32)), Tensor("fp32", (32, 10))
    assert layer_cost(Layer("m", "MatMul", "fp32", [a, b], [Tensor("fp32", (4, 6, 10))])).flops == 2 * 4 * 6 * 10 * 32
    gemm = Layer(
        "g",
        "Gemm",
        "fp32",
        [Tensor("fp32", (12, 5)), Tensor("fp32", (12, 7))],
        [Tensor("fp32", (5, 7))],
        attributes={"transA": 1},
    )
    assert layer_cost(gemm).flops == 2 * 5 * 7 * 12
    pool = Layer(
        "p",
        "MaxPool",
        "fp32",
        [Tensor("fp32", (1, 3, 8, 8))],
        [Tensor("fp32", (1, 3, 4, 4))],
        attributes={"kernel_shape": [2, 2]},
    )
    assert layer_cost(pool).flops == 3 * 4 * 4 * 4
    gap = Layer("r", "GlobalAveragePool", "fp32", [Tensor("fp32", (1, 3, 8, 8))], [Tensor("fp32", (1, 3, 1, 1))])
    assert layer_cost(gap).flops == 3 * 8 * 8
    move = Layer("t", "Transpose", "fp16", [Tensor("fp16", (2, 3, 4))], [Tensor("fp16", (4, 3, 2))])
    assert layer_cost(move).flops == 0 and layer_cost(move).bytes == 2 * 2 * 24
    assert kind_of("Sigmoid") == "elementwise"
    sig = Layer("s", "Sigmoid", "fp32", [Tensor("fp32", (10,))], [Tensor("fp32", (10,))])
    assert layer_cost(sig).flops == 40


PEAKS = Peaks("test machine", {"fp32": 100e9, "int8": 400e9}, {1 << 20: 200e9, 64 << 20: 20e9})


def test_roofline_columns_by_hand() -> None:
    """A conv above the ridge is compute-bound; its floor is FLOPs / peak and its distance is achieved / peak."""
    layer = conv_layer(1, 64, 64, 56, 3)
    cost = layer_cost(layer)
    layer.times_ms = [4.0, 5.0, 30.0]  # the median ignores the one slow run
    row = layer_row(layer, total_ms=10.0, peaks=PEAKS)
    assert row["ms"] == 5.0 and row["share"] == 0.5
    bandwidth = 20e9 if cost.bytes > 1 << 20 else 200e9
    assert row["memory_peak"] == bandwidth
    assert cost.intensity > 100e9 / bandwidth and row["bound"] == "compute"
    assert math.isclose(row["achieved_flops"], cost.flops / 5e-3)
    assert math.isclose(row["roofline_flops"], 100e9) and math.isclose(row["of_roofline"], cost.flops / 5e-3 / 100e9)
    assert math.isclose(row["floor_ms"], max(cost.flops / 100e9, cost.bytes / bandwidth) * 1e3)


def test_memory_bound_layers_are_judged_by_bandwidth_at_their_working_set() -> None:
    small = Layer(
        "relu", "Relu", "fp32", [Tensor("fp32", (1, 64, 32, 32))], [Tensor("fp32", (1, 64, 32, 32))], times_ms=[0.1]
    )  # 512 KiB moved: fits the 1 MiB tier
    row = layer_row(small, 1.0, PEAKS)
    assert row["bound"] == "memory" and row["memory_peak"] == 200e9
    nbytes = 2 * 64 * 32 * 32 * 4
    assert math.isclose(row["floor_ms"], nbytes / 200e9 * 1e3)
    assert math.isclose(row["roofline_flops"], (64 * 32 * 32) / nbytes * 200e9)
    copy = Layer(
        "t", "Transpose", "fp32", [Tensor("fp32", (4096, 4096))], [Tensor("fp32", (4096, 4096))], times_ms=[10.0]
    )
    row = layer_row(copy, 10.0, PEAKS)  # no FLOPs: the distance from the roof is in bandwidth, at the DRAM tier
    assert row["memory_peak"] == 20e9 and math.isclose(row["of_roofline"], (2 * 4096 * 4096 * 4 / 10e-3) / 20e9)


def test_int8_layers_use_the_int8_peak_and_unmeasured_precisions_fall_back() -> None:
    assert PEAKS.compute("int8") == (400e9, "int8")
    assert PEAKS.compute("fp16") == (100e9, "fp32")
    assert PEAKS.compute("fp8") == (400e9, "int8")
    assert PEAKS.bandwidth_for(10) == 200e9 and PEAKS.bandwidth_for(1 << 30) == 20e9


def test_monotonic_bandwidth_repairs_noisy_cache_tiers() -> None:
    assert monotonic({256: 2e9, 4096: 40e9, 1 << 26: 5e9}) == {256: 40e9, 4096: 40e9, 1 << 26: 5e9}


def test_summary_aggregates_top_n_op_types_precisions_and_the_floor() -> None:
    layers = [
        conv_layer(1, 16, 16, 28, 3),
        conv_layer(1, 16, 32, 28, 1, op="QLinearConv", dtype="uint8"),
        Layer("relu", "Relu", "fp32", [Tensor("fp32", (1, 16, 28, 28))], [Tensor("fp32", (1, 16, 28, 28))]),
    ]
    layers[1].inputs = [layers[1].inputs[0], Tensor("fp32", ()), Tensor("uint8", ()), Tensor("int8", (32, 16, 1, 1))]
    for layer, name, times in zip(layers, ("a", "b", "c"), ([3.0], [1.0], [0.5, 0.5]), strict=True):
        layer.name, layer.times_ms = name, times
    report = summarize(layers, PEAKS, top=2, model="m", backend="onnxruntime")
    assert report["top"] == ["a", "b"] and [r["name"] for r in report["layers"]] == ["a", "b", "c"]
    assert math.isclose(report["total_ms"], 4.5) and math.isclose(sum(r["share"] for r in report["layers"]), 1.0)
    by_op = {g["op_type"]: g for g in report["by_op_type"]}
    assert by_op["Conv"]["ms"] == 3.0 and by_op["QLinearConv"]["count"] == 1
    assert {g["precision"]: g["ms"] for g in report["by_precision"]} == {"fp32": 3.5, "int8": 1.0}
    assert math.isclose(report["floor_ms"], sum(r["floor_ms"] for r in report["layers"]))
    text = render_markdown(report)
    assert "| `a` | Conv | fp32 |" in text and "Roofline floor" in text and "`c`" not in text.split("### By op")[0]


def test_summary_without_peaks_says_why() -> None:
    layer = conv_layer(1, 3, 8, 8, 3)
    layer.times_ms = [1.0]
    report = summarize([layer], None, top=5, roofline_note="no GPU peaks")
    assert "floor_ms" not in report and "of_roofline" not in report["layers"][0]
    assert "No roofline: no GPU peaks." in render_markdown(report)
