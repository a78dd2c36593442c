"""Elementwise parity metrics on arrays with known answers."""

import json
import math

import numpy as np
import pytest

from deploykit.config import FP32_TOLERANCE, ParityConfig, QuantizeConfig, Tolerance, parity_preset
from deploykit.metrics.elementwise import SNR_CAP_DB, ErrorAccumulator, compare, vacuity, violations
from deploykit.store import jsonio


def test_scaled_output_has_known_metrics():
    ref = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    m = compare(ref, ref * 1.01)
    assert m["rel_l2"] == pytest.approx(0.01, rel=1e-4)
    assert m["snr_db"] == pytest.approx(40.0, abs=1e-3)  # -20 log10(0.01)
    assert m["cosine"] == pytest.approx(1.0, abs=1e-9)  # a scale does not change direction
    assert m["max_abs"] == pytest.approx(0.01 * np.abs(ref).max(), rel=1e-4)
    assert m["max_rel"] == pytest.approx(0.01, rel=1e-4)
    assert m["nonfinite"] == 0


def test_identical_outputs_cap_snr_and_stay_json_safe():
    ref = np.arange(10, dtype=np.float32)
    m = compare(ref, ref.copy())
    assert m["snr_db"] == SNR_CAP_DB and m["rel_l2"] == 0 and m["max_abs"] == 0
    json.loads(jsonio.dumps({"m": m, "inf": math.inf, "nan": math.nan}))  # strict JSON, no Infinity tokens


def test_max_rel_ignores_elements_below_the_floor():
    ref = np.array([100.0, 1e-6, 50.0])
    got = np.array([101.0, 2e-6, 50.0])  # the tiny element is 100 % off, but it is noise
    assert compare(ref, got, rel_floor=1e-2)["max_rel"] == pytest.approx(0.01)
    assert compare(ref, got, rel_floor=0.0)["max_rel"] == pytest.approx(1.0)


def test_nan_in_candidate_is_counted_and_the_rest_still_measured():
    ref = np.ones(8, np.float32) * np.arange(8)
    got = ref.copy()
    got[3] = np.nan
    m = compare(ref, got)
    assert m["nonfinite"] == 1 and m["max_abs"] == 0.0
    [why] = violations(m, FP32_TOLERANCE)
    assert (why.code, why.metric, str(why)) == (
        "nonfinite",
        "nonfinite",
        "1 NaN/Inf values the reference does not have",
    )


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="differs from the reference"):
        compare(np.zeros((2, 3)), np.zeros((3, 2)))


@pytest.mark.parametrize(
    "ref, code",
    [
        (np.zeros(16), "reference_zeros"),
        (np.full(16, 3.5), "reference_constant"),
        (np.linspace(0, 1e-10, 16), "reference_tiny"),
        (np.array([1.0, np.nan, 2.0]), "reference_nonfinite"),
    ],
)
def test_vacuous_references_are_named(ref, code):
    assert vacuity(compare(ref, ref), vacuous_below=1e-6).code == code


def test_real_reference_is_not_vacuous():
    ref = np.random.default_rng(1).standard_normal(16)
    assert vacuity(compare(ref, ref), vacuous_below=1e-6) is None


def test_violations_skip_unset_and_exempt_checks():
    m = compare(np.array([0.0, 1.0]), np.array([0.0, 0.0]))  # one flipped pixel: max_abs 1.0
    tol = Tolerance(max_abs=0.1, rel_l2=None, cosine=None)
    [above] = violations(m, tol)
    assert (above.code, above.metric, str(above)) == ("above_limit", "max_abs", "max_abs 1 > 0.1")
    assert violations(m, tol, skip=("max_abs",)) == []
    [below] = violations(m, Tolerance(cosine=0.99))
    assert (below.code, below.metric, str(below)) == ("below_limit", "cosine", "cosine 0 < 0.99")


def test_tolerance_inherits_output_then_default_then_precision_preset():
    int8 = parity_preset(QuantizeConfig(precision="int8"))
    q = QuantizeConfig(precision="int8").tolerance()
    assert (int8.rel_l2, int8.cosine, int8.max_abs) == (q.rel_l2, q.cosine, None)  # one source of truth
    parity = ParityConfig(default=Tolerance(rel_l2=0.05), outputs={"logits": Tolerance(cosine=0.9)})
    logits = parity.tolerance("logits", int8)
    assert logits.cosine == 0.9 and logits.rel_l2 == 0.05 and logits.max_abs is None  # quantized: no max_abs
    assert parity.tolerance("other", int8).cosine == q.cosine
    fp32 = ParityConfig().tolerance("x")
    assert (fp32.max_abs, fp32.mean_abs, fp32.rel_l2, fp32.cosine) == (1e-3, 1e-4, 1e-4, 0.9999)
    assert parity_preset(QuantizeConfig(precision="fp16")).rel_l2 > fp32.rel_l2


