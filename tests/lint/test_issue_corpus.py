"""Refusals reported in public TensorRT / onnx-tensorrt issues, reproduced as graphs built in code
(bench/lint_corpus.py): the lint raises exactly the expected errors, and none for the same graph made
right. One test per case, named by its issue."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("lint_corpus", ROOT / "bench" / "lint_corpus.py")
corpus = importlib.util.module_from_spec(spec)
sys.modules["lint_corpus"] = corpus  # its dataclasses look their module up
spec.loader.exec_module(corpus)


@pytest.mark.parametrize("case", corpus.CASES, ids=[f"{c.issue}-{c.name}" for c in corpus.CASES])
def test_public_issue_reproduction(case):
    report = corpus.lint_case(case)
    got = {f.rule for f in report.findings if f.severity == "error"}
    assert got == case.errors, [f.line() for f in report.findings]
    assert report.exit_code == (4 if case.errors else 0)


def test_the_corpus_pairs_refusals_with_accepted_twins():
    """Every issue has a refused graph; several have an accepted twin, so the lint must tell them apart."""
    issues = {c.issue for c in corpus.CASES}
    assert len(issues) >= 8 and all(
        any(c.errors for c in corpus.CASES if c.issue == i) or i.endswith(("#23618", "#2644")) for i in issues
    )
    assert sum(not c.errors for c in corpus.CASES) >= 4
