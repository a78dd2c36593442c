"""Streaming calibration ranges: exact min/max, real entropy, bounded tensors, NaN found by name."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from deploykit.errors import ModelError
from deploykit.quant.ranges import RangeSettings, collect_ranges, read_ranges, write_ranges
from tests.quant import models


def identity_model(op="Identity", width=64):
    node = helper.make_node(op, ["x"], ["y"], name="op")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def heavy_tailed(n=40, seed=0, width=64):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_t(2.5, (1, width)).astype(np.float32) * 3} for _ in range(n)]


def test_max_ranges_equal_numpy_over_all_samples():
    model = models.cnn((8,))
    samples = models.images(6, seed=5)
    ranges = collect_ranges(model, samples, RangeSettings("max"))
    from deploykit.graph.run import session_from_onnx

    session = session_from_onnx(model, "as_written", expose=("relu0",))
    values = np.concatenate([session.run_all(s)["relu0"].ravel() for s in samples])
    assert ranges["relu0"].min == pytest.approx(values.min()) and ranges["relu0"].max == pytest.approx(values.max())
    assert ranges["x"].max == pytest.approx(max(float(s["x"].max()) for s in samples))
    assert ranges["relu0"].amax == ranges["relu0"].absmax and ranges["relu0"].method == "max"


def test_mean_max_is_the_mean_of_each_samples_peak_and_fills_no_histogram():
    from deploykit.quant.ranges import calibrate

    rng = np.random.default_rng(3)
    samples = [{"x": (rng.uniform(-1, 1, (1, 64)) * peak).astype(np.float32)} for peak in rng.uniform(0.5, 4, 9)]
    peaks = [float(np.abs(s["x"]).max()) for s in samples]
    result = calibrate(identity_model(), samples, RangeSettings("mean_max"), ("max", "mean_max"))
    got, top = result.sets["mean_max"]["y"], result.sets["max"]["y"]
    assert got.method == "mean_max" and got.amax == pytest.approx(np.mean(peaks), rel=1e-6)
    assert top.amax == pytest.approx(max(peaks)) and got.amax < top.amax
    assert got.min == top.min and got.hi == pytest.approx(min(top.max, got.amax))
    assert not result.statistics.stats["y"].counts.any()  # no histogram was binned for it
    bounded = calibrate(identity_model(), samples, RangeSettings("mean_max"), ("mean_max",), bounded={"y"})
    assert bounded.sets["mean_max"]["y"].method == "max"  # a bounded tensor (Sigmoid, Softmax) keeps max


def test_entropy_range_differs_from_max_on_a_heavy_tailed_tensor():
    # onnxruntime's quantize_static gives its entropy calibrator as many bins as quantized levels,
    # so its "entropy" equals max; deploykit's is computed here and must clip the tail.
    samples = heavy_tailed(width=4096)  # KL on a histogram needs the values to fill it: 160 thousand
    entropy = collect_ranges(identity_model(width=4096), samples, RangeSettings("entropy"))["y"]
    maximum = collect_ranges(identity_model(width=4096), samples, RangeSettings("max"))["y"]
    assert entropy.method == "entropy"
    assert entropy.amax < 0.5 * maximum.amax
    assert entropy.lo == pytest.approx(max(maximum.min, -entropy.amax))


def test_entropy_never_clips_below_the_mean_of_each_samples_peak():
    """Values every sample reaches are the tensor's range, not a tail to cut: the KL search alone cut
    GELU outputs of a real recognizer to a sixth of their range. The range keeps the mean per-sample
    peak, as ONNX Runtime's entropy calibrator keeps its first batch's range; rarer values it clips."""
    from deploykit.quant import thresholds
    from deploykit.quant.ranges import calibrate

    samples = heavy_tailed(width=4096)
    stats = calibrate(identity_model(width=4096), samples, RangeSettings("entropy"), ("histogram",)).statistics
    peak = float(np.mean([np.abs(s["x"]).max() for s in samples]))
    assert thresholds.entropy(*stats.stats["y"].trimmed()) < 0.7 * peak  # the plain search goes below it
    got = stats.ranges("entropy")["y"]
    assert got.method == "entropy" and got.amax == pytest.approx(peak, rel=1e-5) and got.amax < 0.5 * got.absmax


@pytest.mark.parametrize("method", ["entropy", "mse"])
def test_a_tensor_far_from_zero_is_never_clipped_wholesale(method):
    """Class logits all in [-8, -3]: entropy's KL is ~0 at a threshold below every value (all of it
    piles into the last bin), which clipped the example detector's scores to rel-L2 14."""
    rng = np.random.default_rng(1)
    samples = [{"x": rng.uniform(-8.0, -4.0, (1, 64)).astype(np.float32)} for _ in range(40)]
    # |x| spans [0, 8] in 2048 bins; a lone value in bin 783, the last bin below the candidate threshold
    # at bin 784: clipped there, everything piles into that one bin and KL(P || Q) is 0
    samples[0]["x"][0, :2] = (-8.0, -783.5 * 8.0 / 2048)
    r = collect_ranges(identity_model(), samples, RangeSettings(method), tensors=["x"])["x"]
    values = np.concatenate([s["x"].ravel() for s in samples])
    clipped = np.mean(values < r.lo)
    assert clipped <= 0.011 and r.hi >= values.max() - 1e-6  # at most the allowed 1 %, and only the far tail


