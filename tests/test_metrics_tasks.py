"""Task-aware parity metrics on constructed cases with known answers."""

import numpy as np
import pytest

from deploykit.config import (
    ClassificationCheck,
    DepthCheck,
    DetectionCheck,
    ProbabilityMapCheck,
    SegmentationCheck,
    TaskChecks,
    TrajectoryCheck,
)
from deploykit.errors import DataError
from deploykit.metrics.detection import box_iou, match_boxes, to_xyxy
from deploykit.metrics.reasons import Verdict
from deploykit.metrics.tasks import build_tasks


def run_check(kind, check, ref, got):
    task = build_tasks(TaskChecks(**{kind: (check,)}))[0]
    for r, g in zip(ref, got, strict=True):
        task.add(r, g)
    return task.result()


def missed(r):
    """A result's violations as (code, metric, sentence)."""
    return [(v.code, v.metric, str(v)) for v in r["violations"]]


def grid_boxes(n=6):
    """n non-overlapping 10x10 boxes, xyxy."""
    x = np.arange(n, dtype=np.float32) * 20
    return np.stack([x, np.zeros(n), x + 10, np.full(n, 10.0)], axis=1).astype(np.float32)


# -- detection ---------------------------------------------------------------------------------------


def test_box_shift_gives_the_known_iou():
    a = np.array([[0, 0, 10, 10]], np.float64)
    b = a + [2, 0, 2, 0]  # shifted 2 px right: intersection 8x10, union 12x10
    assert box_iou(a, b)[0, 0] == pytest.approx(80 / 120)
    assert to_xyxy(np.array([[5.0, 5, 10, 10]]), "cxcywh").tolist() == [[0, 0, 10, 10]]
    assert to_xyxy(np.array([[0.0, 0, 10, 10]]), "xywh").tolist() == [[0, 0, 10, 10]]


def test_shifted_detections_report_mean_iou_and_pass_or_fail_on_it():
    boxes = grid_boxes()
    scores = np.linspace(0.5, 0.9, len(boxes)).astype(np.float32)
    shifted = boxes + np.array([1, 0, 1, 0], np.float32)  # IoU 90/110 for every box
    check = DetectionCheck(boxes="b", scores="s", min_mean_iou=0.85)
    r = run_check(
        "detection", check, [{"b": boxes[None], "s": scores[None]}], [{"b": shifted[None], "s": scores[None]}]
    )
    assert r["metrics"]["mean_iou"] == pytest.approx(90 / 110)
    assert r["metrics"]["matched"] == 1.0 and missed(r) == [("below_limit", "mean_iou", "mean_iou 0.8182 < 0.85")]


def test_permuted_boxes_with_tied_scores_match_perfectly():
    boxes = grid_boxes()
    scores = np.full(len(boxes), 0.7, np.float32)  # all tied: a runtime may emit them in any order
    classes = np.arange(len(boxes)) % 3
    perm = np.random.default_rng(0).permutation(len(boxes))
    check = DetectionCheck(boxes="b", scores="s", classes="c")
    r = run_check(
        "detection",
        check,
        [{"b": boxes[None], "s": scores[None], "c": classes[None]}],
        [{"b": boxes[perm][None], "s": scores[perm][None], "c": classes[perm][None]}],
    )
    m = r["metrics"]
    assert (m["matched"], m["mean_iou"], m["class_flips"], m["mean_score_delta"]) == (1.0, 1.0, 0.0, 0.0)
    assert r["violations"] == [] and r["inconclusive"] is None


def test_missing_extra_and_flipped_boxes_are_counted():
    boxes = grid_boxes(4)
    ref_scores = np.array([[0.9, 0.1, 0.1], [0.1, 0.9, 0.1], [0.8, 0.1, 0.1], [0.9, 0.1, 0.1]], np.float32)
    got_scores = ref_scores.copy()
    got_scores[1] = [0.9, 0.1, 0.1]  # class flip 1 -> 0
    got_scores[3] = [0.01, 0.01, 0.01]  # box 3 disappears
    r = run_check(
        "detection",
        DetectionCheck(boxes="b", scores="s"),
        [{"b": boxes[None], "s": ref_scores[None]}],
        [{"b": boxes[None], "s": got_scores[None]}],
    )
    m = r["metrics"]
    assert (m["reference_boxes"], m["candidate_boxes"], m["missing"], m["extra"]) == (4, 3, 1, 0)
    assert m["matched"] == pytest.approx(6 / 7)
    assert m["class_flips"] == pytest.approx(1 / 3)
    assert any((v.code, v.metric) == ("above_limit", "class_flips") for v in r["violations"])


