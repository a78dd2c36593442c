"""Reasons as data: a code that programs and tests read, next to the sentence a person reads.

Every reason deploykit gives (why a node stayed in higher precision,
:class:`deploykit.quant.reasons.Kept`; why the mixed-precision search stopped,
:class:`deploykit.quant.search.Stop`; why a parity comparison or the quantize stage's check fails,
proves nothing or warns, :class:`Verdict`) is a member of a :class:`Code` enumeration: its code and
its sentence template side by side. Calling the member with the template's fields gives a
:class:`Reason`. Artifacts store ``{"code": ..., "sentence": ...}`` (:meth:`Reason.to_dict`);
renderers print the sentence (``str(reason)``), code compares the code.

The reason types live here, below :mod:`deploykit.quant` (which imports the metrics), so that the
metrics can give verdict reasons; the quantize stage's own reasons are :mod:`deploykit.quant.reasons`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class Reason:
    """A code and the sentence that says it; ``also``: the codes of qualifications the sentence adds.

    A verdict's reason also says what it is about (``subject``: an output, a task check's label, or
    ``"boxes vs onnx"``; the sentence then starts ``"boxes: "``) and, for a limit missed, the ``metric``.
    """

    code: str
    sentence: str
    also: tuple[str, ...] = ()
    subject: str = ""
    metric: str = ""

    def __str__(self) -> str:
        return self.sentence

    @property
    def codes(self) -> tuple[str, ...]:
        """The reason's code, then those of its qualifications."""
        return (self.code, *self.also)

    def qualified(self, other: Reason) -> Reason:
        """This reason with ``other`` appended ("; " between the sentences), its codes kept."""
        return Reason(self.code, f"{self.sentence}; {other.sentence}", (*self.also, *other.codes))

    def about(self, subject: str) -> Reason:
        """This reason said of ``subject`` (``"subject: sentence"``), its codes kept."""
        return dataclasses.replace(self, sentence=f"{subject}: {self.sentence}", subject=subject)

    @property
    def bare(self) -> str:
        """The sentence without its subject: ``rel_l2 0.2 > 0.1`` of ``y: rel_l2 0.2 > 0.1``."""
        return self.sentence.removeprefix(f"{self.subject}: ") if self.subject else self.sentence

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "sentence": self.sentence,
            **({"also": list(self.also)} if self.also else {}),
            **({"subject": self.subject} if self.subject else {}),
            **({"metric": self.metric} if self.metric else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reason:
        return cls(
            str(data["code"]),
            str(data["sentence"]),
            tuple(data.get("also", ())),
            str(data.get("subject", "")),
            str(data.get("metric", "")),
        )


class Code(Enum):
    """A reason's code and its sentence template (:meth:`str.format` fields); call it to get a Reason."""

    def __init__(self, code: str, template: str) -> None:
        self.code, self.template = code, template

    def __call__(self, **fields: Any) -> Reason:
        return Reason(self.code, self.template.format(**fields))

    def restate(self, reason: Reason) -> Reason:
        """``reason`` said through this qualification's template (``{reason}``: its sentence), this code
        added to its ``also``: ``inconclusive: the reference output is all zeros``."""
        return dataclasses.replace(
            reason, sentence=self.template.format(reason=reason.sentence), also=(*reason.also, self.code)
        )


class Verdict(Code):
    """Why a parity comparison (the parity stage's, or the quantize stage's check, which judges as parity
    does) fails, proves nothing, or warns: a limit missed (``metric`` names it), a reference that makes
    the comparison vacuous (inconclusive), a warning on the check, or a qualification of another reason."""

    # a limit missed (metrics.elementwise.violations, metrics.tasks.TaskMetric.result); ``value`` and
    # ``limit`` come formatted: elementwise and task metrics print them to different precisions
    NONFINITE = ("nonfinite", "{count} NaN/Inf values the reference does not have")
    ABOVE_LIMIT = ("above_limit", "{metric} {value} > {limit}")
    BELOW_LIMIT = ("below_limit", "{metric} {value} < {limit}")
    OUTSIDE_TOLERANCE = ("outside_tolerance", "{outside} of {elements} elements outside {within}")
    # the reference proves nothing (inconclusive): elementwise (metrics.elementwise.vacuity) ...
    REFERENCE_NONFINITE = ("reference_nonfinite", "the reference itself has {count} NaN/Inf values")
    REFERENCE_ZEROS = ("reference_zeros", "the reference output is all zeros")
    REFERENCE_CONSTANT = ("reference_constant", "the reference output is constant ({value:.3g} everywhere)")
    REFERENCE_TINY = ("reference_tiny", "the reference output is tiny (max |ref| {absmax:.3g} < {below:g})")
    # ... and per task check (metrics.tasks, each kind's inconclusive())
    SCORES_TIED = ("scores_tied", "every reference score ties in every row")
    NO_REFERENCE_BOXES = (
        "no_reference_boxes",
        "no reference box scores >= {threshold:g} in {images} image(s): nothing was compared",
    )
    ONE_CLASS = ("one_class", "the reference argmax is class {cls} everywhere")
    NO_REFERENCE_DEPTH = ("no_reference_depth", "no reference depth above min_depth {min_depth:g}")
    STILL_TRAJECTORIES = ("still_trajectories", "every reference trajectory point is zero")
    MASK_EMPTY = ("mask_empty", "no reference pixel reaches the threshold {threshold:g}")
    MASK_FULL = ("mask_full", "every reference pixel reaches the threshold {threshold:g}")
    # warnings on the quantize stage's check (quant.check)
    WEAK_SIGNAL = (
        "weak_signal",
        "the error (rel-L2 {rel_l2:.3g}) is {ratio:.3g}x how much the output changes between samples "
        "({signal:.3g}); this output barely depends on its input, so passing its tolerance proves little",
    )
    SIGNAL_LOST = (
        "signal_lost",
        "the error (rel-L2 {rel_l2:.3g}) is {ratio:.3g}x how much the output changes between samples "
        "({signal:.3g}): the quantized output has lost much of what the input changes in it, whatever its "
        "tolerance says",
    )
    SHAPE_DIFFERS = (
        "shape_differs",
        "the candidate's shape differs from the FP32 graph's on some samples (a data-dependent size): not "
        "compared here",
    )
    # qualifications of another reason (Code.restate; ``{reason}``: its sentence)
    INCONCLUSIVE = ("inconclusive", "inconclusive: {reason}")  # a vacuous comparison that fails the check
    NOT_JUDGED = ("not_judged", "{reason} (not judged)")  # a limit or vacuity reported, not deciding
    JUDGED_BY_TASKS = ("judged_by_tasks", "{reason} (not judged: parity.judge is tasks)")

    def __call__(self, **fields: Any) -> Reason:
        return dataclasses.replace(super().__call__(**fields), metric=str(fields.get("metric", "")))


def codes(kind: type[Code]) -> tuple[str, ...]:
    """Every code of one enumeration, in its order (documentation and tests list them from here)."""
    return tuple(member.code for member in kind)


def as_reason(value: Reason | dict[str, Any] | str) -> Reason:
    """A reason as stored: a Reason, its dict, or (a record written before reasons had codes) its sentence."""
    if isinstance(value, Reason):
        return value
    if isinstance(value, dict):
        return Reason.from_dict(value)
    return Reason("", str(value))


def stored(value: Any) -> Any:
    """``value`` with every Reason in it (in dicts, lists, tuples) as its dict: ready for JSON."""
    if isinstance(value, Reason):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: stored(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [stored(v) for v in value]
    return value


__all__ = ["Code", "Reason", "Verdict", "as_reason", "codes", "stored"]
