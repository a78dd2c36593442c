"""Detection parity: boxes matched by IoU between reference and candidate, independent of order.

Runtimes legitimately reorder boxes with tied scores (and NMS output order follows scores), so
boxes are never compared by index: every reference box is paired with the candidate box it
overlaps most (greedy on IoU, highest first), and the pairs are then compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def to_xyxy(boxes: np.ndarray, fmt: str) -> np.ndarray:
    """(N, 4) boxes in ``xyxy``, ``xywh`` (corner + size) or ``cxcywh`` (centre + size) -> xyxy."""
    b = boxes.astype(np.float64)
    if fmt == "xyxy":
        return b
    if fmt == "xywh":
        return np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], axis=1)
    if fmt == "cxcywh":
        return np.concatenate([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], axis=1)
    raise ValueError(f"unknown box format {fmt!r}")


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (len(a), len(b)) of xyxy boxes; a zero-area box matches only an identical one."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    # Zero-area boxes have no IoU; two identical ones are still the same box (padding rows, points).
    same = (union <= 0) & np.all(a[:, None, :] == b[None, :, :], axis=2)
    return np.where(same, 1.0, iou)


def match_boxes(a: np.ndarray, b: np.ndarray, min_iou: float) -> list[tuple[int, int, float]]:
    """Greedy one-to-one matching by IoU, highest first: (index in a, index in b, IoU).

    The result does not depend on the order of the boxes (ties in IoU are broken by position, but
    tied pairs have the same IoU, so every metric computed from the pairs is the same).
    """
    if len(a) == 0 or len(b) == 0:
        return []
    iou = box_iou(a, b)
    ia, ib = np.nonzero(iou >= min_iou)
    order = np.argsort(-iou[ia, ib], kind="stable")
    used_a, used_b, pairs = set(), set(), []
    for i, j in zip(ia[order].tolist(), ib[order].tolist(), strict=True):
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            pairs.append((i, j, float(iou[i, j])))
    return pairs


def decode_packed(
    packed: np.ndarray, layout: str = "auto", objectness: bool = False, decode: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """A YOLO-style output -> (boxes (B, N, 4), class scores (B, N, C)), before NMS.

    Args:
        packed: ``(B, N, A)`` or ``(B, A, N)`` (or one image without the batch axis), A = 4 box
            attributes, then an objectness score if ``objectness``, then C class scores.
        layout: ``boxes_by_attributes`` (B, N, A), ``attributes_by_boxes`` (B, A, N), or ``auto``:
            the shorter of the two axes holds the attributes (8400 boxes, 85 attributes).
        objectness: whether attribute 4 is an objectness that multiplies every class score.
        decode: a :class:`deploykit.config.HeadDecode` for a raw head (:func:`decode_head`), or None.
    """
    a = np.asarray(packed)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"expected (B, N, A) or (B, A, N), got shape {list(packed.shape)}")
    if layout == "attributes_by_boxes" or (layout == "auto" and a.shape[1] < a.shape[2]):
        a = a.transpose(0, 2, 1)
    if decode is not None:
        return decode_head(a, decode, objectness)
    boxes, rest = a[..., :4], a[..., 4:]
    if objectness:
        rest = rest[..., :1] * rest[..., 1:]
    return boxes, rest


def join_head(levels: list[np.ndarray], scores: list[np.ndarray], layout: str = "auto") -> np.ndarray:
    """One packed ``(B, N, A)`` head from a head written in parts: each level's tensor (``(B, N_l, A)``
    or ``(B, A, N_l)``, by ``layout``) with its score tensor, if any, appended to its attributes, the
    levels then joined along the boxes in the order given."""

    def boxes_first(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a)
        a = a[None] if a.ndim == 2 else a
        if a.ndim != 3:
            raise ValueError(f"expected (B, N, A) or (B, A, N), got shape {list(a.shape)}")
        flip = layout == "attributes_by_boxes" or (layout == "auto" and a.shape[1] < a.shape[2])
        return a.transpose(0, 2, 1) if flip else a

    parts = [boxes_first(a) for a in levels]
    for i, score in enumerate(scores):
        score = boxes_first(score)
        if score.shape[:2] != parts[i].shape[:2]:
            raise ValueError(
                f"level {i}'s boxes {list(parts[i].shape)} and its scores {list(score.shape)} differ in "
                "batch or box count (as (B, N, A))"
            )
        parts[i] = np.concatenate([parts[i], score.astype(parts[i].dtype)], axis=2)
    if len({p.shape[0] for p in parts}) > 1 or len({p.shape[2] for p in parts}) > 1:
        raise ValueError(
            "the levels differ in batch or attributes: "
            + ", ".join(str(list(p.shape)) for p in parts)
            + " (as (B, N, A))"
        )
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def cells(decode: Any) -> np.ndarray:
    """(N, 4): each box slot's (cell x, cell y, stride, anchor index) in the head's order (see HeadDecode)."""
    height, width = decode.input_size
    out = []
    for level, stride in enumerate(decode.strides):
        ny, nx = -(-height // stride), -(-width // stride)
        anchors = len(decode.anchors[level]) // 2 if decode.style == "yolov5" else 1
        a, y, x = np.meshgrid(np.arange(anchors), np.arange(ny), np.arange(nx), indexing="ij")
        out.append(np.stack([x.ravel(), y.ravel(), np.full(x.size, stride), a.ravel()], axis=1))
    return np.concatenate(out).astype(np.float64)


def decode_head(a: np.ndarray, decode: Any, objectness: bool) -> tuple[np.ndarray, np.ndarray]:
    """A raw head ``(B, N, attributes)`` -> (boxes (B, N, 4) cxcywh in input pixels, class scores (B, N, C))."""
    grid = cells(decode)
    if a.shape[1] != len(grid):
        raise ValueError(
            f"the head has {a.shape[1]} boxes; strides {list(decode.strides)} over input "
            f"{list(decode.input_size)} give {len(grid)}"
        )
    a = a.astype(np.float64)
    k = decode.box_attributes()
    t, rest = a[..., :k], a[..., k:]
    cell, stride = grid[:, :2], grid[:, 2:3]
    if decode.style == "yolox":
        centre, size = (t[..., :2] + cell) * stride, np.exp(t[..., 2:4]) * stride
    elif decode.style == "yolov5":
        anchors = np.array(
            [decode.anchors[list(decode.strides).index(int(s))][2 * int(i) : 2 * int(i) + 2] for s, i in grid[:, 2:4]],
            np.float64,
        )
        s = _sigmoid(t)
        centre, size = (2 * s[..., :2] - 0.5 + cell) * stride, (2 * s[..., 2:4]) ** 2 * anchors
    else:  # dfl: expectation of each side's softmax over reg_max bins
        bins = t.reshape(*t.shape[:-1], 4, decode.reg_max)
        p = np.exp(bins - bins.max(axis=-1, keepdims=True))
        dist = (p / p.sum(axis=-1, keepdims=True)) @ np.arange(decode.reg_max, dtype=np.float64)
        left_top, right_bottom = dist[..., :2], dist[..., 2:]
        centre = (cell + 0.5 + (right_bottom - left_top) / 2) * stride
        size = (left_top + right_bottom) * stride
    scores = _sigmoid(rest) if decode.sigmoid else rest
    if objectness:
        scores = scores[..., :1] * scores[..., 1:]
    return np.concatenate([centre, size], axis=-1), scores


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


def min_attributes(objectness: bool) -> int:
    """4 box attributes, an objectness if any, and at least one class score."""
    return 6 if objectness else 5


def split_images(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray | None) -> list[tuple]:
    """Per image (boxes (N, 4), score (N,), class (N,)); leading dims are images.

    ``scores`` is (..., N) with ``classes`` (..., N) given, or (..., N, C) per-class scores, reduced
    to the best class and its score.
    """
    lead = boxes.shape[:-2]
    n = boxes.shape[-2]
    b = boxes.reshape(-1, n, 4)
    if classes is None and scores.ndim == boxes.ndim:  # (..., N, C)
        s = scores.reshape(-1, n, scores.shape[-1])
        cls, best = s.argmax(axis=-1), s.max(axis=-1)
    else:
        best = scores.reshape(-1, n)
        cls = classes.reshape(-1, n) if classes is not None else np.zeros_like(best, dtype=np.int64)
    assert b.shape[0] == int(np.prod(lead, dtype=np.int64)) == best.shape[0]
    return [(b[i], best[i].astype(np.float64), cls[i]) for i in range(b.shape[0])]


@dataclass
class DetectionTally:
    """Running totals over images; ``result`` turns them into the reported metrics."""

    ref_boxes: int = 0
    cand_boxes: int = 0
    ref_unmatched: int = 0
    cand_unmatched: int = 0
    pairs: int = 0
    iou_sum: float = 0.0
    score_delta_sum: float = 0.0
    score_delta_max: float = 0.0
    class_flips: int = 0
    images: int = 0
    images_without_boxes: int = 0

    def add_image(self, ref: tuple, cand: tuple, fmt: str, threshold: float, margin: float, min_iou: float) -> None:
        """Match one image's boxes; boxes scoring >= threshold count, >= threshold - margin may match."""
        (rb, rs, rc), (cb, cs, cc) = ref, cand
        self.images += 1
        r_keep, c_keep = rs >= threshold - margin, cs >= threshold - margin
        r_idx, c_idx = np.nonzero(r_keep)[0], np.nonzero(c_keep)[0]
        pairs = match_boxes(to_xyxy(rb[r_idx], fmt), to_xyxy(cb[c_idx], fmt), min_iou)
        r_counted, c_counted = rs[r_idx] >= threshold, cs[c_idx] >= threshold
        matched_r = np.zeros(len(r_idx), bool)
        matched_c = np.zeros(len(c_idx), bool)
        for i, j, iou in pairs:
            if not (r_counted[i] or c_counted[j]):
                continue  # both under the threshold: neither side reports this box
            matched_r[i] = matched_c[j] = True
            delta = abs(float(rs[r_idx[i]] - cs[c_idx[j]]))
            self.pairs += 1
            self.iou_sum += iou
            self.score_delta_sum += delta
            self.score_delta_max = max(self.score_delta_max, delta)
            self.class_flips += int(rc[r_idx[i]] != cc[c_idx[j]])
        self.ref_boxes += int(r_counted.sum())
        self.cand_boxes += int(c_counted.sum())
        self.ref_unmatched += int((r_counted & ~matched_r).sum())
        self.cand_unmatched += int((c_counted & ~matched_c).sum())
        self.images_without_boxes += int(not r_counted.any())

    def merged(self, other: DetectionTally) -> DetectionTally:
        """The totals of both runs of images (a new tally)."""
        import dataclasses

        out = DetectionTally(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)}
        )
        out.score_delta_max = max(self.score_delta_max, other.score_delta_max)
        return out

    def result(self) -> dict[str, float]:
        counted = self.ref_boxes + self.cand_boxes
        matched = counted - self.ref_unmatched - self.cand_unmatched
        recall = 1.0 - self.ref_unmatched / self.ref_boxes if self.ref_boxes else 1.0
        return {
            "matched": matched / counted if counted else 1.0,
            "recall": recall,
            "mean_iou": self.iou_sum / self.pairs if self.pairs else (0.0 if counted else 1.0),
            "mean_score_delta": self.score_delta_sum / self.pairs if self.pairs else 0.0,
            "max_score_delta": self.score_delta_max,
            "class_flips": self.class_flips / self.pairs if self.pairs else 0.0,
            "reference_boxes": self.ref_boxes,
            "candidate_boxes": self.cand_boxes,
            "missing": self.ref_unmatched,
            "extra": self.cand_unmatched,
            "pairs": self.pairs,
            "images": self.images,
            "images_without_reference_boxes": self.images_without_boxes,
        }
