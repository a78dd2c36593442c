"""The HTML report: one self-contained file (inline CSS, plots as base64 PNG), and the same summary as
a fragment for notebooks (``RunResult._repr_html_``)."""

from __future__ import annotations

import html
from typing import Any

from deploykit.record.model import RunRecord, portable
from deploykit.report import plots
from deploykit.report.markdown import change, fmt, timed_phrase

CSS = """
.dk-report { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; max-width: 1100px; }
.dk-report h1 { font-size: 22px; margin: 0 0 4px; } .dk-report h2 { font-size: 17px; margin: 26px 0 8px;
  border-bottom: 1px solid #d0d7de; padding-bottom: 4px; } .dk-report h3 { font-size: 14px; margin: 16px 0 6px; }
.dk-report table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
.dk-report th, .dk-report td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
.dk-report th { background: #f6f8fa; }
.dk-report td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.dk-report code { font-size: 12px; background: #f6f8fa; padding: 0 3px; border-radius: 3px; }
.dk-report .pass { color: #1a7f37; font-weight: 600; } .dk-report .fail { color: #cf222e; font-weight: 600; }
.dk-report .inconclusive, .dk-report .reused { color: #9a6700; font-weight: 600; }
.dk-report .badge { display: inline-block; padding: 2px 10px; border-radius: 12px; color: #fff; font-weight: 600; }
.dk-report .badge.pass { background: #1a7f37; color: #fff; }
.dk-report .badge.fail { background: #cf222e; color: #fff; }
.dk-report .bar { background: #0969da; height: 10px; border-radius: 2px; min-width: 1px; }
.dk-report .note { color: #59636e; font-size: 13px; } .dk-report img { max-width: 100%; }
.dk-report ul.lineage { list-style: none; padding-left: 0; font-size: 13px; }
"""


def e(value: Any) -> str:
    return html.escape(str(value))


def _status(status: str) -> str:
    return f"<span class='{e(status)}'>{e(status)}</span>"


