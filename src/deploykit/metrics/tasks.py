"""The task checks configured under ``parity.tasks``: one accumulator per check.

An accumulator checks the shapes of the outputs it reads on the first sample (a wrong output fails
with the check's config path), folds every sample into exact sums, and at the end reports its
metrics, the limits they are held to, the violations, and whether the check proved anything.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from deploykit.config import TaskChecks
from deploykit.errors import DataError
from deploykit.metrics import dense
from deploykit.metrics.detection import DetectionTally, decode_packed, join_head, min_attributes, split_images
from deploykit.metrics.reasons import Reason, Verdict

Limit = tuple[str, str, float]  # (metric, ">=" or "<=", value)


class TaskMetric:
    """Base: a configured check over one or more outputs."""

    kind: ClassVar[str]

    def __init__(self, check: Any, index: int) -> None:
        self.check, self.label = check, f"{self.kind}[{index}]"
        self.sums: Any = None
        self._checked = False

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.check.output,)

    def add(self, ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Any:
        """Fold one sample in (reference and candidate outputs by name); return the sample's own sums."""
        if not self._checked:
            for name in self.outputs:
                if name not in ref:
                    raise self._error(
                        f"names output {name!r}, which the model does not have (outputs: {', '.join(ref)})"
                    )
            self.check_shapes({n: ref[n] for n in self.outputs})
            self._checked = True
        sample = self.fold(None, {n: ref[n] for n in self.outputs}, {n: got[n] for n in self.outputs})
        self.sums = sample if self.sums is None else self.merge(self.sums, sample)
        return sample

    def fold(self, sums: Any, ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Any:
        return dense.add_sums(sums, self.sample_sums(ref[self.check.output], got[self.check.output]))

    def merge(self, a: Any, b: Any) -> Any:
        """The sums of two runs of samples together (new; neither is changed)."""
        return dense.add_sums(a, b)

    def result(self, judge: str = "all") -> dict[str, Any]:
        """Metrics, limits (each marked judged or not, see :meth:`judged`), the violations of the judged
        ones, the misses of the others (``reported``), and why the check proves nothing, if it does not
        (``inconclusive``, else None); each a :class:`~deploykit.metrics.reasons.Verdict` reason."""
        metrics = self.metrics(self.sums)
        judged = self.judged(judge)
        missed = [(m, op, v) for m, op, v in self.limits() if not (metrics[m] >= v if op == ">=" else metrics[m] <= v)]
        said = [
            (Verdict.BELOW_LIMIT if op == ">=" else Verdict.ABOVE_LIMIT)(
                metric=m, value=f"{metrics[m]:.4g}", limit=f"{v:g}"
            )
            for m, op, v in missed
        ]
        return {
            "kind": self.kind,
            "label": self.label,
            "outputs": list(self.outputs),
            "metrics": metrics,
            "limits": [
                {"metric": m, "op": op, "value": v, "judged": (m, op, v) in judged} for m, op, v in self.limits()
            ],
            "violations": [r for r, lim in zip(said, missed, strict=True) if lim in judged],
            "reported": [
                Verdict.NOT_JUDGED.restate(r) for r, lim in zip(said, missed, strict=True) if lim not in judged
            ],
            "inconclusive": self.inconclusive(self.sums, metrics),
        }

    def judged(self, judge: str = "all") -> list[Limit]:
        """The limits that decide: all of them (``parity.judge: all``); with ``judge: tasks`` the ones
        this check's config sets away from their defaults, or all where it sets none (a detector judged
        by ``min_recall`` alone no longer needs its other four limits switched off)."""
        limits = self.limits()
        if judge != "tasks":
            return limits
        import dataclasses

        defaults = {f.name: f.default for f in dataclasses.fields(self.check)}
        fields = {m: f for f, m in LIMIT_FIELDS.items()}
        chosen = [(m, op, v) for m, op, v in limits if fields.get(m) in defaults and v != defaults[fields[m]]]
        return chosen or limits

    def _error(self, what: str) -> DataError:
        return DataError(
            f"parity.tasks.{self.label} {what}",
            hint=f"point parity.tasks.{self.kind} at the right output, or remove the check",
        )

    # -- per kind --------------------------------------------------------------------------------
    def check_shapes(self, ref: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def sample_sums(self, ref: np.ndarray, got: np.ndarray) -> dict[str, Any]:
        raise NotImplementedError

    def metrics(self, sums: Any) -> dict[str, Any]:
        raise NotImplementedError

    def limits(self) -> list[Limit]:
        raise NotImplementedError

    def inconclusive(self, sums: Any, metrics: dict[str, Any]) -> Reason | None:
        """Why the reference makes this check prove nothing; None when it is a real check."""
        return None


class Classification(TaskMetric):
    kind = "classification"

    k = 0  # the k used: the configured k, capped at the number of classes

    def check_shapes(self, ref: dict[str, np.ndarray]) -> None:
        a = ref[self.check.output]
        if a.ndim == 0 or not -a.ndim <= self.check.axis < a.ndim:
            raise self._error(f"has axis {self.check.axis}, but output {self.check.output!r} has shape {list(a.shape)}")
        if a.shape[self.check.axis] < 2:
            raise self._error(
                f"needs at least 2 classes on axis {self.check.axis}; output "
                f"{self.check.output!r} has shape {list(a.shape)}"
            )
        self.k = min(self.check.k, a.shape[self.check.axis])

    def sample_sums(self, ref: np.ndarray, got: np.ndarray) -> dict[str, Any]:
        return dense.topk_sums(ref, got, self.k, self.check.axis)

    def metrics(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"top1": s["top1"] / s["rows"], "topk": s["topk"] / s["rows"], "k": self.k, "rows": s["rows"]}

    def limits(self) -> list[Limit]:
        return [("top1", ">=", self.check.min_top1), ("topk", ">=", self.check.min_topk)]

    def inconclusive(self, s: dict[str, Any], metrics: dict[str, Any]) -> Reason | None:
        return Verdict.SCORES_TIED() if s["tied_rows"] == s["rows"] else None


class Detection(TaskMetric):
    kind = "detection"

    @property
    def outputs(self) -> tuple[str, ...]:
        c = self.check
        if c.packed is not None:
            return c.packed.tensors()
        return (c.boxes, c.scores) + ((c.classes,) if c.classes else ())

    def check_shapes(self, ref: dict[str, np.ndarray]) -> None:
        c = self.check
        if c.packed is not None:
            self._check_packed(self._head(ref))
            return
        boxes, scores = ref[c.boxes], ref[c.scores]
        if boxes.ndim < 2 or boxes.shape[-1] != 4:
            raise self._error(f"expects boxes (..., N, 4); output {c.boxes!r} has shape {list(boxes.shape)}")
        per_box = scores.shape == boxes.shape[:-1]
        per_class = scores.ndim == boxes.ndim and scores.shape[:-1] == boxes.shape[:-1]
        if not (per_box or per_class) or (c.classes and not per_box):
            want = "(..., N)" if c.classes else "(..., N) or (..., N, classes)"
            raise self._error(
                f"expects scores {want} for boxes {list(boxes.shape)}; output {c.scores!r} has shape "
                f"{list(scores.shape)}"
            )
        if c.classes and ref[c.classes].shape != boxes.shape[:-1]:
            raise self._error(
                f"expects classes (..., N) for boxes {list(boxes.shape)}; output {c.classes!r} has "
                f"shape {list(ref[c.classes].shape)}"
            )

    def _head(self, d: dict[str, np.ndarray]) -> np.ndarray:
        """The packed output, or the head joined from its levels and score tensors (as (B, N, A))."""
        p = self.check.packed
        if not (p.levels or p.scores):
            return d[p.output]
        try:
            return join_head([d[t] for t in (p.output, *p.levels)], [d[t] for t in p.scores], p.layout)
        except ValueError as e:
            raise self._error(f"packed outputs {', '.join(p.tensors())}: {e}") from e

    def _layout(self) -> str:
        p = self.check.packed
        return "boxes_by_attributes" if p.levels or p.scores else p.layout  # a joined head is (B, N, A)

    def _check_packed(self, a: np.ndarray) -> None:
        p = self.check.packed
        box = p.decode.box_attributes() if p.decode is not None else 4
        want = min_attributes(p.objectness) - 4 + box
        what = (
            f"output {p.output!r}" if not (p.levels or p.scores) else f"the head joined from {', '.join(p.tensors())}"
        )
        if a.ndim not in (2, 3):
            raise self._error(
                f"packed expects (B, N, attributes) or (B, attributes, N); {what} has shape {list(a.shape)}"
            )
        n, m = a.shape[-2:]
        layout = self._layout()
        attributes = {"boxes_by_attributes": m, "attributes_by_boxes": n}.get(layout, min(n, m))
        if attributes < want:
            raise self._error(
                f"packed expects at least {want} attributes per box ({box} box, "
                f"{'objectness, ' if p.objectness else ''}class scores); {what} has shape "
                f"{list(a.shape)} (layout {layout})"
            )

    def _images(self, d: dict[str, np.ndarray]) -> list[tuple]:
        c = self.check
        if c.packed is not None:
            try:
                boxes, scores = decode_packed(self._head(d), self._layout(), c.packed.objectness, c.packed.decode)
            except ValueError as e:
                raise self._error(f"packed.decode: {e}") from e
            return split_images(boxes, scores, None)
        return split_images(d[c.boxes], d[c.scores], d.get(c.classes) if c.classes else None)

    def fold(self, tally: Any, ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Any:
        c = self.check
        tally = tally or DetectionTally()
        fmt = (
            ("cxcywh" if c.packed.decode is not None else c.packed.box_format) if c.packed is not None else c.box_format
        )
        for r, g in zip(self._images(ref), self._images(got), strict=True):
            tally.add_image(r, g, fmt, c.score_threshold, c.score_margin, c.match_iou)
        return tally

    def merge(self, a: DetectionTally, b: DetectionTally) -> DetectionTally:
        return a.merged(b)

    def metrics(self, tally: DetectionTally) -> dict[str, Any]:
        return tally.result()

    def limits(self) -> list[Limit]:
        c = self.check
        return [
            ("matched", ">=", c.min_matched),
            ("recall", ">=", c.min_recall),
            ("mean_iou", ">=", c.min_mean_iou),
            ("mean_score_delta", "<=", c.max_score_delta),
            ("class_flips", "<=", c.max_class_flips),
        ]

    def inconclusive(self, tally: DetectionTally, metrics: dict[str, Any]) -> Reason | None:
        if tally.ref_boxes == 0:
            return Verdict.NO_REFERENCE_BOXES(threshold=self.check.score_threshold, images=tally.images)
        return None


class Segmentation(TaskMetric):
    kind = "segmentation"

    def check_shapes(self, ref: dict[str, np.ndarray]) -> None:
        a = ref[self.check.output]
        if a.ndim < 2 or not -a.ndim <= self.check.axis < a.ndim or a.shape[self.check.axis] < 2:
            raise self._error(
                f"expects class scores with >= 2 classes on axis {self.check.axis}; output "
                f"{self.check.output!r} has shape {list(a.shape)} (one channel: use probability_map)"
            )

    def sample_sums(self, ref: np.ndarray, got: np.ndarray) -> dict[str, Any]:
        return dense.segmentation_sums(ref, got, self.check.axis)

    def metrics(self, s: dict[str, Any]) -> dict[str, Any]:
        present = s["union"] > 0
        ious = s["inter"][present] / s["union"][present]
        return {
            "pixel_agreement": s["agree"] / s["pixels"],
            "miou": float(ious.mean()) if present.any() else 1.0,
            "classes_present": int(present.sum()),
            "pixels": s["pixels"],
        }

    def limits(self) -> list[Limit]:
        return [("pixel_agreement", ">=", self.check.min_pixel_agreement), ("miou", ">=", self.check.min_miou)]

    def inconclusive(self, s: dict[str, Any], metrics: dict[str, Any]) -> Reason | None:
        classes = np.nonzero(s["ref_classes"])[0]
        return Verdict.ONE_CLASS(cls=int(classes[0])) if len(classes) == 1 else None


class Depth(TaskMetric):
    kind = "depth"

    def check_shapes(self, ref: dict[str, np.ndarray]) -> None:
        a = ref[self.check.output]
        if a.ndim == 4 and a.shape[1] != 1 or a.ndim > 4 or a.ndim < 2:
            raise self._error(
                f"expects a depth map (N, H, W) or (N, 1, H, W); output {self.check.output!r} has shape {list(a.shape)}"
            )

    def sample_sums(self, ref: np.ndarray, got: np.ndarray) -> dict[str, Any]:
        return dense.depth_sums(ref, got, self.check.min_depth)

    def metrics(self, s: dict[str, Any]) -> dict[str, Any]:
        n = s["pixels"]
        return {"abs_rel": s["abs_rel"] / n if n else 0.0, "delta1": s["delta1"] / n if n else 1.0, "valid_pixels": n}

    def limits(self) -> list[Limit]:
        return [("abs_rel", "<=", self.check.max_abs_rel), ("delta1", ">=", self.check.min_delta1)]

    def inconclusive(self, s: dict[str, Any], metrics: dict[str, Any]) -> Reason | None:
        return Verdict.NO_REFERENCE_DEPTH(min_depth=self.check.min_depth) if s["pixels"] == 0 else None


class Trajectory(TaskMetric):
    kind = "trajectory"

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.check.output,) + ((self.check.scores,) if self.check.scores else ())

    def check_shapes(self, ref: dict[str, np.ndarray]) -> None:
        c = self.check
        a = ref[c.output]
        if a.ndim < 2 or a.shape[-1] not in (2, 3):
            raise self._error(f"expects trajectories (..., T, 2 or 3); output {c.output!r} has shape {list(a.shape)}")
        if c.scores and (a.ndim < 3 or ref[c.scores].shape != a.shape[:-2]):
            raise self._error(
                f"expects mode scores (..., K) for trajectories (..., K, T, D); output {c.scores!r} has "
                f"shape {list(ref[c.scores].shape)}, {c.output!r} {list(a.shape)}"
            )

    def fold(self, sums: Any, ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Any:
        c = self.check
        if not c.scores:
            return super().fold(sums, ref, got)
        return dense.add_sums(sums, dense.best_mode_sums(ref[c.output], got[c.output], ref[c.scores], got[c.scores]))

    def sample_sums(self, ref: np.ndarray, got: np.ndarray) -> dict[str, Any]:
        return dense.trajectory_sums(ref, got)

    def metrics(self, s: dict[str, Any]) -> dict[str, Any]:
        out = {"ade": s["ade"] / s["steps"], "fde": s["fde"] / s["agents"], "agents": s["agents"]}
        return {**out, "top1": s["top1"] / s["rows"], "rows": s["rows"]} if self.check.scores else out

    def limits(self) -> list[Limit]:
        c = self.check
        return [("ade", "<=", c.max_ade), ("fde", "<=", c.max_fde)] + ([("top1", ">=", c.min_top1)] if c.scores else [])

    def inconclusive(self, s: dict[str, Any], metrics: dict[str, Any]) -> Reason | None:
        return Verdict.STILL_TRAJECTORIES() if s["ref_moving"] == 0 else None


class ProbabilityMap(TaskMetric):
    kind = "probability_map"

    def check_shapes(self, ref: dict[str, np.ndarray]) -> None:
        a = np.asarray(ref[self.check.output], np.float64)
        if a.size and (np.nanmin(a) < 0 or np.nanmax(a) > 1):
            raise self._error(
                f"expects probabilities in [0, 1]; output {self.check.output!r} ranges "
                f"{np.nanmin(a):.3g}..{np.nanmax(a):.3g} (logits? use segmentation, or apply sigmoid)"
            )

    def sample_sums(self, ref: np.ndarray, got: np.ndarray) -> dict[str, Any]:
        return dense.mask_sums(ref, got, self.check.threshold)

    def metrics(self, s: dict[str, Any]) -> dict[str, Any]:
        return {
            "iou": s["inter"] / s["union"] if s["union"] else 1.0,
            "flipped_pixels": s["flipped"],
            "reference_on": s["ref_on"] / s["pixels"],
        }

    def limits(self) -> list[Limit]:
        return [("iou", ">=", self.check.min_iou)]

    def inconclusive(self, s: dict[str, Any], metrics: dict[str, Any]) -> Reason | None:
        if s["ref_on"] == 0:
            return Verdict.MASK_EMPTY(threshold=self.check.threshold)
        if s["ref_on"] == s["pixels"]:
            return Verdict.MASK_FULL(threshold=self.check.threshold)
        return None


# config field -> the metric it limits (one name per field in every check kind); a measurement never
# depends on these fields
LIMIT_FIELDS = {
    "min_top1": "top1",
    "min_topk": "topk",
    "min_matched": "matched",
    "min_recall": "recall",
    "min_mean_iou": "mean_iou",
    "max_score_delta": "mean_score_delta",
    "max_class_flips": "class_flips",
    "min_pixel_agreement": "pixel_agreement",
    "min_miou": "miou",
    "max_abs_rel": "abs_rel",
    "min_delta1": "delta1",
    "max_ade": "ade",
    "max_fde": "fde",
    "min_iou": "iou",
}

KINDS: dict[str, type[TaskMetric]] = {
    c.kind: c for c in (Classification, Detection, Segmentation, Depth, Trajectory, ProbabilityMap)
}


def deciding_limit(result: dict[str, Any]) -> dict[str, Any]:
    """The judged limit of a task check's :meth:`TaskMetric.result` that decides its verdict: the one
    furthest past its bound, else the one closest to it (a limit switched off, 0 for a minimum, never
    decides while another is judged); {} when the check has none."""

    def used(limit: dict[str, Any]) -> float:
        value, bound = result["metrics"].get(limit["metric"]), limit["value"]
        if not isinstance(value, (int, float)) or np.isnan(value):
            return float("inf")
        if limit["op"] == ">=":  # a fraction that must reach the bound: compare shortfalls from 1
            return (1.0 - value) / (1.0 - bound) if bound < 1.0 else (0.0 if value >= bound else float("inf"))
        return value / bound if bound > 0 else (0.0 if value <= bound else float("inf"))

    judged = [lim for lim in result.get("limits", []) if lim.get("judged", True)]
    return max(judged, key=used, default={})


def build_tasks(tasks: TaskChecks) -> list[TaskMetric]:
    """One accumulator per configured check, in config order."""
    return [KINDS[kind](check, i) for kind in KINDS for i, check in enumerate(getattr(tasks, kind))]


def unordered_outputs(tasks: TaskChecks) -> set[str]:
    """Outputs only a task check compares: detections after NMS (``elementwise: false``), whose box
    count and order are data-dependent."""
    return {
        name
        for c in tasks.detection
        if not c.elementwise
        for name in (c.boxes, c.scores, c.classes, *(c.packed.tensors() if c.packed else ()))
        if name
    }


def max_abs_exempt(tasks: TaskChecks) -> set[str]:
    """Outputs whose elementwise max_abs is not checked: probability maps, where one flipped pixel is 1.0."""
    return {c.output for c in tasks.probability_map}
