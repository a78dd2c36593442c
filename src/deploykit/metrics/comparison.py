"""One parity comparison: every output against every reference, elementwise and by task, folded over
samples into the report the parity stage writes.

Each entry ends in one of three statuses: ``fail`` (a limit is exceeded), ``inconclusive`` (the
reference makes the check vacuous: constant, all zeros, tiny, no boxes...), or ``pass``. A failure
wins over inconclusive: a NaN against an all-zero reference is still a failure. Every reason (a
violation, a limit reported but not judged, why a check is inconclusive) is a
:class:`~deploykit.metrics.reasons.Verdict` reason, stored as ``{"code": ..., "sentence": ...}``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from deploykit.config import ParityConfig, Tolerance
from deploykit.metrics.elementwise import ErrorAccumulator, vacuity, violations
from deploykit.metrics.reasons import Reason, Verdict, stored
from deploykit.metrics.tasks import TaskMetric, build_tasks, max_abs_exempt, unordered_outputs


class Comparison:
    """Accumulates (reference name, output) -> errors and (reference name, task) -> task sums."""

    def __init__(
        self, parity: ParityConfig, preset: Tolerance, precision: str = "fp32", histogram: bool = True
    ) -> None:
        """``histogram``: bin each sample's errors for the report's plots (off where nothing draws them)."""
        self.parity, self.preset, self.precision, self.histogram = parity, preset, precision, histogram
        self.elementwise: dict[tuple[str, str], ErrorAccumulator] = {}
        self.tasks: dict[str, list[TaskMetric]] = {}
        self.samples = 0
        self.unordered = unordered_outputs(parity.tasks)
        # per sample: its worst rel-L2 and, per reference, each task's sums over it alone (what a search
        # orders its confirmation samples by, deploykit.quant.judge.Judge.hardest_first)
        self.per_sample: list[tuple[float, dict[str, list[Any]]]] = []

    def add(self, expected: dict[str, dict[str, np.ndarray]], got: dict[str, np.ndarray]) -> float:
        """Fold one sample (reference name -> outputs; candidate outputs); return its worst rel-L2."""
        worst = 0.0
        sums: dict[str, list[Any]] = {}
        for ref_name, outputs in expected.items():
            for out_name, ref in outputs.items():
                cand = _output(got, out_name)
                if out_name in self.unordered:
                    continue  # compared by its detection check only
                key = (ref_name, out_name)
                if key not in self.elementwise:
                    tol = self.parity.tolerance(out_name, self.preset)
                    self.elementwise[key] = ErrorAccumulator(tol.rel_floor or 0.0, tol.atol, tol.rtol, self.histogram)
                try:
                    worst = max(worst, self.elementwise[key].add(ref, cand)["rel_l2"])
                except ValueError as e:
                    from deploykit.errors import DataError

                    raise DataError(f"output {out_name!r}: {e}") from e
            if ref_name not in self.tasks:
                self.tasks[ref_name] = build_tasks(self.parity.tasks)
            sums[ref_name] = [task.add(outputs, got) for task in self.tasks[ref_name]]
        self.samples += 1
        self.per_sample.append((worst, sums))
        return worst

    def check_outputs(self, names: list[str]) -> None:
        """Tolerances named for outputs the model lacks are a config mistake, not something to ignore."""
        from deploykit.errors import ConfigError

        unknown = sorted(set(self.parity.outputs) - set(names))
        if unknown:
            raise ConfigError(
                f"parity.outputs names {', '.join(map(repr, unknown))}, which the model does not "
                f"have; its outputs are: {', '.join(names)}",
                hint="fix the output names in the config",
            )

    def report(self) -> dict[str, Any]:
        """The verdict and every number behind it (JSON-ready except for non-finite floats: every reason
        as its dict, ``inconclusive`` None where the check proves something)."""
        exempt = max_abs_exempt(self.parity.tasks)
        outputs: dict[str, dict[str, Any]] = {}
        for (ref_name, out_name), acc in sorted(self.elementwise.items()):
            outputs.setdefault(out_name, {})[ref_name] = self._elementwise_entry(out_name, acc, out_name in exempt)
        tasks = [
            {**t.result(self.parity.judge), "reference": ref_name}
            for ref_name, ts in sorted(self.tasks.items())
            for t in ts
        ]
        for t in tasks:
            t["status"] = _status(t["violations"], t["inconclusive"])
            t["passed"] = t["status"] == "pass"
        failures: list[Reason] = []
        vacuous: list[Reason] = []
        for out_name, refs in outputs.items():
            for ref_name, e in refs.items():
                failures += [v.about(f"{out_name} vs {ref_name}") for v in e["violations"]]
                if e["status"] == "inconclusive":
                    vacuous.append(e["inconclusive"].about(f"{out_name} vs {ref_name}"))
        for t in tasks:
            failures += [v.about(f"{t['label']} vs {t['reference']}") for v in t["violations"]]
            if t["status"] == "inconclusive":
                vacuous.append(t["inconclusive"].about(f"{t['label']} vs {t['reference']}"))
        status = "fail" if failures else "inconclusive" if vacuous else "pass"
        passed = status == "pass" or (status == "inconclusive" and self.parity.inconclusive == "warn")
        return stored(
            {
                "status": status,
                "passed": passed,
                "failures": failures,
                "inconclusive": vacuous,
                "outputs": outputs,
                "tasks": tasks,
                "precision": self.precision,
                "preset": asdict(self.preset),
                "samples": self.samples,
                "not_compared_elementwise": {
                    n: "data-dependent box count and order (detection check with elementwise: false)"
                    for n in sorted(self.unordered)
                },
            }
        )

    def _elementwise_entry(self, out_name: str, acc: ErrorAccumulator, exempt: bool) -> dict[str, Any]:
        tol = self.parity.tolerance(out_name, self.preset)
        result = acc.result()
        skip = ("max_abs",) if exempt else ()
        missed = violations(result["metrics"], tol, skip)
        if self.parity.elementwise_judged:
            bad, reported = missed, []
        else:  # parity.judge: tasks: the limits are reported; NaN/Inf the reference lacks still fails
            bad = missed[:1] if result["metrics"]["nonfinite"] > 0 else []
            reported = [Verdict.JUDGED_BY_TASKS.restate(m) for m in missed if m not in bad]
        why = vacuity(result["metrics"], self.parity.vacuous_below)
        if why and not self.parity.elementwise_judged:
            reported, why = [*reported, Verdict.NOT_JUDGED.restate(Verdict.INCONCLUSIVE.restate(why))], None
        status = _status(bad, why)
        return {
            **result,
            "tolerance": asdict(tol),
            "violations": bad,
            "reported": reported,
            "inconclusive": why,
            "status": status,
            "passed": status == "pass",
            "judged": self.parity.elementwise_judged,
            "not_checked": ["max_abs (probability map: see its thresholded IoU)"] if exempt else [],
        }


def _status(violations_: list[Reason], inconclusive: Reason | None) -> str:
    return "fail" if violations_ else "inconclusive" if inconclusive else "pass"


def _output(got: dict[str, np.ndarray], name: str) -> np.ndarray:
    if name not in got:
        from deploykit.errors import DataError

        raise DataError(
            f"the engine has no output {name!r} (it has: {', '.join(got)})",
            hint="surgery renamed or removed an output; keep the model's outputs",
        )
    return got[name]
