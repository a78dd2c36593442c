"""Raw detector heads decoded as declared (``parity.tasks.detection[].packed.decode``): YOLOX grid +
stride, YOLOv5/v7 anchors, YOLOv8/PicoDet distance bins (DFL); heads packed in code from known boxes,
and the public YOLOv8n's own raw head against its own decoded output (slow)."""

import os
from pathlib import Path

import numpy as np
import pytest

from deploykit.config import DetectionCheck, HeadDecode, PackedDetections, TaskChecks
from deploykit.errors import DataError
from deploykit.metrics.detection import cells, decode_packed
from deploykit.metrics.tasks import build_tasks
from tests.test_metrics_tasks import run_check

STRIDES, SIZE, CLASSES = (8, 16), (32, 48), 3
ANCHORS = ((4.0, 6.0, 10.0, 8.0), (20.0, 24.0, 30.0, 16.0))


def _logit(p):
    return np.log(p / (1 - p))


def raw_head(style, rng):
    """(raw head (1, N, attributes) with objectness, the boxes (N, 4) cxcywh and scores (N, C) it encodes)."""
    decode = HeadDecode(style, STRIDES, SIZE, ANCHORS if style == "yolov5" else (), reg_max=8)
    grid = cells(decode)
    cell, stride = grid[:, :2], grid[:, 2:3]
    n = len(grid)
    if style == "yolox":
        u, wh = rng.uniform(0, 1, (n, 2)), rng.uniform(2, 60, (n, 2))
        centre = (cell + u) * stride
        box = np.concatenate([u, np.log(wh / stride)], axis=1)
    elif style == "yolov5":
        anchor = np.array([ANCHORS[STRIDES.index(int(s))][2 * int(i) : 2 * int(i) + 2] for s, i in grid[:, 2:4]])
        u, scale = rng.uniform(-0.4, 1.4, (n, 2)), rng.uniform(0.2, 3.5, (n, 2))
        centre, wh = (cell + u) * stride, anchor * scale
        box = np.concatenate([_logit((u + 0.5) / 2), _logit(np.sqrt(scale) / 2)], axis=1)
    else:  # dfl: one bin per side carries (almost) all of the mass
        sides = rng.integers(0, 8, (n, 4))
        box = np.full((n, 4, 8), -40.0)
        np.put_along_axis(box, sides[..., None], 40.0, axis=-1)
        box = box.reshape(n, 32)
        lt, rb = sides[:, :2], sides[:, 2:]
        centre, wh = (cell + 0.5 + (rb - lt) / 2) * stride, (lt + rb) * stride
    objectness, scores = rng.uniform(0.05, 0.95, (n, 1)), rng.uniform(0.05, 0.95, (n, CLASSES))
    raw = np.concatenate([box, _logit(objectness), _logit(scores)], axis=1)[None]
    return raw, decode, np.concatenate([centre, wh], axis=1), objectness * scores


@pytest.mark.parametrize("style", ["yolox", "yolov5", "dfl"])
def test_a_raw_head_packed_in_code_decodes_to_the_boxes_it_encodes(style):
    raw, decode, boxes, scores = raw_head(style, np.random.default_rng(3))
    got_boxes, got_scores = decode_packed(raw, "boxes_by_attributes", objectness=True, decode=decode)
    np.testing.assert_allclose(got_boxes[0], boxes, rtol=1e-9, atol=1e-7)
    np.testing.assert_allclose(got_scores[0], scores, rtol=1e-9)
    transposed = decode_packed(raw.transpose(0, 2, 1), "attributes_by_boxes", objectness=True, decode=decode)
    np.testing.assert_allclose(transposed[0], got_boxes)


@pytest.mark.parametrize("style", ["yolox", "yolov5", "dfl"])
def test_parity_judges_a_raw_head_by_its_decoded_boxes(style):
    rng = np.random.default_rng(4)
    raw, decode, _, scores = raw_head(style, rng)
    confident = np.nonzero(scores.max(axis=1) >= 0.3)[0]
    got = raw.copy()
    lost = confident[:2]
    got[0, lost, decode.box_attributes()] = -10.0  # objectness logit: those boxes drop out
    check = DetectionCheck(
        packed=PackedDetections("out", objectness=True, layout="boxes_by_attributes", decode=decode), min_recall=0.99
    )
    same = run_check("detection", check, [{"out": raw}], [{"out": raw.copy()}])
    assert same["metrics"]["recall"] == 1.0 and same["metrics"]["mean_iou"] == 1.0
    r = run_check("detection", check, [{"out": raw}], [{"out": got}])
    assert r["metrics"]["missing"] == 2 and r["metrics"]["recall"] == pytest.approx(1 - 2 / len(confident))
    assert any((v.code, v.metric) == ("below_limit", "recall") for v in r["violations"])


