"""``deploykit lint`` over a corpus: the real pretrained models, every example of the zoo at each
precision (the graph its TensorRT build would get), ONNX Runtime's ``quantize_static`` and ModelOpt's
``quantize`` with their defaults on each example's FP32 graph, and the graphs reproducing refusals
reported in public issues (bench/lint_corpus.py).

    python bench/bench_lint.py [--only detector] [--skip-examples] [--plugins LIB]

Prints a table and writes bench/results/lint.json and lint.md. Expected: ORT's defaults are refused
(asymmetric UINT8 zero points, INT32 biases), ModelOpt's are not; each issue graph gets its error and
its corrected twin none. Examples are quantized with max calibration and no mixed-precision search:
the lint judges the graph's structure, which neither changes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT), str(ROOT / "bench")]
RESULTS = ROOT / "bench" / "results"
MODELS = Path(os.environ.get("DEPLOYKIT_MODELS", "/work/cache/models"))
PRECISIONS = ("fp32", "fp16", "int8", "fp8")
QUICK = {"quantize.method": "max", "quantize.repair.enabled": False}


def summary(kind: str, name: str, report: Any, seconds: float, expected: str = "") -> dict[str, Any]:
    rules = Counter(f"{f.rule} ({f.severity})" for f in report.findings)
    return {
        "kind": kind,
        "name": name,
        "verdicts": [v.line() for v in report.verdicts()],
        "errors": len(report.errors),
        "rules": dict(rules.most_common()),
        "seconds": round(seconds, 2),
        "expected": expected,
        "first_error": report.errors[0].line()[:200] if report.errors else "",
    }


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    return fn(), time.perf_counter() - start


def real_models() -> list[dict[str, Any]]:
    import deploykit

    rows = []
    for path in sorted(MODELS.rglob("*.onnx")):
        report, s = timed(lambda p=path: deploykit.lint(p))
        rows.append(summary("real model", f"{path.parent.name}/{path.name}", report, s))
    return rows


def issue_rows() -> list[dict[str, Any]]:
    import lint_corpus

    rows = []
    for case in lint_corpus.CASES:
        report, s = timed(lambda c=case: lint_corpus.lint_case(c))
        expected = ", ".join(sorted(case.errors)) or "no error"
        got = {f.rule for f in report.errors}
        rows.append(
            summary(
                "issue graph",
                f"{case.issue} {case.name}",
                report,
                s,
                f"{expected}: {'as expected' if got == case.errors else 'DIFFERS'}",
            )
        )
    return rows


def example_rows(store: Path, only: str, plugins: list[str]) -> list[dict[str, Any]]:
    import zoo

    import deploykit

    rows = []
    for name, (config, _) in zoo.CASES.items():
        if only and name != only:
            continue
        for precision in PRECISIONS:
            overrides = {"quantize.precision": precision, **QUICK}
            if precision != "fp32":
                overrides["quantize.target"] = "tensorrt"
            try:
                libraries = plugins if name == "bev" else None
                report, s = timed(
                    lambda c=config, o=overrides, lib=libraries: deploykit.lint(
                        c, workdir=store, overrides=o, plugins=lib
                    )
                )
            except deploykit.DeployKitError as e:
                rows.append(
                    {
                        "kind": "example",
                        "name": f"{name} {precision}",
                        "errors": -1,
                        "verdicts": [],
                        "rules": {},
                        "seconds": 0,
                        "expected": "",
                        "first_error": f"not made: {e.message[:160]}",
                    }
                )
                continue
            rows.append(summary("example", f"{name} {precision} (tensorrt flavour)", report, s))
        rows += quantizer_rows(name, config, store, plugins if name == "bev" else [])
    return rows


def quantizer_rows(name: str, config: Path, store: Path, plugins: list[str]) -> list[dict[str, Any]]:
    """ORT's quantize_static and ModelOpt's quantize, both with their defaults, on the example's FP32 graph."""
    import numpy as np
    from bench_quantize import modelopt_default, ort_default

    import deploykit
    from deploykit.api import resolve_config
    from deploykit.graph.feeds import random_feeds
    from deploykit.lint import LintOptions, lint_file

    cfg = resolve_config(config)
    fp32 = deploykit.surgery(config, workdir=store).artifacts["model"].file("model.onnx")
    rng = np.random.default_rng(0)
    samples = [random_feeds(cfg, "opt", rng) for _ in range(4)]
    options = LintOptions(plugins=tuple(Path(p) for p in plugins), profiles=_profiles(cfg))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, make, expected in (
            (
                "ORT quantize_static defaults",
                lambda: ort_default(fp32, samples, Path(tmp) / "ort.onnx"),
                "errors: UINT8 zero points, INT32 biases",
            ),
            (
                "ModelOpt int8 defaults",
                lambda: modelopt_default(fp32, "int8", samples, Path(tmp) / "mo.onnx"),
                "no error",
            ),
        ):
            try:
                made = make()
            except Exception as e:  # noqa: BLE001 - a quantizer that cannot take the graph is a row
                rows.append(
                    {
                        "kind": "quantizer",
                        "name": f"{name}: {label}",
                        "errors": -1,
                        "verdicts": [],
                        "rules": {},
                        "seconds": 0,
                        "expected": expected,
                        "first_error": f"not made: {type(e).__name__}: {str(e)[:160]}",
                    }
                )
                continue
            report, s = timed(lambda m=made: lint_file(m, options))
            rows.append(summary("quantizer", f"{name}: {label}", report, s, expected))
    return rows


def _profiles(cfg: Any) -> Any:
    from deploykit.backends.base import profiles_from_config

    return profiles_from_config(cfg)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| kind | graph | TensorRT 10.13 | TensorRT 11 | rules found | expected |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        v = [line.split(": ", 1)[-1] for line in r["verdicts"]] or ["-", "-"]
        rules = ", ".join(f"{k} x{n}" for k, n in list(r["rules"].items())[:4]) or r.get("first_error") or "-"
        lines.append(f"| {r['kind']} | {r['name']} | {v[0]} | {v[-1]} | {rules} | {r['expected'] or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="one zoo example")
    p.add_argument("--skip-examples", action="store_true")
    p.add_argument("--plugins", action="append", default=[], help="plugin library for the bev example")
    p.add_argument("--workdir", type=Path, help="artifact store for the examples (default: a temporary one)")
    args = p.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    rows = issue_rows() + real_models()
    if not args.skip_examples:
        with tempfile.TemporaryDirectory() as tmp:
            rows += example_rows(args.workdir or Path(tmp) / "store", args.only, args.plugins)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "lint.json").write_text(
        json.dumps({"rows": rows, "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=1)
    )
    text = table(rows)
    (RESULTS / "lint.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