def test_a_box_just_under_the_threshold_still_matches():
    boxes = grid_boxes(2)
    r = run_check(
        "detection",
        DetectionCheck(boxes="b", scores="s", score_threshold=0.5, max_score_delta=0.1),
        [{"b": boxes[None], "s": np.array([[0.51, 0.9]], np.float32)}],
        [{"b": boxes[None], "s": np.array([[0.49, 0.9]], np.float32)}],
    )
    assert r["metrics"]["matched"] == 1.0 and r["violations"] == []


def test_no_boxes_above_threshold_is_inconclusive_not_pass():
    boxes = grid_boxes(3)
    low = np.full((1, 3), 0.05, np.float32)
    r = run_check(
        "detection",
        DetectionCheck(boxes="b", scores="s"),
        [{"b": boxes[None], "s": low}],
        [{"b": boxes[None], "s": low}],
    )
    assert r["violations"] == [] and r["inconclusive"] == Verdict.NO_REFERENCE_BOXES(threshold=0.3, images=1)


def test_matching_is_independent_of_order():
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 100, (30, 2))
    a = np.concatenate([xy, xy + rng.uniform(5, 20, (30, 2))], axis=1)
    b = a + rng.normal(0, 1, a.shape)
    perm = rng.permutation(30)
    ious = sorted(iou for *_, iou in match_boxes(a, b, 0.5))
    assert ious == pytest.approx(sorted(iou for *_, iou in match_boxes(a[perm], b, 0.5)))


@pytest.mark.parametrize(
    "boxes, scores, message",
    [
        (np.zeros((1, 5, 6)), np.zeros((1, 5)), "expects boxes (..., N, 4)"),
        (np.zeros((1, 5, 4)), np.zeros((1, 7)), "expects scores"),
    ],
)
def test_detection_on_wrongly_shaped_outputs_is_a_data_error(boxes, scores, message):
    with pytest.raises(DataError, match=r"parity\.tasks\.detection\[0\]") as e:
        run_check(
            "detection", DetectionCheck(boxes="b", scores="s"), [{"b": boxes, "s": scores}], [{"b": boxes, "s": scores}]
        )
    assert message in str(e.value)


def test_task_naming_a_missing_output_is_a_data_error():
    with pytest.raises(DataError, match="names output 'nope'"):
        run_check("depth", DepthCheck(output="nope"), [{"d": np.ones((1, 4, 4))}], [{"d": np.ones((1, 4, 4))}])


# -- dense tasks -------------------------------------------------------------------------------------


def one_hot_logits(labels, classes):
    return np.moveaxis(np.eye(classes, dtype=np.float32)[labels], -1, 1)  # (N, C, H, W)


def test_segmentation_pixel_agreement_and_miou():
    ref_labels = np.zeros((1, 4, 4), int)
    ref_labels[0, :, 2:] = 1  # left half class 0, right half class 1
    got_labels = ref_labels.copy()
    got_labels[0, 0, 2] = 0  # one pixel flips 1 -> 0
    r = run_check(
        "segmentation",
        SegmentationCheck(output="seg"),
        [{"seg": one_hot_logits(ref_labels, 3)}],
        [{"seg": one_hot_logits(got_labels, 3)}],
    )
    m = r["metrics"]
    assert m["pixel_agreement"] == pytest.approx(15 / 16)
    assert m["miou"] == pytest.approx((8 / 9 + 7 / 8) / 2)  # class 0: 8/9, class 1: 7/8; class 2 absent
    assert m["classes_present"] == 2


def test_segmentation_ties_are_order_invariant():
    logits = np.zeros((1, 2, 2, 2), np.float32)  # every pixel ties between the two classes
    logits[0, 0, 0, 0] = 1.0  # one pixel decided
    got = logits.copy()
    got[0, 1, 1, 1] = 1e-9  # the candidate breaks one tie the other way
    r = run_check("segmentation", SegmentationCheck(output="seg"), [{"seg": logits}], [{"seg": got}])
    assert r["metrics"]["pixel_agreement"] == 1.0