def test_a_head_whose_box_count_does_not_fit_the_declared_grid_names_the_check():
    raw, decode, _, _ = raw_head("yolox", np.random.default_rng(5))
    check = DetectionCheck(
        packed=PackedDetections(
            "out", objectness=True, layout="boxes_by_attributes", decode=HeadDecode("yolox", (8,), SIZE)
        )
    )
    with pytest.raises(
        DataError,
        match=r"detection\[0\] packed.decode: the head has 30 boxes; strides \[8\] over "
        r"input \[32, 48\] give 24",
    ):
        run_check("detection", check, [{"out": raw}], [{"out": raw}])
    with pytest.raises(ValueError, match="yolov5 decoding needs anchors"):
        HeadDecode("yolov5", (8, 16), SIZE)


def _split(raw, decode, per_level_scores):
    """A packed raw head (1, N, A) cut into one (1, N_l, A) tensor per stride, the class scores apart
    when ``per_level_scores`` (PicoDet)."""
    grid = cells(decode)
    k = decode.box_attributes() + 1  # box attributes and the objectness
    levels, scores = [], []
    for stride in decode.strides:
        rows = raw[:, grid[:, 2] == stride]
        levels.append(rows[..., :k] if per_level_scores else rows)
        if per_level_scores:
            scores.append(rows[..., k:])
    return levels, scores


@pytest.mark.parametrize("apart", [False, True])
def test_a_head_written_per_level_is_judged_as_the_head_it_joins_to(apart):
    """One tensor per stride (and the scores in tensors of their own, PicoDet-style) decodes to what
    the packed head decodes to, and a candidate that loses boxes in one level's scores is caught."""
    rng = np.random.default_rng(6)
    raw, decode, boxes, scores = raw_head("dfl", rng)
    levels, level_scores = _split(raw, decode, apart)
    names = [f"box{i}" for i in range(len(levels))]
    score_names = tuple(f"cls{i}" for i in range(len(level_scores)))
    packed = PackedDetections(
        names[0],
        objectness=True,
        layout="boxes_by_attributes",
        decode=decode,
        levels=tuple(names[1:]),
        scores=score_names,
    )
    ref = {**dict(zip(names, levels, strict=True)), **dict(zip(score_names, level_scores, strict=True))}
    check = DetectionCheck(packed=packed, min_recall=0.99)
    assert set(build_tasks(TaskChecks(detection=(check,)))[0].outputs) == set(ref)
    same = run_check("detection", check, [ref], [{k: v.copy() for k, v in ref.items()}])
    assert same["metrics"]["recall"] == 1.0 and same["metrics"]["mean_iou"] == 1.0
    joined = DetectionCheck(
        packed=PackedDetections("out", objectness=True, layout="boxes_by_attributes", decode=decode), min_recall=0.99
    )
    assert run_check("detection", joined, [{"out": raw}], [{"out": raw}])["metrics"] == same["metrics"]
    got = {k: v.copy() for k, v in ref.items()}
    confident = np.nonzero(scores[: levels[0].shape[1]].max(axis=1) >= 0.3)[0][:3]
    if apart:
        got[score_names[0]][0, confident, :] = -10.0  # the first level's class logits: those boxes drop out
    else:
        got[names[0]][0, confident, decode.box_attributes()] = -10.0  # their objectness
    r = run_check("detection", check, [ref], [got])
    assert r["metrics"]["missing"] == 3 and any(
        (v.code, v.metric) == ("below_limit", "recall") for v in r["violations"]
    )


def test_a_per_level_head_whose_parts_disagree_names_them():
    raw, decode, _, _ = raw_head("dfl", np.random.default_rng(7))
    levels, level_scores = _split(raw, decode, True)
    with pytest.raises(ValueError, match="scores names one tensor per level: 1 given for 2 levels"):
        PackedDetections("b0", levels=("b1",), scores=("c0",))
    check = DetectionCheck(
        packed=PackedDetections(
            "b0", objectness=True, layout="boxes_by_attributes", decode=decode, levels=("b1",), scores=("c0", "c1")
        )
    )
    ref = {"b0": levels[0], "b1": levels[1], "c0": level_scores[1], "c1": level_scores[1]}
    with pytest.raises(
        DataError,
        match=r"packed outputs b0, b1, c0, c1: level 0's boxes \[1, 24, 33\] and its "
        r"scores \[1, 6, 3\] differ in batch or box count",
    ):
        run_check("detection", check, [ref], [ref])


