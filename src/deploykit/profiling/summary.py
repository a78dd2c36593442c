"""A profile as a report: layers by time with their share, the roofline columns, and the aggregates.

For each layer (see :mod:`cost` for FLOPs and bytes):

- achieved FLOP/s = FLOPs / time, achieved bandwidth = bytes / time;
- roofline = min(compute peak of the layer's precision, intensity x copy bandwidth): what the machine
  could reach at that arithmetic intensity; ``of_roofline`` = achieved / roofline (1.0 = at the roof);
- bound: compute when the intensity is at or above the ridge point (peak / bandwidth), else memory;
- floor = max(FLOPs / compute peak, bytes / bandwidth): the layer's time at the roof.

The model's floor latency is the sum of its layers' floors: what this machine needs at least to run
the graph as these layers, with no overhead and every kernel at its peak.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from deploykit.profiling.cost import layer_cost
from deploykit.profiling.layers import Layer
from deploykit.profiling.peaks import Peaks

SCHEMA = "deploykit.profile/1"


def layer_row(layer: Layer, total_ms: float, peaks: Peaks | None) -> dict[str, Any]:
    """One layer as a report row (times in ms, rates per second)."""
    cost = layer_cost(layer)
    ms = layer.ms
    row: dict[str, Any] = {
        "name": layer.name,
        "op_type": layer.op_type,
        "kind": cost.kind,
        "precision": layer.precision,
        "ms": ms,
        "share": ms / total_ms if total_ms else 0.0,
        "runs": len(layer.times_ms),
        "flops": cost.flops,
        "bytes": cost.bytes,
        "intensity": cost.intensity,
        "inputs": [[t.dtype, list(t.shape)] for t in layer.inputs],
        "outputs": [[t.dtype, list(t.shape)] for t in layer.outputs],
        **layer.extra,
    }
    seconds = ms / 1e3
    row["achieved_flops"] = cost.flops / seconds if seconds else 0.0
    row["achieved_bandwidth"] = cost.bytes / seconds if seconds else 0.0
    bandwidth = peaks.bandwidth_for(cost.bytes) if peaks is not None else 0.0
    if peaks is not None and bandwidth > 0:
        compute, measured_as = peaks.compute(layer.precision or "fp32")
        ridge = compute / bandwidth if compute else 0.0
        roof = min(compute, cost.intensity * bandwidth) if compute else cost.intensity * bandwidth
        floor_s = max(cost.flops / compute if compute else 0.0, cost.bytes / bandwidth)
        row.update(
            {
                "compute_peak": compute,
                "peak_precision": measured_as,
                "memory_peak": bandwidth,
                "roofline_flops": roof,
                "bound": "compute" if cost.flops and cost.intensity >= ridge else "memory",
                "floor_ms": floor_s * 1e3,
                # Movement layers have no FLOPs: their distance from the roof is in bandwidth.
                "of_roofline": (
                    row["achieved_flops"] / roof if cost.flops and roof else row["achieved_bandwidth"] / bandwidth
                ),
            }
        )
    return row


def summarize(layers: list[Layer], peaks: Peaks | None, *, top: int = 10, **facts: Any) -> dict[str, Any]:
    """The profile report: every layer (slowest first), the top ``top``, aggregates by op type and precision.

    Args:
        layers: the profiled layers.
        peaks: this machine's ceilings; None leaves the roofline columns out (the report says why in ``facts``).
        top: how many of the slowest layers the summary lists.
        **facts: backend, evaluator, timing method, batch, iterations... copied into the report.
    """
    total = sum(layer.ms for layer in layers)
    rows = sorted((layer_row(layer, total, peaks) for layer in layers), key=lambda r: r["ms"], reverse=True)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        **facts,
        "layers_count": len(rows),
        "total_ms": total,
        "top": [r["name"] for r in rows[:top]],
        "top_n": top,
        "layers": rows,
        "by_op_type": _group(rows, "op_type", total),
        "by_precision": _group(rows, "precision", total),
    }
    if peaks is not None:
        floor = sum(r.get("floor_ms", 0.0) for r in rows)
        compute = sum(r["ms"] for r in rows if r.get("bound") == "compute")
        report.update(
            {
                "peaks": peaks.to_json(),
                "floor_ms": floor,
                "of_floor": floor / total if total else 0.0,
                "compute_bound_share": compute / total if total else 0.0,
                "ridge_intensity": peaks.compute("fp32")[0] / peaks.copy_bytes_per_s if peaks.copy_bytes_per_s else 0.0,
            }
        )
    return report


def _group(rows: list[dict[str, Any]], key: str, total: float) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "ms": 0.0, "flops": 0.0})
    for row in rows:
        g = groups[row[key] or "?"]
        g["count"] += 1
        g["ms"] += row["ms"]
        g["flops"] += row["flops"]
    out = [{key: name, **g, "share": g["ms"] / total if total else 0.0} for name, g in groups.items()]
    return sorted(out, key=lambda g: g["ms"], reverse=True)


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def render_markdown(report: dict[str, Any]) -> str:
    """The profile as Markdown: headline, the top layers with the roofline columns, op types, precisions."""
    lines = [
        f"## Per-layer profile: {report.get('model', '')} ({report.get('backend', '')})",
        "",
        f"{report.get('evaluator', '')}; batch {report.get('batch', '?')}, {report.get('iterations', '?')} profiled "
        f"runs after {report.get('warmup', '?')} warm-up; {report.get('timing', '')}.",
        "",
        f"Sum of layer times {report['total_ms']:.3f} ms over {report['layers_count']} layers"
        + (f"; profiled run {report['run_ms']:.3f} ms" if report.get("run_ms") else "")
        + ".",
    ]
    if "floor_ms" in report:
        p = report["peaks"]
        lines += [
            "",
            f"Roofline floor {report['floor_ms']:.3f} ms ({report['of_floor']:.0%} of the measured time); "
            f"{report['compute_bound_share']:.0%} of the time in compute-bound layers. Peaks on {p['device']}: "
            + ", ".join(f"{k} {_si(v, 'FLOP/s')}" for k, v in p["gemm_flops"].items())
            + "; copy "
            + ", ".join(f"{_si(v, 'B/s')} at {_si(float(k), 'B')}" for k, v in p["bandwidth"].items())
            + ".",
        ]
    elif report.get("roofline_note"):
        lines += ["", f"No roofline: {report['roofline_note']}."]
    head = "| layer | op | precision | ms | share | GFLOP | MB | FLOP/B | achieved | of roof | bound |"
    lines += [
        "",
        f"### Slowest {min(report['top_n'], report['layers_count'])} layers",
        "",
        head,
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["layers"][: report["top_n"]]:
        achieved = _si(r["achieved_flops"], "FLOP/s") if r["flops"] else _si(r["achieved_bandwidth"], "B/s")
        roof = f"{r['of_roofline']:.0%}" if "of_roofline" in r else "-"
        lines.append(
            f"| `{r['name']}` | {r['op_type']} | {r['precision'] or '?'} | {r['ms']:.4f} | {r['share']:.1%} | "
            f"{r['flops'] / 1e9:.3f} | {r['bytes'] / 1e6:.2f} | {r['intensity']:.1f} | {achieved} | {roof} | "
            f"{r.get('bound', '-')} |"
        )
    for title, key in (("By op type", "op_type"), ("By precision", "precision")):
        lines += ["", f"### {title}", "", f"| {key.replace('_', ' ')} | layers | ms | share |", "|---|---:|---:|---:|"]
        lines += [f"| {g[key]} | {g['count']} | {g['ms']:.4f} | {g['share']:.1%} |" for g in report[f"by_{key}"]]
    return "\n".join(lines) + "\n"


def write_profile(report: dict[str, Any], folder: Path, *, with_plots: bool = True) -> list[Path]:
    """``profile.json``, ``profile.md`` and ``profile.html`` in ``folder``, each written atomically."""
    from deploykit.report.html import render_profile_page

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    texts = {
        "profile.json": json.dumps(report, indent=2, default=str),
        "profile.md": render_markdown(report),
        "profile.html": render_profile_page(report, with_plots),
    }
    written = []
    for name, text in texts.items():
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / name)
        written.append(folder / name)
    return written
