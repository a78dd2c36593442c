"""ONNX's backend node tests as a corpus we did not write: every case ONNX Runtime passes as it comes
must still load, run and match its expected outputs after ``sanitize`` and ``remove_noops``.

onnx 1.21 ships each case as a folder (``model.onnx`` + ``test_data_set_*/{input,output}_*.pb``);
newer onnx builds them in memory (``case.model`` and ``case.data_sets``). Both are read here.
Run alone for the numbers: ``python tests/surgery/test_node_corpus.py``.
"""

from __future__ import annotations

import glob
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import onnx
import pytest


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float
    atol: float


@dataclass
class Tally:
    cases: int = 0
    ort_before: int = 0
    after: int = 0
    regressions: list[str] = field(default_factory=list)
    changed: int = 0  # cases where a pass modified the graph


def load_cases(every: int = 1) -> list[Case]:
    """Every ``every``-th node test with its data sets, in either form onnx ships."""
    from onnx.backend.test.loader import load_model_tests

    out = []
    for t in sorted(load_model_tests(kind="node"), key=lambda t: t.name)[::every]:
        if getattr(t, "model", None) is not None:
            sets = [(list(i), list(o)) for i, o in (t.data_sets or [])]
            out.append(Case(t.name, t.model, sets, t.rtol, t.atol))
        elif t.model_dir:
            model = onnx.load(os.path.join(t.model_dir, "model.onnx"))
            out.append(Case(t.name, model, _read_sets(model, t.model_dir), t.rtol, t.atol))
    return out


def _read_sets(model: onnx.ModelProto, folder: str) -> list[tuple[list[Any], list[Any]]]:
    weights = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in weights]
    sets = []
    for d in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        ins = [
            _read_proto(os.path.join(d, f"input_{k}.pb"), vi.type)
            for k, vi in enumerate(inputs)
            if os.path.exists(os.path.join(d, f"input_{k}.pb"))
        ]
        outs = [_read_proto(os.path.join(d, f"output_{k}.pb"), vi.type) for k, vi in enumerate(model.graph.output)]
        sets.append((ins, outs))
    return sets


def _read_proto(path: str, tp: onnx.TypeProto) -> Any:
    from onnx import numpy_helper

    data = open(path, "rb").read()
    if tp.HasField("sequence_type"):
        return numpy_helper.to_list(onnx.SequenceProto.FromString(data))
    if tp.HasField("optional_type"):
        return numpy_helper.to_optional(onnx.OptionalProto.FromString(data))
    return numpy_helper.to_array(onnx.TensorProto.FromString(data))


def ort_passes(model: onnx.ModelProto, case: Case) -> bool:
    """Whether ONNX Runtime (CPU, optimizations off) loads, runs and matches every data set."""
    import onnxruntime as ort
    from onnx.backend.test.runner import Runner

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        for ins, outs in case.data_sets:
            got = sess.run(None, dict(zip(names, ins, strict=False)))
            Runner.assert_similar_outputs(outs, got, rtol=case.rtol, atol=case.atol)
    except Exception:
        return False
    return bool(case.data_sets)


def apply_passes(case: Case) -> tuple[onnx.ModelProto, bool]:
    """``sanitize`` then ``remove_noops`` through the checked runner, as the surgery stage runs them.

    The runner adds its own checks after each pass (checker, strict shape inference when the input
    passed them, ONNX Runtime outputs against the graph before, at the case's tolerances).
    """
    from deploykit.surgery.registry import instantiate
    from deploykit.surgery.runner import run_passes

    weights = {i.name for i in case.model.graph.initializer}
    names = [vi.name for vi in case.model.graph.input if vi.name not in weights]
    feeds = dict(zip(names, case.data_sets[0][0], strict=False))
    model, reports = run_passes(
        case.model,
        [instantiate("sanitize"), instantiate("remove_noops")],
        feeds,
        atol=max(case.atol, 1e-7),
        rtol=max(case.rtol, 1e-5),
        where=case.name,
    )
    return model, any(r["modified"] for r in reports)


def run_corpus(every: int = 1) -> Tally:
    tally = Tally()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in load_cases(every):
            tally.cases += 1
            if not ort_passes(case.model, case):
                continue
            tally.ort_before += 1
            try:
                after, changed = apply_passes(case)
                ok = ort_passes(after, case)
            except Exception as e:  # a pass that crashes is a regression too
                after, changed, ok = None, True, False
                tally.regressions.append(f"{case.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            tally.changed += changed
            if ok:
                tally.after += 1
            elif after is not None:
                tally.regressions.append(case.name)
    return tally


@pytest.mark.slow
def test_sanitize_and_remove_noops_keep_every_ort_passing_node_test():
    tally = run_corpus()
    assert tally.cases > 1000 and tally.ort_before > 0.7 * tally.cases
    assert tally.regressions == []
    assert tally.after == tally.ort_before


def test_a_sample_of_the_corpus():
    """Every 25th case, so the default suite exercises the corpus too (the whole run is marked slow)."""
    tally = run_corpus(every=25)
    assert tally.cases > 40 and tally.ort_before > 0.7 * tally.cases
    assert tally.regressions == [] and tally.after == tally.ort_before


if __name__ == "__main__":
    import time

    start = time.perf_counter()
    t = run_corpus()
    print(
        f"cases {t.cases}, ORT passing before {t.ort_before}, after sanitize+remove_noops {t.after}, "
        f"graphs changed {t.changed}, regressions {len(t.regressions)} ({time.perf_counter() - start:.1f} s)"
    )
    for r in t.regressions:
        print("  ", r)