def test_accumulator_keeps_the_worst_sample_and_a_histogram():
    acc = ErrorAccumulator(rel_floor=1e-2)
    ref = np.random.default_rng(2).standard_normal(100)
    acc.add(ref, ref * 1.001)
    acc.add(ref, ref * 1.1)
    acc.add(ref, ref)
    r = acc.result()
    assert r["worst_sample"] == 1
    assert r["metrics"]["rel_l2"] == pytest.approx(0.1, rel=1e-6)
    assert r["per_sample_rel_l2"][2] == 0.0
    h = r["abs_error_histogram"]
    assert sum(h["counts"]) + h["zeros"] == 300 and h["zeros"] >= 100


def test_an_accumulator_without_a_histogram_measures_the_same():
    rng = np.random.default_rng(3)
    ref = rng.standard_normal(5000)
    pairs = [(ref, ref + rng.normal(0, s, ref.shape)) for s in (1e-3, 1e-1, 0.0)]
    binned, plain = ErrorAccumulator(1e-2, atol=1e-2), ErrorAccumulator(1e-2, atol=1e-2, histogram=False)
    for r, g in pairs:
        assert binned.add(r, g) == plain.add(r, g)
    with_hist, without = binned.result(), plain.result()
    assert "abs_error_histogram" not in without
    assert without == {k: v for k, v in with_hist.items() if k != "abs_error_histogram"}


def test_classification_like_outputs_get_topk_agreement_reported():
    acc = ErrorAccumulator(rel_floor=1e-2)
    ref = np.array([[3.0, 2.0, 1.0, 0.0, -1.0, -2.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]], np.float32)
    got = ref.copy()
    got[1] = got[1][::-1]  # the second row's ranking is reversed
    m = acc.add(ref, got)
    assert (m["top1"], m["k"]) == (0.5, 5) and m["topk"] == pytest.approx((1 + 4 / 5) / 2)
    assert "top1" not in ErrorAccumulator(1e-2).add(np.ones((2, 3, 4)), np.ones((2, 3, 4)))  # not (rows, classes)


def test_blockwise_metrics_match_whole_array_float64_with_nonfinite_values_in_several_blocks():
    from deploykit.metrics.elementwise import CHUNK, HIST_EDGES, abs_error_histogram

    rng = np.random.default_rng(7)
    ref = (rng.standard_normal(3 * CHUNK + 123) * 5).astype(np.float32)
    got = ref + rng.standard_normal(ref.size).astype(np.float32) * 10.0 ** rng.uniform(-9, 1, ref.size)
    got[:50] = ref[:50]  # exact zeros
    got[[5, CHUNK + 9, 3 * CHUNK + 1]] = [np.nan, np.inf, -np.inf]
    ref[2 * CHUNK + 4] = np.nan
    m = compare(ref, got, rel_floor=0.05)
    r, g = ref.astype(np.float64), got.astype(np.float64)
    both = np.isfinite(r) & np.isfinite(g)
    r, g = r[both], g[both]
    d = np.abs(r - g)
    mask = np.abs(r) >= 0.05 * np.abs(r).max()
    assert (m["nonfinite"], m["ref_nonfinite"], m["elements"]) == (3, 1, ref.size)
    assert m["rel_l2"] == pytest.approx(np.linalg.norm(r - g) / np.linalg.norm(r), rel=1e-12)
    assert m["cosine"] == pytest.approx(np.dot(r, g) / np.linalg.norm(r) / np.linalg.norm(g), rel=1e-12)
    assert m["mean_abs"] == pytest.approx(d.mean(), rel=1e-12) and m["max_abs"] == d.max()
    assert m["max_rel"] == (d[mask] / np.abs(r[mask])).max()
    assert m["ref_range"] == r.max() - r.min() and m["ref_absmax"] == np.abs(r).max()
    zeros, counts = abs_error_histogram(ref, got)
    expected, _ = np.histogram(np.clip(d[d > 0], HIST_EDGES[0], HIST_EDGES[-1] * 0.999), bins=np.asarray(HIST_EDGES))
    assert zeros == int((d == 0).sum()) >= 49 and counts == expected.tolist()
