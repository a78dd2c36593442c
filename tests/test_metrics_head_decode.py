"""Raw detector heads decoded as declared (``parity.tasks.detection[].packed.decode``): YOLOX grid +
stride, YOLOv5/v7 anchors, YOLOv8/PicoDet distance bins (DFL); heads packed in code from known boxes,
and the public YOLOv8n's own raw head against its own decoded output (slow)."""

import os
from pathlib import Path

import numpy as np
import pytest

from deploykit.config import DetectionCheck, HeadDecode, PackedDetections
from deploykit.errors import DataError
from deploykit.metrics.detection import cells, decode_packed
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
        anchor = np.array([ANCHORS[STRIDES.index(int(s))][2 * int(i): 2 * int(i) + 2] for s, i in grid[:, 2:4]])
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
    check = DetectionCheck(packed=PackedDetections("out", objectness=True, layout="boxes_by_attributes", decode=decode),
                           min_recall=0.99)
    same = run_check("detection", check, [{"out": raw}], [{"out": raw.copy()}])
    assert same["metrics"]["recall"] == 1.0 and same["metrics"]["mean_iou"] == 1.0
    r = run_check("detection", check, [{"out": raw}], [{"out": got}])
    assert r["metrics"]["missing"] == 2 and r["metrics"]["recall"] == pytest.approx(1 - 2 / len(confident))
    assert any(v.startswith("recall ") for v in r["violations"])


def test_a_head_whose_box_count_does_not_fit_the_declared_grid_names_the_check():
    raw, decode, _, _ = raw_head("yolox", np.random.default_rng(5))
    check = DetectionCheck(packed=PackedDetections("out", objectness=True, layout="boxes_by_attributes",
                                                   decode=HeadDecode("yolox", (8,), SIZE)))
    with pytest.raises(DataError, match=r"detection\[0\] packed.decode: the head has 30 boxes; strides \[8\] over "
                                        r"input \[32, 48\] give 24"):
        run_check("detection", check, [{"out": raw}], [{"out": raw}])
    with pytest.raises(ValueError, match="yolov5 decoding needs anchors"):
        HeadDecode("yolov5", (8, 16), SIZE)


def test_the_decode_is_configured_in_yaml_terms():
    from deploykit.config.typed import from_value

    check = from_value(DetectionCheck, {"packed": {"output": "head", "objectness": True, "decode": {
        "style": "yolov5", "strides": [8, 16], "input_size": [32, 48], "anchors": [[4, 6, 10, 8], [20, 24, 30, 16]]}}},
        "parity.tasks.detection[0]")
    assert check.packed.decode == HeadDecode("yolov5", (8, 16), (32, 48), ANCHORS)


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