def _table(head: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """Cells are HTML already; columns in ``numeric`` are right-aligned."""
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(f"<td class='num'>{c}</td>" if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"


def _img(render: Any, *args: Any) -> str:
    return f"<img alt='plot' src='{render(*args)}'>"


def render_page(record: RunRecord, with_plots: bool = True) -> str:
    """A complete HTML document."""
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{e(_title(record))}</title></head><body>{render_fragment(record, with_plots)}</body></html>\n"
    )


def _title(record: RunRecord) -> str:
    return f"deploykit {record.details.get('source', 'run')} {record.identity}"


def render_fragment(record: RunRecord, with_plots: bool = False) -> str:
    """The report body (with its CSS) for embedding, e.g. in a notebook cell."""
    with_plots = with_plots and plots.available()
    d = record.details
    verdict = {"PASS": "pass", "FAIL": "fail", "ERROR": "fail"}[record.verdict]
    label = {"PASS": "passed", "FAIL": "failed", "ERROR": "error"}[record.verdict]
    parts = [
        f"<style>{CSS}</style><div class='dk-report'>",
        f"<h1>{e(_title(record))} <span class='badge {verdict}'>{label}</span> "
        f"<span class='note'>exit {record.exit_code}</span></h1>",
        _headline(record),
        _timeline(record),
        _lineage(record),
    ]
    if d.get("quantize"):
        parts.append(_quantize(d["quantize"], with_plots))
    if d.get("lint"):
        parts.append(_lint(d["lint"]))
    if d.get("parity"):
        parts.append(_parity(d["parity"], with_plots))
    if d.get("gate"):
        parts.append(_gate(d["gate"], with_plots, record.gate_cached))
        if d["gate"].get("profile"):
            parts.append(profile_section(d["gate"]["profile"], with_plots))
    parts.append(_environment(record))
    if not with_plots and (d.get("parity") or d.get("gate") or d.get("quantize")):
        parts.append(
            "<p class='note'>Plots: <code>deploykit report</code> or <code>result.report_html()</code> "
            "(needs matplotlib).</p>"
        )
    return "".join(parts) + "</div>"


def _headline(record: RunRecord) -> str:
    """The record's verdict lines (the terminal's), the warnings set apart."""
    from deploykit.report.terminal import verdict_lines

    items = []
    for line in verdict_lines(record):
        head, _, rest = line.partition(":")
        word = rest.split()[0] if rest.split() else ""
        cls = "inconclusive" if head == "warning" else {"PASS": "pass", "FAIL": "fail", "ERROR": "fail"}.get(word, "")
        items.append(f"<li><b class='{cls}'>{e(head)}</b>:{e(portable(rest, record.workdir))}</li>")
    return f"<ul>{''.join(items)}</ul>"


def _timeline(record: RunRecord) -> str:
    longest = max((s.seconds for s in record.stages), default=0.0) or 1.0
    rows = [
        [
            e(s.stage),
            _status(s.status),
            f"{s.seconds:.2f} s",
            f"<div class='bar' style='width:{max(1, int(240 * s.seconds / longest))}px'></div>",
            f"<code>{e(s.digest[:12])}</code>",
            e(s.kind),
            e(portable(s.error or s.note, record.workdir)),
        ]
        for s in record.stages
    ]
    return "<h2>Stages</h2>" + _table(["stage", "status", "time", "", "artifact", "kind", "note"], rows, {2})


def _lineage(record: RunRecord) -> str:
    items = "".join(
        f"<li style='margin-left:{18 * r['depth']}px'>{e(r['role'] + ': ' if r['role'] else '')}"
        f"<code>{e(r['digest'][:12])}</code> {e(r['kind'])} <span class='note'>(stage {e(r['stage'])} "
        f"v{e(r['version'])}, {e(r['created'])}){' — see above' if r.get('repeat') else ''}</span></li>"
        for r in record.details.get("lineage", [])
    )
    where = f" <span class='note'>store: {e(record.workdir)}</span>" if record.workdir else ""
    return f"<h2>Artifact lineage</h2>{where}<ul class='lineage'>{items}</ul>"


def _lint(report: dict[str, Any]) -> str:
    from deploykit.report.markdown import lint_rows

    verdicts = "".join(f"<li>{e(v['line'])}</li>" for v in report.get("verdicts", []))
    rows = [[e(cell) for cell in row] for row in lint_rows(report, limit=200)]
    table = _table(["severity", "rule", "node", "op", "TensorRT", "finding", "fix"], rows) if rows else ""
    notes = "".join(f"<p class='note'>{e(n)}</p>" for n in report.get("notes", []))
    return f"<h2>TensorRT lint</h2><ul>{verdicts}</ul>{table}{notes}"


def _quantize(q: dict[str, Any], with_plots: bool) -> str:
    """Precision, the check against FP32, the CPU speed, warnings, and the precision patch."""
    check, patch = q.get("check") or {}, q.get("patch") or {}
    status = "pass" if check.get("passed", True) else "fail"
    out = [
        f"<h2>Quantization: {e(q['precision'].upper())} ({e(q['flavour'])} flavour) {_status(status)}</h2>",
        f"<p>Method {e(q.get('method', ''))}, {q.get('samples', 0)} calibration samples (the ranges come from "
        f"{q.get('range_samples', q.get('samples', 0))}), {q.get('quantized_nodes', 0)} quantized nodes. Checked on "
        f"{e(check.get('data', 'held-out samples'))} ({check.get('samples', 0)}) with "
        f"{e(q.get('evaluator') or 'no evaluator')}.</p>",
    ]
    speed = q.get("cpu_speed")
    if speed:
        out.append(
            f"<p>On this CPU: FP32 {speed['fp32_ms']:.3f} ms, {e(q['precision'].upper())} "
            f"{speed['quantized_ms']:.3f} ms per inference at batch {speed['batch']} "
            f"(<b>{speed['speedup']:.2f}×</b>, median of {speed['rounds']} interleaved rounds of "
            f"{speed['iterations']} iteration(s); rounds ranged {speed.get('speedup_low', 0):.2f}–"
            f"{speed.get('speedup_high', 0):.2f}×).</p>"
        )
    if q.get("warnings"):
        out.append("<ul>" + "".join(f"<li class='inconclusive'>{e(w)}</li>" for w in q["warnings"]) + "</ul>")
    rows = [
        [e(name), fmt(m.get("rel_l2")), fmt(m.get("cosine")), fmt(m.get("max_abs"))]
        for name, m in sorted(check.get("metrics", {}).items())
    ]
    if rows:
        out.append(_table(["output", "rel L2 (worst sample)", "cosine", "max abs"], rows, {1, 2, 3}))
    if check.get("violations"):
        out.append(f"<p class='fail'>{e('; '.join(map(_sentence, check['violations'])))}</p>")
    kept = [
        [f"<code>{e(n)}</code>", what, e(_sentence(why))]
        for key, what in (
            ("excluded_from_quantization", "not quantized"),
            ("kept_fp32", "FP32"),
            ("left_unquantized_by_quantizer", "not quantized (placement rules)"),
        )
        for n, why in sorted((patch.get(key) or {}).items())
    ]
    if kept:
        out.append("<h3>Precision patch</h3>" + _table(["node", "kept", "why"], kept))
    if patch.get("search"):
        out.append(_search(patch["search"], with_plots))
    elif patch.get("layer_precisions"):
        rows = [[f"<code>{e(g)}</code>", e(p)] for g, p in sorted(patch["layer_precisions"].items())]
        out.append("<h3>Layer precisions (configured)</h3>" + _table(["layer group", "precision"], rows))
    return "".join(out)


def _sentence(reason: Any) -> str:
    """A stored reason's sentence (a record written before reasons had codes holds the bare sentence)."""
    from deploykit.metrics.reasons import as_reason

    return as_reason(reason).sentence


def _search(s: dict[str, Any], with_plots: bool) -> str:
    """The mixed-precision search: the patch it chose, what each layer was measured to do, every step."""
    ev = s["evaluations"]
    status = _status("pass" if s["passed"] else "fail")
    out = [
        f"<h3>Mixed-precision search: {status} ({e(_sentence(s['stopped']))})</h3>",
        f"<p>Judged on {e(s['judged_on'])}; {ev['fresh']} evaluations run, {ev['cached']} reused from an earlier "
        f"artifact. Latency: {e(s['latency'])}. Precisions offered: {e(', '.join(s['precisions']))}.</p>",
    ]
    measured = {r["group"]: r for r in s["sensitivity"]}
    rows = [
        [
            f"<code>{e(g)}</code>",
            e(measured.get(g, {}).get("ops", "")),
            e(p),
            str(measured.get(g, {}).get("rank", "")),
            fmt(measured.get(g, {}).get("alone_damage")),
            fmt(measured.get(g, {}).get("gain", {}).get(p)),
            fmt(measured.get(g, {}).get("cost", {}).get(p)),
        ]
        for g, p in sorted(s["layer_precisions"].items())
    ]
    if rows:
        out.append(
            "<p>Chosen patch (paste into <code>quantize.layer_precisions</code> to replay it):</p>"
            + _table(
                [
                    "layer group",
                    "ops",
                    "precision",
                    "rank",
                    "error alone (first order)",
                    "gain raised alone",
                    f"latency cost ({e(s['latency_unit'])})",
                ],
                rows,
                {4, 5, 6},
            )
        )
    steps = []
    for r in s["table"]:
        counts = ", ".join(f"{k.upper()} {v}" for k, v in sorted(r["precisions"].items()))
        values = "; ".join(f"{e(k)} {fmt(v)}" for k, v in list(r["values"].items())[:3])
        mark = " (chosen)" if r.get("chosen") else " (kept)" if r["kept"] else ""
        if r.get("ran"):  # its ratios are the best it could still reach: at least this far off
            mark += f" (stopped after {r['ran']} samples: cannot pass)"
        steps.append(
            [
                str(r["step"]),
                e(r["action"] + mark),
                e(", ".join(f"{g} {p}" for g, p in r["changes"].items()) or "—"),
                e(counts),
                ("≥ " if r.get("ran") else "") + fmt(r["worst_ratio"]),
                values,
                fmt(r["latency_vs_top"]),
                fmt(r.get("measured_ms")),
                _status("pass" if r["passed"] else "fail"),
            ]
        )
    out.append(
        _table(
            [
                "step",
                "action",
                "changes",
                "precisions",
                "worst / limit",
                "values",
                "latency vs top",
                "measured ms",
                "within limits",
            ],
            steps,
            {4, 6, 7},
        )
    )
    if with_plots:
        out.append(_img(plots.search_pareto, s["table"], s["latency_unit"]))
    return "".join(out)


def _parity(p: dict[str, Any], with_plots: bool) -> str:
    status = p.get("status", "pass" if p["passed"] else "fail")
    out = [
        f"<h2>Parity: {_status(status)}</h2>",
        f"<p>Candidate: {e(p['candidate_evaluator'])}. References: "
        f"{e(', '.join(f'{k} ({v})' for k, v in p['references'].items()))}.<br>"
        f"Data: {e(p['data']['note'])}; {p.get('samples', p['data'].get('samples', '?'))} samples; "
        f"tolerance preset: {e(p.get('precision', 'fp32'))}.</p>",
    ]
    if p["data"].get("warning"):
        out.append(f"<p class='inconclusive'>{e(p['data']['warning'])}</p>")
    rows = []
    for name, refs in p["outputs"].items():
        for ref, r in refs.items():
            m, tol = r["metrics"], r["tolerance"]
            rows.append(
                [
                    e(name),
                    e(ref),
                    *(
                        f"{fmt(m.get(k))}<br><span class='note'>{_limit(tol.get(k), k)}</span>"
                        for k in ("max_abs", "mean_abs", "rel_l2", "max_rel")
                    ),
                    f"{fmt(m['cosine'], '.6f')}<br><span class='note'>{_limit(tol.get('cosine'), 'cosine')}</span>",
                    fmt(m.get("snr_db"), ".1f"),
                    str(m["nonfinite"]),
                    _status(r.get("status", "pass" if r["passed"] else "fail")) + _why(r),
                ]
            )
    out.append(
        _table(
            [
                "output",
                "reference",
                "max abs",
                "mean abs",
                "rel L2",
                "max rel",
                "cosine",
                "SNR dB",
                "NaN/Inf",
                "result",
            ],
            rows,
            {2, 3, 4, 5, 6, 7, 8},
        )
    )
    out.append(_tasks(p.get("tasks", [])))
    if with_plots:
        out += [_img(plots.parity_output, name, refs) for name, refs in p["outputs"].items()]
    out.append(_diagnosis(p.get("diagnosis"), with_plots))
    return "".join(out)


def _limit(value: Any, key: str) -> str:
    if value is None:
        return "not checked"
    return f"≥ {value:g}" if key in ("cosine", "snr_db") else f"≤ {value:g}"


def _why(entry: dict[str, Any]) -> str:
    reasons = list(entry.get("violations", [])) + ([entry["inconclusive"]] if entry.get("inconclusive") else [])
    reasons = [_sentence(r) for r in reasons] + entry.get("not_checked", [])
    m = entry.get("metrics", {})
    if "top1" in m and "k" in m:
        reasons.append(f"top-1 agreement {m['top1']:.1%}, top-{m['k']} {m['topk']:.1%}")
    return "".join(f"<br><span class='note'>{e(r)}</span>" for r in reasons)


def _tasks(tasks: list[dict[str, Any]]) -> str:
    if not tasks:
        return ""
    rows = []
    for t in tasks:
        shown = "<br>".join(
            f"{e(k)} {fmt(v, '.4g') if isinstance(v, float) else e(v)}" for k, v in t["metrics"].items()
        )
        limits = "<br>".join(f"{e(lim['metric'])} {e(lim['op'])} {lim['value']:g}" for lim in t["limits"])
        rows.append(
            [
                e(t["label"]),
                e(", ".join(t["outputs"])),
                e(t["reference"]),
                shown,
                limits,
                _status(t["status"]) + _why(t),
            ]
        )
    return "<h3>Task metrics</h3>" + _table(["check", "outputs", "reference", "metrics", "limits", "result"], rows)


def _diagnosis(d: dict[str, Any] | None, with_plots: bool) -> str:
    if not d:
        return ""
    if d.get("status") != "ran":
        return f"<h3>Per-layer diagnosis</h3><p class='note'>{e(d.get('status'))}: {e(d.get('reason', ''))}</p>"
    out = [f"<h3>Per-layer diagnosis</h3><p>Compared with {e(d.get('candidate', ''))}.</p>"]
    for title, key in (("First tensors over the threshold", "first_exceeding"), ("Largest error growth", "top_growth")):
        rows = [
            [
                e(t.get("tensor")),
                e(t.get("op_type", "")),
                fmt(t.get("rel_l2")),
                fmt(t.get("max_abs")),
                fmt(t.get("growth")),
            ]
            for t in d.get(key, [])
        ]
        if rows:
            out.append(f"<h3>{title}</h3>" + _table(["tensor", "op", "rel L2", "max abs", "growth"], rows, {2, 3, 4}))
    if with_plots and d.get("tensors"):
        out.append(_img(plots.per_layer, d["tensors"], d.get("threshold")))
    return "".join(out)


def _gate(g: dict[str, Any], with_plots: bool, cached: bool = False) -> str:
    label = (
        " <span class='reused'>cached: measured by an earlier run (--remeasure to measure again)</span>"
        if cached
        else ""
    )
    out = [
        f"<h2>Gate: {_status('pass' if g['passed'] else 'fail')}{label}</h2>",
        f"<p>Platform <code>{e(g['platform'])}</code>, batch {g['batch']}, precision {e(g.get('precision', '?'))}, "
        f"{g.get('trials_count', 1)} trials × {g.get('iterations', g['latency']['n'])} iterations after "
        f"{_warmup(g)}; evaluator: {e(g['evaluator'])}; timed {e(timed_phrase(g))}.</p>",
    ]
    if g["checks"]:
        out.append(
            _table(
                ["check", "target", "measured", "judged on", "result"],
                [
                    [
                        e(c["name"]),
                        f"{c['target']:g}",
                        f"{c['measured']:.4g}",
                        e(c.get("statistic", "")),
                        _status("pass" if c["passed"] else "fail"),
                    ]
                    for c in g["checks"]
                ],
                {1, 2},
            )
        )
    else:
        out.append(f"<p class='note'>{e(g.get('note') or 'no target')}: measured only.</p>")
    spread = g.get("spread", {})
    rows = [[f"<b>FPS</b> ({e(g.get('fps_definition', ''))})", f"<b>{g['fps']:.1f}</b>", _fps_range(g)]]
    if g.get("fps_best_case"):
        rows.append(
            [
                e(g.get("fps_best_case_definition", "best case")),
                f"{g['fps_best_case']:.1f}",
                _fps_range(g, "fps_best_case_trials"),
            ]
        )
    rows += [
        [
            k.removesuffix("_ms"),
            f"{g['latency'][k]:.3f}",
            f"{spread[k]['min']:.3f} – {spread[k]['max']:.3f} ({spread[k]['rel'] * 100:.1f}%)" if k in spread else "",
        ]
        for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms")
    ]
    w, d = g.get("worst_case"), g.get("deadline")
    if w:
        rows += [
            ["p99.9 (every iteration)", f"{w['p999_ms']:.3f}", ""],
            ["max (every iteration)", f"{w['max_ms']:.3f}", ""],
            ["jitter p99 − p50 (every iteration)", f"{w['jitter_ms']:.3f}", ""],
        ]
    if d:
        rows.append(
            [
                f"deadline {d['deadline_ms']:g} ms: late frames",
                f"{d['misses']} of {d['frames']}",
                f"{d['miss_rate'] * 100:.2f}%, longest run {d['longest_miss_run']}",
            ]
        )
    soak = g.get("soak")
    if soak:
        from deploykit.report.terminal import soak_phrase

        rows.append(
            [
                e(soak_phrase(soak)),
                f"max {soak['worst_case']['max_ms']:.3f}",
                f"p99.9 {soak['worst_case']['p999_ms']:.3f}",
            ]
        )
    out.append(
        "<h3>Throughput and latency (ms)</h3>" + _table(["statistic", "median of trials", "trial range"], rows, {1})
    )
    out.append(_sweep(g) + _baseline(g.get("baseline")))
    if with_plots:
        out += [_img(plots.latency_histogram, g), _img(plots.percentile_bars, g)]
        if g.get("trials_ms"):
            out.append(_img(plots.latency_over_time, g))
        if soak and soak.get("per_second"):
            out.append(_img(plots.soak_over_time, soak))
        if g.get("sweep"):
            out.append(_img(plots.batch_sweep, g))
    return "".join(out)


def _warmup(g: dict[str, Any]) -> str:
    w = g["warmup"]
    return f"{w['iterations']} warm-up runs ({w['seconds']:.2f} s)" if isinstance(w, dict) else f"{w} warm-up runs"


def _fps_range(g: dict[str, Any], key: str = "fps_trials") -> str:
    f = g.get(key)
    return f"{min(f):.1f} – {max(f):.1f}" if f else ""


def _sweep(g: dict[str, Any]) -> str:
    rows = [
        [str(r["batch"]), f"{r['latency']['p50_ms']:.3f}", f"{r['latency']['p99_ms']:.3f}", f"{r['fps']:.1f}"]
        for r in sorted([g, *g.get("sweep", [])], key=lambda r: r["batch"])
    ]
    c = g.get("concurrency")
    if c:
        rows.append([f"{c['batch']} × {c['streams']} sessions", f"{c['p50_ms']:.3f}", "", f"{c['throughput']:.1f}"])
    if len(rows) < 2:
        return ""
    return "<h3>Throughput</h3>" + _table(["batch", "p50 ms", "p99 ms", "samples/s"], rows, {1, 2, 3})


def _baseline(b: dict[str, Any] | None) -> str:
    if not b:
        return ""
    rows = [
        [
            e(c["metric"]),
            f"{c['baseline']:.4g}",
            f"{c['measured']:.4g}",
            e(change(c["slowdown"])),
            e(change(c["slowdown_at_least"])),
            f"{c['spread'] * 100:.1f}%",
            _status("pass" if c["passed"] else "fail"),
        ]
        for c in b["checks"]
    ]
    return (
        f"<h3>Against baseline</h3><p class='note'>{e(b['path'])}; a regression needs every pairing of trials "
        f"to be more than {b['threshold'] * 100:g}% slower.</p>"
        + _table(
            ["metric", "baseline", "now", "change (median)", "at least", "spread", "result"], rows, {1, 2, 3, 4, 5}
        )
    )


def profile_section(p: dict[str, Any], with_plots: bool) -> str:
    """The per-layer profile: headline, the slowest layers with the roofline columns, op types, plots."""
    out = [
        f"<h2>Per-layer profile ({e(p.get('backend', ''))})</h2>",
        f"<p>{e(p.get('evaluator', ''))}; batch {e(p.get('batch', '?'))}, {p.get('iterations', '?')} profiled runs "
        f"after {p.get('warmup', '?')} warm-up; {e(p.get('timing', ''))}. Sum of layer times "
        f"<b>{p['total_ms']:.3f} ms</b> over {p['layers_count']} layers.</p>",
    ]
    if "floor_ms" in p:
        out.append(
            f"<p>Roofline floor <b>{p['floor_ms']:.3f} ms</b> ({p['of_floor']:.0%} of the measured time); "
            f"{p['compute_bound_share']:.0%} of the time in compute-bound layers. Peaks measured on "
            f"{e(p['peaks']['device'])}.</p>"
        )
    elif p.get("roofline_note"):
        out.append(f"<p class='note'>No roofline: {e(p['roofline_note'])}.</p>")
    rows = [
        [
            f"<code>{e(r['name'])}</code>",
            e(r["op_type"]),
            e(r["precision"] or "?"),
            f"{r['ms']:.4f}",
            f"{r['share']:.1%}",
            f"{r['flops'] / 1e9:.3f}",
            f"{r['bytes'] / 1e6:.2f}",
            f"{r['intensity']:.1f}",
            f"{r['achieved_flops'] / 1e9:.2f}",
            f"{r['achieved_bandwidth'] / 1e9:.2f}",
            f"{r['of_roofline']:.0%}" if "of_roofline" in r else "–",
            e(r.get("bound", "–")),
        ]
        for r in p["layers"][: p.get("top_n", 10)]
    ]
    out.append(
        f"<h3>Slowest {len(rows)} layers</h3>"
        + _table(
            [
                "layer",
                "op",
                "precision",
                "ms",
                "share",
                "GFLOP",
                "MB",
                "FLOP/B",
                "GFLOP/s",
                "GB/s",
                "of roofline",
                "bound",
            ],
            rows,
            {3, 4, 5, 6, 7, 8, 9, 10},
        )
    )
    for title, key in (("By op type", "op_type"), ("By precision", "precision")):
        out.append(
            f"<h3>{title}</h3>"
            + _table(
                [key.replace("_", " "), "layers", "ms", "share"],
                [[e(g[key]), str(g["count"]), f"{g['ms']:.4f}", f"{g['share']:.1%}"] for g in p[f"by_{key}"]],
                {1, 2, 3},
            )
        )
    if with_plots:
        out.append(_img(plots.profile_layers, p))
        if "peaks" in p:
            out.append(_img(plots.roofline, p))
    return "".join(out)


def render_profile_page(p: dict[str, Any], with_plots: bool = True) -> str:
    """A self-contained HTML page of one profile (``deploykit profile -o DIR``)."""
    with_plots = with_plots and plots.available()
    title = f"deploykit profile {p.get('model', '')}"
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{e(title)}</title></head><body><style>{CSS}</style><div class='dk-report'>"
        f"<h1>{e(title)}</h1>{profile_section(p, with_plots)}</div></body></html>\n"
    )


def _environment(record: RunRecord) -> str:
    d = record.device
    device = ", ".join(f"{k}: {v if not isinstance(v, list) else ' '.join(map(str, v))}" for k, v in d.items())
    tools = [[e(k), e(v)] for k, v in sorted(record.tools.items())]
    return f"<h2>Platform and tools</h2><p>{e(device)}</p>" + _table(["tool", "version"], tools)
