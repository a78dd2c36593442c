"""Markdown summaries for CI job summaries and pull-request comments."""

from __future__ import annotations

from typing import Any


def render_gate(report: dict[str, Any]) -> str:
    lat = report["latency"]
    verdict = "PASS" if report["passed"] else "FAIL"
    lines = [f"## deploykit gate: {report['model']} — {verdict}", "",
             f"Platform `{report['platform']}`, batch {report['batch']}, {lat['n']} iterations "
             f"after {report['warmup']} warm-up, evaluator: {report['evaluator']}.", "",
             "| metric | value |", "| --- | --- |",
             f"| FPS ({report['fps_definition']}) | {report['fps']:.1f} |"]
    lines += [f"| latency {k.removesuffix('_ms')} | {lat[k]:.3f} ms |" for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms")]
    if report["checks"]:
        lines += ["", "| check | target | measured | result |", "| --- | --- | --- | --- |"]
        lines += [f"| {c['name']} | {c['target']:g} | {c['measured']:.2f} | {'pass' if c['passed'] else '**FAIL**'} |"
                  for c in report["checks"]]
    else:
        lines += ["", f"_{report.get('note') or 'no target'}: measured only._"]
    return "\n".join(lines) + "\n"


def render_parity(report: dict[str, Any]) -> str:
    lines = [f"## parity — {'PASS' if report['passed'] else 'FAIL'}", "",
             f"Candidate: {report['candidate_evaluator']}; data: {report['data']['note']}.", "",
             "| output | reference | max abs | rel L2 | cosine | result |", "| --- | --- | --- | --- | --- | --- |"]
    for out, refs in report["outputs"].items():
        for ref, r in refs.items():
            m = r["metrics"]
            lines.append(f"| {out} | {ref} | {m['max_abs']:.3g} | {m['rel_l2']:.3g} | {m['cosine']:.6f} | "
                         f"{'pass' if r['passed'] else '**FAIL**'} |")
    return "\n".join(lines) + "\n"
