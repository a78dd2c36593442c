"""The example detector with its post-processing in the graph: box decoding, then ONNX
``NonMaxSuppression`` per class, then the kept boxes gathered.

Outputs (one image per call, batch 1): ``boxes`` (N, 4) xyxy pixels, ``scores`` (N,), ``labels``
(N,) int64 class ids, N data-dependent (at most ``MAX_PER_CLASS`` per class). The weights are the
example detector's network trained by ``train.py --positive-weight 30 -o weights_nms.pt``: with the
default weighting, object cells score about 0.05 and a 0.3 threshold keeps no box.

torch has no ONNX export for NMS without torchvision, so ``nonmax_suppression`` is an autograd
function whose forward is a plain NMS with ONNX's semantics (per class, scores above the threshold,
greedy by score, suppress IoU above the threshold; output ordered by class, then by selection) and
whose ``symbolic`` writes the ``NonMaxSuppression`` node. Its forward is data-dependent, so the
dynamo exporter refuses it and ``exporter: auto`` falls back to TorchScript, recording why.
"""

from __future__ import annotations

import torch
from model import ANCHOR_SIZES, ANCHORS, STRIDE, Detector
from torch import nn

SIZE = 128
MAX_PER_CLASS, IOU_THRESHOLD, SCORE_THRESHOLD = 20, 0.5, 0.3


def _iou(box: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    lt, rb = torch.maximum(box[:2], others[:, :2]), torch.minimum(box[2:], others[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(1)
    area = (box[2:] - box[:2]).prod()
    return inter / (area + (others[:, 2:] - others[:, :2]).prod(1) - inter)


class NonMaxSuppression(torch.autograd.Function):
    @staticmethod
    def forward(ctx, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
        """boxes (1, N, 4) xyxy, scores (1, C, N) -> selected (M, 3): (batch, class, box) like ONNX's."""
        selected = []
        for c in range(scores.shape[1]):
            s = scores[0, c]
            order = torch.nonzero(s > SCORE_THRESHOLD).flatten()
            order = order[torch.argsort(s[order], descending=True, stable=True)]
            kept: list[int] = []
            while order.numel() and len(kept) < MAX_PER_CLASS:
                best, order = int(order[0]), order[1:]
                kept.append(best)
                order = order[_iou(boxes[0, best], boxes[0, order]) <= IOU_THRESHOLD]
            selected += [[0, c, k] for k in kept]
        return torch.tensor(selected, dtype=torch.int64).reshape(-1, 3)

    @staticmethod
    def symbolic(g, boxes, scores):  # noqa: ANN001, ANN205 (the TorchScript exporter's signature)
        def const(value, dtype):  # noqa: ANN001, ANN202
            return g.op("Constant", value_t=torch.tensor([value], dtype=dtype))

        return g.op(
            "NonMaxSuppression",
            boxes,
            scores,
            const(MAX_PER_CLASS, torch.int64),
            const(IOU_THRESHOLD, torch.float32),
            const(SCORE_THRESHOLD, torch.float32),
        )


class DetectorWithNMS(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.detector = Detector()
        grid = SIZE // STRIDE
        ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
        centres = ((torch.stack([xs, ys], -1).float() + 0.5) * STRIDE).reshape(-1, 1, 2).expand(-1, ANCHORS, 2)
        self.register_buffer("centres", centres.reshape(-1, 2).clone(), persistent=False)
        sizes = torch.tensor(ANCHOR_SIZES).repeat(grid * grid).reshape(-1, 1)
        self.register_buffer("anchor_sizes", sizes, persistent=False)

    def load_state_dict(self, state_dict, strict=True, assign=False):  # noqa: ANN001, ANN201 (torch's signature)
        """The detector's own state_dict (train.py's output): everything else here is a constant."""
        return self.detector.load_state_dict(state_dict, strict, assign)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raw, scores = self.detector(images)  # (1, N, 4) offsets, (1, N, C) sigmoid scores
        centre = self.centres + raw[..., :2] * STRIDE
        half = self.anchor_sizes * torch.exp(raw[..., 2:]) / 2
        decoded = torch.cat([centre - half, centre + half], -1)  # (1, N, 4) xyxy pixels
        selected = NonMaxSuppression.apply(decoded, scores.transpose(1, 2))
        labels, index = selected[:, 1], selected[:, 2]
        return decoded[0, index], scores[0, index, labels], labels


def build() -> DetectorWithNMS:
    """The detector with in-graph NMS; deploykit-nms.yaml loads weights_nms.pt into ``detector``."""
    torch.manual_seed(0)
    return DetectorWithNMS().eval()