def test_segmentation_with_one_class_everywhere_is_inconclusive():
    labels = np.zeros((1, 4, 4), int)
    r = run_check(
        "segmentation",
        SegmentationCheck(output="seg"),
        [{"seg": one_hot_logits(labels, 2)}],
        [{"seg": one_hot_logits(labels, 2)}],
    )
    assert r["inconclusive"] == Verdict.ONE_CLASS(cls=0)


def test_segmentation_on_a_single_channel_output_is_a_data_error():
    with pytest.raises(DataError, match="use probability_map"):
        run_check(
            "segmentation",
            SegmentationCheck(output="seg"),
            [{"seg": np.zeros((1, 1, 4, 4))}],
            [{"seg": np.zeros((1, 1, 4, 4))}],
        )


def test_depth_absrel_and_delta1():
    ref = np.full((1, 1, 2, 2), 2.0, np.float32)
    got = np.array([[[[2.2, 2.0], [2.0, 3.0]]]], np.float32)  # +10 %, exact, exact, +50 %
    r = run_check("depth", DepthCheck(output="d"), [{"d": ref}], [{"d": got}])
    assert r["metrics"]["abs_rel"] == pytest.approx((0.1 + 0.5) / 4)
    assert r["metrics"]["delta1"] == pytest.approx(3 / 4)
    assert len(r["violations"]) == 2


def test_depth_ignores_invalid_reference_pixels_and_rejects_multichannel():
    ref = np.array([[[0.0, 2.0]]], np.float32)  # the zero pixel is invalid (sky, no return)
    r = run_check("depth", DepthCheck(output="d"), [{"d": ref}], [{"d": np.array([[[5.0, 2.0]]], np.float32)}])
    assert r["metrics"]["abs_rel"] == 0.0 and r["metrics"]["valid_pixels"] == 1
    with pytest.raises(DataError, match="depth map"):
        run_check("depth", DepthCheck(output="d"), [{"d": np.ones((1, 3, 4, 4))}], [{"d": np.ones((1, 3, 4, 4))}])


def test_trajectory_ade_fde():
    ref = np.zeros((1, 2, 3, 2), np.float32)  # 2 agents, 3 steps, xy
    ref[..., 0] = np.arange(3)
    got = ref.copy()
    got[0, 0, :, 1] += [0.0, 0.3, 0.4]  # agent 0 drifts sideways
    r = run_check("trajectory", TrajectoryCheck(output="t", max_ade=0.1, max_fde=0.1), [{"t": ref}], [{"t": got}])
    assert r["metrics"]["ade"] == pytest.approx(0.7 / 6)
    assert r["metrics"]["fde"] == pytest.approx(0.4 / 2)
    assert missed(r) == [("above_limit", "ade", "ade 0.1167 > 0.1"), ("above_limit", "fde", "fde 0.2 > 0.1")]
    with pytest.raises(DataError, match=r"\(\.\.\., T, 2 or 3\)"):
        run_check("trajectory", TrajectoryCheck(output="t"), [{"t": np.ones((1, 3, 5))}], [{"t": np.ones((1, 3, 5))}])


def test_probability_map_uses_thresholded_iou_not_max_abs():
    ref = np.zeros((1, 1, 4, 4), np.float32)
    ref[..., :2, :] = 0.9  # 8 pixels on
    got = ref.copy()
    got[0, 0, 0, 0] = 0.1  # one pixel flips: max_abs 0.8, IoU 7/8
    r = run_check("probability_map", ProbabilityMapCheck(output="p", min_iou=0.8), [{"p": ref}], [{"p": got}])
    assert r["metrics"]["iou"] == pytest.approx(7 / 8) and r["violations"] == []
    empty = np.zeros((1, 1, 4, 4), np.float32)
    empty_check = run_check("probability_map", ProbabilityMapCheck(output="p"), [{"p": empty}], [{"p": empty}])
    assert empty_check["inconclusive"].code == "mask_empty"
    with pytest.raises(DataError, match="expects probabilities"):
        run_check("probability_map", ProbabilityMapCheck(output="p"), [{"p": ref * 5}], [{"p": ref * 5}])