def test_the_decode_is_configured_in_yaml_terms():
    from deploykit.config.typed import from_value

    check = from_value(
        DetectionCheck,
        {
            "packed": {
                "output": "head",
                "objectness": True,
                "decode": {
                    "style": "yolov5",
                    "strides": [8, 16],
                    "input_size": [32, 48],
                    "anchors": [[4, 6, 10, 8], [20, 24, 30, 16]],
                },
            }
        },
        "parity.tasks.detection[0]",
    )
    assert check.packed.decode == HeadDecode("yolov5", (8, 16), (32, 48), ANCHORS)
    apart = from_value(
        DetectionCheck,
        {
            "packed": {
                "output": "b8",
                "levels": ["b16"],
                "scores": ["s8", "s16"],
                "decode": {"style": "dfl", "strides": [8, 16], "input_size": [32, 48], "reg_max": 8, "sigmoid": False},
            }
        },
        "detection[0]",
    )
    assert apart.packed.tensors() == ("b8", "b16", "s8", "s16")


@pytest.mark.slow
def test_the_public_yolov8n_raw_head_decodes_to_its_own_output():
    """YOLOv8n (doclaynet, 1024x1024): its raw head (64 distance bins + 11 class logits per box, before
    the model's own DFL decode) decoded by ``dfl`` gives the boxes and scores the model writes."""
    import onnx

    from deploykit.graph.run import session_from_onnx

    path = Path(os.environ.get("DEPLOYKIT_MODELS", "/work/cache/models")) / "detection/yolov8n_doclaynet.onnx"
    if not path.is_file():
        pytest.skip(f"{path} not fetched (bash /work/shared/models/fetch.sh /work/cache)")
    model = onnx.load(str(path))
    bins, logits = "/model.22/Concat_output_0", "/model.22/Concat_1_output_0"
    image = np.random.default_rng(0).uniform(0, 1, (1, 3, 1024, 1024)).astype(np.float32)
    out = session_from_onnx(model, "as_written", expose=(bins, logits)).run_all({"images": image})
    raw = np.concatenate([out[bins], out[logits]], axis=1)  # (1, 64 + 11, 21504): a raw packed head
    decode = HeadDecode("dfl", (8, 16, 32), (1024, 1024), reg_max=16)
    boxes, scores = decode_packed(raw, "attributes_by_boxes", decode=decode)
    ours, theirs = decode_packed(out["output0"], "attributes_by_boxes")
    np.testing.assert_allclose(boxes, ours, rtol=1e-4, atol=2e-3)
    np.testing.assert_allclose(scores, theirs, rtol=1e-4, atol=1e-6)


PICODET_BOXES, PICODET_SCORES = (1, 3, 5, 7), (0, 2, 4, 6)  # transpose_<i>.tmp_0: distance bins, class scores


@pytest.mark.slow
@pytest.mark.parametrize("block", [(40, 60, 560, 300), (200, 420, 580, 740), (60, 100, 300, 700)])
def test_the_public_picodet_head_written_per_level_decodes_to_the_text_block_on_a_page(block):
    """PicoDet (CDLA layout, 800x608): four strides, each level's 32 distance bins (8 per side) and its
    10 class scores in tensors of their own, no decoded output. On a white page holding one block of
    text-like lines, the best-scored decoded box is that block (IoU >= 0.8; measured 0.92 / 0.93 / 0.87;
    a wrong stride, centre offset or bin count misses it)."""
    import onnx

    from deploykit.graph.run import session_from_onnx
    from deploykit.metrics.detection import box_iou, join_head

    path = Path(os.environ.get("DEPLOYKIT_MODELS", "/work/cache/models")) / "detection/picodet_layout_cdla.onnx"
    if not path.is_file():
        pytest.skip(f"{path} not fetched (bash /work/shared/models/fetch.sh /work/cache)")
    x0, y0, x1, y1 = block
    page, rng = np.ones((800, 608, 3), np.float32), np.random.default_rng(0)
    for y in range(y0, y1, 14):  # lines of "text" 8 px high, ragged on the right
        page[y : y + 8, x0 : x1 - rng.integers(0, 40)] = 0.1
    image = ((page - (0.485, 0.456, 0.406)) / (0.229, 0.224, 0.225)).transpose(2, 0, 1)[None].astype(np.float32)
    out = session_from_onnx(onnx.load(str(path)), "onnxruntime").infer({"image": image})
    packed = PackedDetections(
        "transpose_1.tmp_0",
        layout="boxes_by_attributes",
        decode=HeadDecode("dfl", (8, 16, 32, 64), (800, 608), reg_max=8, sigmoid=False),
        levels=tuple(f"transpose_{i}.tmp_0" for i in PICODET_BOXES[1:]),
        scores=tuple(f"transpose_{i}.tmp_0" for i in PICODET_SCORES),
    )
    head = join_head([out[t] for t in (packed.output, *packed.levels)], [out[t] for t in packed.scores])
    boxes, scores = decode_packed(head, packed.layout, decode=packed.decode)
    (cx, cy, w, h) = boxes[0, scores[0].max(axis=1).argmax()]
    found = np.array([[cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]])
    assert box_iou(found, np.array([block], np.float64))[0, 0] >= 0.8