def test_outputs_before_their_layout_ops_keep_max_calibration():
    """A box head's Conv output reaches the model output through Transpose/Reshape: it is the result."""
    from deploykit.quant.prepare import through_layout

    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Transpose", ["a"], ["b"], name="t", perm=[1, 0]),
        helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
        helper.make_node("Reshape", ["s", "shape"], ["s2"], name="r"),
        helper.make_node("Concat", ["b", "c"], ["y"], name="cat", axis=0),
        helper.make_node("Neg", ["x"], ["c"], name="neg"),
        helper.make_node("Add", ["s2", "x"], ["z"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
    )
    model = helper.make_model(graph)
    assert through_layout(model, {"y", "z"}, {"s"}) == {"y", "z", "b", "c", "a", "s", "s2"}


def test_bounded_outputs_keep_max_calibration_whatever_the_method():
    samples = heavy_tailed()
    ranges = collect_ranges(identity_model("Sigmoid"), samples, RangeSettings("entropy"), bounded={"y"})
    assert ranges["y"].method == "max" and ranges["y"].amax == pytest.approx(ranges["y"].max)
    assert ranges["x"].method == "entropy"


def test_calibration_reads_the_samples_once_for_every_method():
    calls = []

    def factory():
        calls.append(1)
        return iter(heavy_tailed(5))

    from deploykit.quant.ranges import calibrate
    from deploykit.quant.reader import SampleStream

    result = calibrate(
        identity_model(), SampleStream(factory), RangeSettings("percentile"), ("max", "percentile", "mse", "entropy")
    )
    assert len(calls) == 1
    assert {r.method for r in (s["y"] for s in result.sets.values())} == {"max", "percentile", "mse", "entropy"}
    later = result.statistics.ranges("entropy")  # derived again without reading the samples
    assert len(calls) == 1 and later["y"] == result.sets["entropy"]["y"]


def test_nan_in_an_activation_names_the_tensor_and_node():
    node = helper.make_node("Log", ["x"], ["y"], name="the_log")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="NaN in tensor 'y' \\(node 'the_log'\\)"):
        collect_ranges(model, [{"x": np.array([[1, 2, -1, 3]], np.float32)}], RangeSettings("max"))


def test_ranges_file_round_trips(tmp_path):
    ranges = collect_ranges(identity_model(), heavy_tailed(4), RangeSettings("max"))
    write_ranges(tmp_path / "r.json", ranges, RangeSettings("max"), {"samples": 4})
    assert read_ranges(tmp_path / "r.json") == ranges


def test_held_out_samples_stay_out_of_the_ranges():
    from deploykit.quant.ranges import calibrate

    samples = heavy_tailed(40)
    samples[0] = {"x": np.full((1, 64), 1000.0, np.float32)}  # an extreme first sample
    result = calibrate(identity_model(), samples, RangeSettings("percentile"), ("max", "percentile"), hold_out=4)
    assert [s["x"][0, 0] for s in result.held_out][0] == 1000.0 and len(result.held_out) == 4
    assert result.sets["max"]["y"].max < 1000.0 and result.seen == 40
    short = calibrate(identity_model(), samples[:8], RangeSettings("max"), ("max",), hold_out=8)
    assert len(short.held_out) == 2  # at most a quarter of a short stream is held out
    assert short.sets["max"]["y"].max < 1000.0