def test_topk_agreement_counts_ties_as_agreeing():
    ref = np.array([[5.0, 3.0, 3.0, 1.0, 0.0]])  # classes 1 and 2 tie for second place
    got = np.array([[5.0, 2.9, 3.1, 1.0, 0.0]])  # the candidate orders the tie the other way
    r = run_check("classification", ClassificationCheck(output="y", k=2), [{"y": ref}], [{"y": got}])
    assert r["metrics"]["top1"] == 1.0 and r["metrics"]["topk"] == 1.0
    wrong = np.array([[0.0, 3.0, 3.0, 1.0, 5.0]])  # a different winner
    r = run_check("classification", ClassificationCheck(output="y", k=2), [{"y": ref}], [{"y": wrong}])
    assert r["metrics"]["top1"] == 0.0 and r["metrics"]["topk"] == 0.5
    with pytest.raises(DataError, match="needs at least 2 classes"):
        run_check("classification", ClassificationCheck(output="y", k=5), [{"y": ref[:, :1]}], [{"y": ref[:, :1]}])


def test_trajectory_with_mode_scores_compares_each_sides_best_mode_and_top1():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 3, 5, 2)).astype(np.float32)  # 4 rows, K=3 modes, T=5 steps, xy
    scores = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.5, 0.5, 0.0]], np.float32)
    got, got_scores = ref.copy(), scores.copy()
    got[0, 1] += 9.0  # a mode nobody picks may change freely
    got_scores[3] = [0.3, 0.7, 0.0]  # row 3 ties 0 and 1 in the reference: picking 1 agrees
    check = TrajectoryCheck(output="t", scores="s", max_ade=1e-6, max_fde=1e-6, min_top1=1.0)
    r = run_check("trajectory", check, [{"t": ref, "s": scores}], [{"t": got, "s": got_scores}])
    assert r["violations"] == [] and r["metrics"]["top1"] == 1.0 and r["metrics"]["rows"] == 4
    got_scores[2] = [0.7, 0.2, 0.1]  # row 2's best mode flips from 2 to 0: its trajectory is another one
    r = run_check("trajectory", check, [{"t": ref, "s": scores}], [{"t": got, "s": got_scores}])
    assert r["metrics"]["top1"] == 0.75
    expected = np.linalg.norm(ref[2, 0] - ref[2, 2], axis=-1)
    assert r["metrics"]["ade"] == pytest.approx(expected.sum() / 20, rel=1e-5)
    assert r["metrics"]["fde"] == pytest.approx(expected[-1] / 4, rel=1e-5)
    assert missed(r)[-1] == ("below_limit", "top1", "top1 0.75 < 1")
    with pytest.raises(DataError, match=r"mode scores \(\.\.\., K\)"):
        run_check("trajectory", check, [{"t": ref, "s": scores[:, :2]}], [{"t": got, "s": got_scores[:, :2]}])


def test_post_nms_detections_of_different_counts_are_matched_not_compared_elementwise():
    from deploykit.config import ParityConfig, Tolerance
    from deploykit.metrics.comparison import Comparison

    boxes = grid_boxes(4)
    ref = {"boxes": boxes, "scores": np.array([0.9, 0.8, 0.7, 0.6], np.float32), "labels": np.array([0, 1, 2, 1])}
    order = [2, 0, 1]  # the candidate lost one box and reports the rest in another order
    got = {"boxes": boxes[order] + 0.2, "scores": ref["scores"][order] - 0.01, "labels": ref["labels"][order]}
    check = DetectionCheck(boxes="boxes", scores="scores", classes="labels", elementwise=False, min_matched=0.8)
    comparison = Comparison(ParityConfig(tasks=TaskChecks(detection=(check,))), Tolerance(rel_l2=1e-4))
    comparison.add({"onnx": ref}, got)
    report = comparison.report()
    assert report["outputs"] == {} and set(report["not_compared_elementwise"]) == {"boxes", "scores", "labels"}
    metrics = report["tasks"][0]["metrics"]
    assert (metrics["missing"], metrics["extra"], metrics["pairs"]) == (1, 0, 3)
    assert metrics["matched"] == pytest.approx(6 / 7) and metrics["class_flips"] == 0
    assert report["passed"]


# -- packed (YOLO-style) detector outputs ------------------------------------------------------------


