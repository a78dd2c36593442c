"""``deploykit parity A B``: two models or engine folders compared on the same inputs, as ``polygraphy
run --onnxrt --trt`` compares two runners: every common output elementwise (and by task, when asked)
with parity's metrics, tolerances and verdict, rendered like a pipeline's parity.

A side is an ``.onnx`` file (run node by node by ONNX Runtime, no graph optimizations: the graph as
written) or an engine folder (``deploykit build -o DIR``, loaded through the backend that built it).
A is the reference. The inputs are random (seeded), shaped by A's inputs with named dims from
``dims``, or the samples given (``--load-inputs``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import UsageError

Sample = dict[str, np.ndarray]


@dataclass(frozen=True)
class PairResult:
    """The comparison as a run record (its checks, and the report as ``details["parity"]``), the
    samples compared on, and what each side computed on them."""

    record: Any  # deploykit.record.model.RunRecord
    samples: list[Sample] = field(default_factory=list)
    runs: dict[str, list[Sample]] = field(default_factory=dict)  # "reference" / "candidate" -> outputs per sample

    @property
    def passed(self) -> bool:
        return self.record.passed

    def __repr__(self) -> str:
        from deploykit.report.terminal import verdict_lines

        return "\n".join([f"PairResult({self.record.name!r}, passed={self.passed})", *verdict_lines(self.record)])


def open_side(path: Path, what: str) -> tuple[Any, str]:
    """(a Session, how it runs) for an .onnx file or an engine folder.

    A folder without ``engine.json`` is the wrong argument (exit 2, as a wrong file is); an engine
    folder whose ``engine.json`` is unusable is a broken input (ModelError)."""
    hint = "give two models, two engine folders, or one of each"
    if path.is_dir():
        from deploykit.backends import get_backend
        from deploykit.profiling.run import ENGINE_JSON, engine_record

        if not (path / ENGINE_JSON).exists():
            raise UsageError(
                f"{what} {path}: a folder without {ENGINE_JSON}, not an engine folder (deploykit build -o DIR)",
                hint=hint,
            )

        session = get_backend(engine_record(path)["backend"]).load(path)
        return session, session.evaluator
    if path.suffix == ".onnx":
        from deploykit.graph.run import session_from_onnx

        session = session_from_onnx(path, "onnxruntime", level="disabled")
        return session, session.evaluator
    raise UsageError(f"{what} {path}: expected an .onnx file or an engine folder (deploykit build -o DIR)", hint=hint)


def random_samples(specs: list[Any], dims: Mapping[str, int], count: int, seed: int) -> list[Sample]:
    """``count`` random feeds for ``specs`` (TensorSpec): named dims from ``dims`` (else 1)."""
    from deploykit.graph.feeds import NP_DTYPES, random_input

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        sample = {}
        for spec in specs:
            shape = [d if isinstance(d, int) and d > 0 else int(dims.get(str(d), 1)) for d in spec.shape]
            dtype = NP_DTYPES.get(spec.dtype)
            if dtype is None:
                raise UsageError(f"input {spec.name!r} is a {spec.dtype} tensor; give its values with --load-inputs")
            sample[spec.name] = random_input("tensor", shape, dtype, rng)
        out.append(sample)
    return out


def compare_pair(
    a: Path,
    b: Path,
    *,
    parity: Any,
    preset: Any,
    precision: str = "fp32",
    dims: Mapping[str, int] | None = None,
    samples: list[Sample] | None = None,
    count: int = 4,
    seed: int = 1,
    progress: Callable[[str, int], Any] | None = None,
) -> PairResult:
    """Run A (the reference) and B on the same samples and judge B by parity's rules."""
    from deploykit.metrics.comparison import Comparison
    from deploykit.record.model import RunRecord
    from deploykit.stages.parity import parity_checks

    ref, ref_how = open_side(a, "A")
    cand, cand_how = open_side(b, "B")
    names = ({s.name for s in ref.inputs}, {s.name for s in cand.inputs})
    if names[0] != names[1]:
        raise UsageError(
            f"A and B take different inputs: {', '.join(sorted(names[0]))} vs {', '.join(sorted(names[1]))}",
            hint="compare models of one interface",
        )
    common = [o.name for o in ref.outputs if o.name in {c.name for c in cand.outputs}]
    if not common:
        raise UsageError("A and B have no output name in common", hint="compare models of one interface")
    feeds = samples if samples is not None else random_samples(ref.inputs, dims or {}, count, seed)
    label = a.name if a.name != b.name else "A"
    comparison = Comparison(parity, preset, precision)
    comparison.check_outputs(common)
    runs: dict[str, list[Sample]] = {"reference": [], "candidate": []}
    for sample in feeds:
        expected = {k: v for k, v in ref.infer(sample).items() if k in common}
        got = {k: v for k, v in cand.infer(sample).items() if k in common}
        comparison.add({label: expected}, got)
        runs["reference"].append(expected)
        runs["candidate"].append(got)
    report = {
        **comparison.report(),
        "candidate_evaluator": f"{b}: {cand_how}",
        "references": {label: f"{a}: {ref_how}"},
        "data": {
            "kind": "given" if samples is not None else "random",
            "samples": len(feeds),
            "note": "the samples given"
            if samples is not None
            else f"random normal inputs (seed {seed}), named dims {dict(dims or {}) or 'at 1'}",
        },
        "not_compared": sorted({o.name for o in ref.outputs} ^ {o.name for o in cand.outputs}),
    }
    record = RunRecord(
        name=f"{b.name} vs {a.name}",
        precision=precision,
        backend="",
        flavour="",
        checks=tuple(parity_checks(report)),
        details={"parity": report},
    )
    return PairResult(record, list(feeds), runs)


__all__ = ["PairResult", "compare_pair", "open_side", "random_samples"]