def test_per_tensor_choice_clips_only_the_tensor_whose_histogram_gains_from_it():
    """Two tensors, one heavy-tailed (a few far outliers) and one uniform: one histogram each; the
    per-tensor choice clips the first (MSE) and keeps max for the second."""
    from deploykit.quant.ranges import calibrate

    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Identity", ["x"], ["heavy"], name="a"),
        helper.make_node("Identity", ["u"], ["flat"], name="b"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 65536]),
            helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 65536]),
        ],
        [
            helper.make_tensor_value_info("heavy", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("flat", TensorProto.FLOAT, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # a Gaussian bulk and one value in 1.3 million 60x larger: clipping it costs less than the coarse
    # steps it forces on every other value (at 1 in 80 thousand it does not: MSE keeps it, rightly)
    samples = [
        {
            "x": rng.standard_normal((1, 65536)).astype(np.float32),
            "u": rng.uniform(-1, 1, (1, 65536)).astype(np.float32),
        }
        for _ in range(20)
    ]
    samples[7]["x"][0, 100] = 60.0
    stats = calibrate(model, samples, RangeSettings("auto"), ("histogram",)).statistics
    choice = stats.per_tensor(only={"heavy", "flat"})
    assert choice == {"heavy": "mse", "flat": "max"}
    ranges = stats.ranges(choice)
    assert ranges["heavy"].method == "mse" and ranges["heavy"].amax < 0.5 * ranges["heavy"].absmax
    assert ranges["flat"].method == "max" and ranges["flat"].amax == ranges["flat"].absmax


def test_tensors_holding_the_same_values_are_read_once_and_share_their_ranges(monkeypatch):
    """Identity/Reshape/Transpose outputs hold their input's values: the tap reads the input only."""
    from deploykit.quant import ranges as r

    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Identity", ["a"], ["b"], name="id"),
        helper.make_node("Reshape", ["b", "shape"], ["c"], name="reshape"),
        helper.make_node("Neg", ["c"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [8, 8])],
    )
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert r.same_values(model, ["x", "a", "b", "c", "y"]) == {"b": "a", "c": "a"}
    exposed = []
    real = r._Tap.__init__
    monkeypatch.setattr(r._Tap, "__init__", lambda self, m, names: exposed.extend(names) or real(self, m, names))
    ranges = collect_ranges(model, heavy_tailed(8), RangeSettings("percentile"))
    assert "a" in exposed and "b" not in exposed and "c" not in exposed
    assert ranges["b"] == ranges["c"] == ranges["a"] and ranges["a"].method == "percentile"
    assert ranges["y"].min == pytest.approx(-ranges["a"].max)


def test_histograms_take_every_kth_sample_and_min_max_every_sample():
    from deploykit.quant import ranges as r

    n = 16 + 3 * r.HISTOGRAM_SAMPLES  # a stream three times longer than the histograms need
    samples = heavy_tailed(n)
    samples[60] = {"x": np.full((1, 64), 500.0, np.float32)}  # folded 44th: not a histogram sample (every 3rd)
    result = r.calibrate(
        identity_model(), samples, RangeSettings("percentile"), ("max", "histogram"), hold_out=16, expected=n
    )
    st = result.statistics.stats["y"]
    every = -(-(n - 16) // r.HISTOGRAM_SAMPLES)
    assert every == 3 and st.counts.sum() == 64 * r.HISTOGRAM_SAMPLES  # a third of the samples, 64 values each
    assert st.hi == 500.0 and result.sets["max"]["y"].amax == 500.0
    assert result.statistics.ranges("percentile")["y"].amax < 100.0  # the outlier sample is not in the histogram


@pytest.mark.parametrize("n", [10, 40])  # a short stream gives held-out samples back; a long one bins every k-th
def test_samples_run_side_by_side_give_the_statistics_one_at_a_time_gives(monkeypatch, n):
    """The histogram's edge grows from the first sample folded in: side-by-side runs fold in order."""
    from deploykit.graph import parallel
    from deploykit.quant import ranges as r

    model = models.cnn((8,))
    samples = models.images(n, size=16, seed=3)
    for i, scale in ((8, 0.5), (9, 8.0)):  # the first two folded in: which comes first sets the edge
        samples[i] = {k: v * scale for k, v in samples[i].items()}

    def run(runs):
        monkeypatch.setattr(parallel, "runs_at_once", lambda: runs)
        ticks = []
        result = r.calibrate(
            model,
            samples,
            RangeSettings("auto"),
            ("max", "percentile", "mse"),
            hold_out=8,
            expected=n,
            progress=ticks.append,
        )
        return result, len(ticks)

    monkeypatch.setattr(r, "HISTOGRAM_SAMPLES", 16)  # 40 samples: every other one is binned
    (one, ticks_one), (two, ticks_two) = run(1), run(2)
    assert ticks_one == ticks_two == n
    assert one.sets == two.sets and len(one.held_out) == len(two.held_out)
    for name, st in one.statistics.stats.items():
        other = two.statistics.stats[name]
        assert (st.edge, st.lo, st.hi, st.peaks) == (other.edge, other.lo, other.hi, other.peaks)
        assert np.array_equal(st.counts, other.counts)
    assert any(st.counts.sum() for st in one.statistics.stats.values())


def test_a_tap_too_large_for_memory_runs_one_sample_at_a_time_on_every_core(monkeypatch):
    from deploykit.graph import parallel
    from deploykit.quant import prepare
    from deploykit.quant.ranges import _Tap

    model = prepare.infer_shapes(models.cnn((8,)))
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    monkeypatch.setattr(parallel, "_memory", lambda: 1e12)

    def threads(tap):
        return tap.session._session.get_session_options().intra_op_num_threads

    side_by_side = _Tap(model, [t for n in model.graph.node for t in n.output])
    assert side_by_side.runs == 2 and threads(side_by_side) == 1
    monkeypatch.setattr(parallel, "_memory", lambda: 1e3)  # a few kB: the 8x16x16 activations do not fit
    alone = _Tap(model, [t for n in model.graph.node for t in n.output])
    assert alone.runs == 1 and threads(alone) == 2