def yolo_outputs(n_boxes=200, classes=3, objectness=False, seed=0):
    """A packed pre-NMS output (1, N, 4[+1]+C) with cxcywh boxes: six confident boxes, the rest noise."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(20, 300, (n_boxes, 2))
    sizes = rng.uniform(20, 40, (n_boxes, 2))
    cls = rng.uniform(0, 0.1, (n_boxes, classes))
    confident = np.arange(6) * 30
    cls[confident, np.arange(6) % classes] = np.linspace(0.6, 0.95, 6)
    parts = [centres, sizes] + ([np.ones((n_boxes, 1))] if objectness else []) + [cls]
    return np.concatenate(parts, axis=1)[None].astype(np.float32), confident


@pytest.mark.parametrize("objectness", [False, True])
@pytest.mark.parametrize("layout", ["boxes_by_attributes", "attributes_by_boxes"])
def test_packed_outputs_are_decoded_and_matched_in_any_order(layout, objectness):
    from deploykit.config import PackedDetections

    packed, confident = yolo_outputs(objectness=objectness)
    perm = np.random.default_rng(1).permutation(packed.shape[1])
    got = packed[:, perm].copy()
    got[0, :, :2] += 0.5  # every box half a pixel to the right and down
    if layout == "attributes_by_boxes":  # YOLOv8: (1, 4 + C, N)
        packed, got = packed.transpose(0, 2, 1), got.transpose(0, 2, 1)
    check = DetectionCheck(packed=PackedDetections(output="out", objectness=objectness), min_recall=1.0)
    r = run_check("detection", check, [{"out": packed}], [{"out": got}])
    m = r["metrics"]
    assert m["reference_boxes"] == m["candidate_boxes"] == len(confident)
    assert m["recall"] == 1.0 and m["matched"] == 1.0 and 0.9 < m["mean_iou"] < 0.99
    assert r["violations"] == []


def test_packed_objectness_multiplies_the_class_scores_and_a_lost_box_costs_recall():
    from deploykit.config import PackedDetections

    packed, confident = yolo_outputs(objectness=True)
    got = packed.copy()
    got[0, confident[0], 4] = 0.2  # objectness 0.2: the first confident box falls under the threshold
    check = DetectionCheck(packed=PackedDetections(output="out", objectness=True), min_recall=0.9)
    r = run_check("detection", check, [{"out": packed}], [{"out": got}])
    assert r["metrics"]["recall"] == pytest.approx(5 / 6) and r["metrics"]["missing"] == 1
    assert ("below_limit", "recall", "recall 0.8333 < 0.9") in missed(r)


def test_packed_xyxy_boxes_and_bad_shapes_name_the_output():
    from deploykit.config import PackedDetections

    packed, _ = yolo_outputs()
    xyxy = packed.copy()
    xyxy[0, :, 2:4] += xyxy[0, :, :2]  # x0, y0, x0 + w, y0 + h
    check = DetectionCheck(packed=PackedDetections(output="out", box_format="xyxy"))
    r = run_check("detection", check, [{"out": xyxy}], [{"out": xyxy}])
    assert r["metrics"]["mean_iou"] == 1.0 and r["metrics"]["reference_boxes"] == 6
    with pytest.raises(DataError, match=r"detection\[0\] packed expects at least 6 attributes .* output 'out'"):
        bad = DetectionCheck(packed=PackedDetections(output="out", objectness=True))
        run_check("detection", bad, [{"out": packed[..., :5]}], [{"out": packed[..., :5]}])


def test_detection_config_takes_packed_or_boxes_and_scores():
    from deploykit.config import PackedDetections
    from deploykit.config.typed import from_value
    from deploykit.errors import ConfigError

    check = from_value(
        DetectionCheck, {"packed": {"output": "output0"}, "score_threshold": 0.25}, "parity.tasks.detection[0]"
    )
    assert check.packed == PackedDetections(output="output0") and check.packed.box_format == "cxcywh"
    with pytest.raises(ConfigError, match=r"detection\[0\]: needs boxes and scores"):
        from_value(DetectionCheck, {"score_threshold": 0.25}, "parity.tasks.detection[0]")
    with pytest.raises(ConfigError, match="not both"):
        from_value(DetectionCheck, {"packed": {"output": "o"}, "boxes": "b"}, "parity.tasks.detection[0]")


def test_classification_k_is_capped_at_the_number_of_classes():
    ref = np.array([[5.0, 3.0, 1.0], [0.0, 2.0, 1.0]])
    got = np.array([[5.0, 1.0, 3.0], [0.0, 2.0, 1.0]])
    r = run_check("classification", ClassificationCheck(output="y"), [{"y": ref}], [{"y": got}])
    assert r["metrics"]["k"] == 3 and r["metrics"]["topk"] == 1.0 and r["metrics"]["top1"] == 1.0
    r = run_check("classification", ClassificationCheck(output="y", k=2), [{"y": ref}], [{"y": got}])
    assert r["metrics"]["k"] == 2 and r["metrics"]["topk"] == 0.75
