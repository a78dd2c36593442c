"""Report plots as base64 PNG, drawn with matplotlib (imported here only, when a report renders).

Each function takes a report dict (or a part of it) and returns a ``data:image/png;base64,...`` URI,
so the HTML file stays self-contained.
"""

from __future__ import annotations

import base64
import io
from typing import Any

_PASS, _FAIL, _GREY, _BLUE = "#1a7f37", "#cf222e", "#6e7781", "#0969da"


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width: float = 7.0, height: float = 2.8, cols: int = 1) -> tuple[Any, Any]:
    # The Figure API, not pyplot: no global backend switch (matplotlib.use would change the host
    # application's, e.g. a notebook's), no figure registry to leak into; savefig renders with Agg.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    return fig, fig.subplots(1, cols)


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def parity_output(name: str, entries: dict[str, dict[str, Any]]) -> str:
    """One output: |error| distribution per reference (log x) and rel-L2 per sample vs its tolerance."""
    fig, (hist_ax, sample_ax) = _figure(cols=2)
    for i, (ref, e) in enumerate(sorted(entries.items())):
        h = e["abs_error_histogram"]
        edges, counts = h["edges"], h["counts"]
        colour = (_BLUE, "#bf8700", _GREY)[i % 3]
        hist_ax.stairs(counts, edges, label=f"vs {ref} ({h['zeros']} exact)", color=colour, fill=i == 0, alpha=0.6)
        rel = [max(v, 1e-12) if v is not None else float("nan") for v in e["per_sample_rel_l2"]]
        exact = " (exact: drawn at 1e-12)" if not any(e["per_sample_rel_l2"]) else ""
        sample_ax.plot(range(len(rel)), rel, "o-", color=colour, label=f"vs {ref}{exact}", ms=3)
    tol = next(iter(entries.values()))["tolerance"]
    if tol.get("max_abs") is not None:
        hist_ax.axvline(tol["max_abs"], color=_FAIL, ls="--", lw=1, label=f"max_abs ≤ {tol['max_abs']:g}")
    if tol.get("rel_l2") is not None:
        sample_ax.axhline(tol["rel_l2"], color=_FAIL, ls="--", lw=1, label=f"rel_l2 ≤ {tol['rel_l2']:g}")
    hist_ax.set(xscale="log", xlabel="|candidate − reference|", ylabel="elements", title=f"{name}: error distribution")
    sample_ax.set(yscale="log", xlabel="sample", ylabel="relative L2 error", title=f"{name}: per sample")
    for ax in (hist_ax, sample_ax):
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    return _png(fig)


def per_layer(tensors: list[dict[str, Any]], threshold: float | None, metric: str = "rel_l2") -> str:
    """Error of each compared intermediate tensor in graph order; the first over the threshold marked."""
    fig, ax = _figure(height=3.0)
    values = [max(t.get(metric) or 0.0, 1e-12) for t in tensors]
    colours = [_FAIL if threshold is not None and v > threshold else _BLUE for v in values]
    ax.bar(range(len(values)), values, color=colours)
    if threshold is not None:
        ax.axhline(threshold, color=_FAIL, ls="--", lw=1, label=f"threshold {threshold:g}")
        ax.legend(fontsize=7)
    step = max(1, len(tensors) // 20)
    ax.set_xticks(
        range(0, len(tensors), step),
        [tensors[i]["name"][-24:] for i in range(0, len(tensors), step)],
        rotation=60,
        ha="right",
        fontsize=6,
    )
    ax.set(yscale="log", ylabel=metric.replace("_", " "), title="per-layer error (graph order)")
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)


def latency_histogram(gate: dict[str, Any]) -> str:
    """Every timed iteration, one colour per trial, with the median-of-trials p50 and p99."""
    fig, ax = _figure()
    trials = gate.get("trials_ms") or []
    everything = sorted(v for t in trials for v in t)
    if everything:
        lo, hi = everything[0], everything[min(len(everything) - 1, int(len(everything) * 0.999))]
        bins = [lo + (hi - lo) * i / 40 for i in range(41)] if hi > lo else 10
        for i, t in enumerate(trials):
            ax.hist(t, bins=bins, histtype="step", lw=1.2, label=f"trial {i + 1}")
    lat = gate["latency"]
    ax.axvline(lat["p50_ms"], color=_PASS, lw=1.2, label=f"p50 {lat['p50_ms']:.3f} ms")
    ax.axvline(lat["p99_ms"], color=_FAIL, lw=1.2, label=f"p99 {lat['p99_ms']:.3f} ms")
    ax.set(xlabel="latency (ms)", ylabel="iterations", title=f"latency at batch {gate['batch']}")
    ax.legend(fontsize=7, ncols=2)
    ax.grid(alpha=0.3)
    return _png(fig)


def latency_over_time(gate: dict[str, Any]) -> str:
    """Every timed iteration in the order it ran (trials side by side), so stalls and drift show; the
    deadline and the median-of-trials p99 drawn across, trial boundaries dotted."""
    fig, ax = _figure(height=3.0)
    start = 0
    for i, trial in enumerate(gate.get("trials_ms") or []):
        xs = range(start, start + len(trial))
        ax.plot(xs, trial, lw=0.6, color=(_BLUE, "#8250df")[i % 2], label="per iteration" if i == 0 else None)
        if i:
            ax.axvline(start, color=_GREY, ls=":", lw=0.8)
        start += len(trial)
    ax.axhline(gate["latency"]["p99_ms"], color="#bf8700", lw=1, label=f"p99 {gate['latency']['p99_ms']:.3f} ms")
    deadline = (gate.get("deadline") or {}).get("deadline_ms")
    if deadline:
        d = gate["deadline"]
        ax.axhline(
            deadline,
            color=_FAIL,
            ls="--",
            lw=1.2,
            label=f"deadline {deadline:g} ms ({d['misses']} of {d['frames']} late)",
        )
    ax.set(
        xlabel="iteration (trials in order)", ylabel="latency (ms)", title=f"latency over time at batch {gate['batch']}"
    )
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)
    return _png(fig)


def soak_over_time(soak: dict[str, Any]) -> str:
    """A soak second by second: the median and the slowest run of each second, the first and last windows shaded."""
    fig, ax = _figure(height=2.8)
    rows = [r for r in soak["per_second"] if r[1] > 0]
    xs = [r[0] for r in rows]
    ax.plot(xs, [r[2] for r in rows], lw=1, color=_BLUE, label="median of each second")
    ax.plot(xs, [r[3] for r in rows], lw=0.7, color=_FAIL, alpha=0.7, label="slowest run of each second")
    w = soak["drift"]["window_s"]
    if xs and w:
        ax.axvspan(0, w, color=_GREY, alpha=0.12)
        ax.axvspan(soak["seconds"] - w, soak["seconds"], color=_GREY, alpha=0.12, label="first / last window")
    ax.set(xlabel="seconds into the soak", ylabel="latency (ms)", title=f"soak: {soak['iterations']} runs")
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)
    return _png(fig)


def stack_latency(models: dict[str, dict[str, Any]]) -> str:
    """``deploykit stack``: every frame's latency over the run, one line per model, its deadline dashed."""
    fig, ax = _figure(height=3.0)
    colours = (_BLUE, "#8250df", "#bf8700", _PASS, _GREY)
    for i, (name, m) in enumerate(models.items()):
        series, colour = m.get("series") or {}, colours[i % len(colours)]
        ax.plot(series.get("start_s", []), series.get("latency_ms", []), lw=0.8, color=colour, label=name)
        if m.get("deadline"):
            ax.axhline(m["deadline"]["deadline_ms"], color=colour, ls="--", lw=1)
    ax.set(
        xlabel="seconds into the run (all models together)",
        ylabel="latency (ms)",
        title="per-frame latency (dashed: each model's deadline)",
    )
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)
    return _png(fig)


def percentile_bars(gate: dict[str, Any]) -> str:
    """p50/p90/p99 as the median over trials, whiskers spanning the fastest to slowest trial."""
    fig, ax = _figure(width=5.0)
    keys = ("p50_ms", "p90_ms", "p99_ms", "mean_ms")
    med = [gate["latency"][k] for k in keys]
    spread = gate.get("spread", {})
    err = (
        [
            [m - spread[k]["min"] for k, m in zip(keys, med, strict=True)],
            [spread[k]["max"] - m for k, m in zip(keys, med, strict=True)],
        ]
        if spread
        else None
    )
    ax.bar([k.removesuffix("_ms") for k in keys], med, yerr=err, capsize=4, color=_BLUE, alpha=0.8)
    target = (gate.get("target") or {}).get("latency_ms_p99")
    if target:
        ax.axhline(target, color=_FAIL, ls="--", lw=1, label=f"p99 target {target:g} ms")
        ax.legend(fontsize=7)
    ax.set(ylabel="ms", title="percentiles (median of trials, range of trials)")
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)


def batch_sweep(gate: dict[str, Any]) -> str:
    """Throughput (batch x FPS) against batch size."""
    fig, ax = _figure(width=5.0)
    rows = sorted([gate, *gate.get("sweep", [])], key=lambda r: r["batch"])
    xs = [r["batch"] for r in rows]
    ax.plot(xs, [r["fps"] for r in rows], "o-", color=_BLUE)
    for r in rows:
        lo, hi = min(r["fps_trials"]), max(r["fps_trials"])
        ax.vlines(r["batch"], lo, hi, color=_BLUE, alpha=0.5)
    ax.set(xlabel="batch", ylabel="samples / s", title="throughput by batch size", xticks=xs)
    ax.grid(alpha=0.3)
    return _png(fig)


def search_pareto(table: list[dict[str, Any]], unit: str) -> str:
    """The mixed-precision search: every evaluated state's worst ratio to a limit against its latency
    (relative to every layer at the top precision); the states it kept joined in order, the chosen one
    starred, the limit (ratio 1) dashed."""
    fig, ax = _figure(height=3.0)
    rows = [r for r in table if r.get("latency_vs_top") is not None]
    if not rows:
        return _png(fig)
    x = [r["latency_vs_top"] for r in rows]
    y = [max(r["worst_ratio"], 1e-3) for r in rows]
    colours = [_PASS if r["passed"] else _FAIL for r in rows]
    ax.scatter(x, y, c=colours, s=14, alpha=0.7, label="evaluated (green: within every limit)")
    kept = [r for r in rows if r["kept"]]
    ax.plot(
        [r["latency_vs_top"] for r in kept],
        [max(r["worst_ratio"], 1e-3) for r in kept],
        "-",
        color=_BLUE,
        lw=1,
        label="kept, in order",
    )
    for r in (r for r in rows if r.get("chosen")):
        ax.scatter(
            [r["latency_vs_top"]],
            [max(r["worst_ratio"], 1e-3)],
            marker="*",
            s=120,
            color=_BLUE,
            zorder=3,
            label=f"chosen (step {r['step']})",
        )
        break
    ax.axhline(1.0, color=_FAIL, ls="--", lw=1, label="limit")
    ax.set(
        yscale="log",
        xlabel=f"latency / all layers at the top precision ({unit})",
        ylabel="worst value / its limit",
        title="mixed-precision search: accuracy vs latency",
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


_BOUND_COLOURS = {"compute": _BLUE, "memory": "#bf8700"}


def profile_layers(profile: dict[str, Any]) -> str:
    """The slowest layers as horizontal bars (ms), coloured compute- or memory-bound, with their share."""
    rows = profile["layers"][: profile.get("top_n", 10)][::-1]
    fig, ax = _figure(height=max(2.2, 0.28 * len(rows) + 0.9))
    names = [r["name"] if len(r["name"]) <= 40 else r["name"][:37] + "..." for r in rows]
    colours = [_BOUND_COLOURS.get(r.get("bound", ""), _GREY) for r in rows]
    bars = ax.barh(range(len(rows)), [r["ms"] for r in rows], color=colours)
    for bar, r in zip(bars, rows, strict=True):
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {r['share']:.1%} {r.get('precision', '')}",
            va="center",
            fontsize=7,
        )
    ax.set_yticks(range(len(rows)), names, fontsize=7)
    ax.set(xlabel="ms per run (median)", title=f"slowest {len(rows)} layers ({profile.get('backend', '')})")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=c, label=f"{b}-bound") for b, c in _BOUND_COLOURS.items()], fontsize=7, loc="lower right"
    )
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


def roofline(profile: dict[str, Any]) -> str:
    """Achieved FLOP/s against arithmetic intensity, one point per layer (area ~ time), under the measured roofs."""
    peaks = profile["peaks"]
    layers = [r for r in profile["layers"] if r["flops"] > 0 and r["ms"] > 0]
    fig, ax = _figure(width=6.0, height=3.6)
    intensities = [r["intensity"] for r in layers] or [1.0]
    x = [min(intensities + [0.01]) / 2, max(intensities + [1e3]) * 2]
    bandwidths = sorted((float(v), int(k)) for k, v in peaks["bandwidth"].items())
    dram = peaks["copy_bytes_per_s"]
    for i, (precision, flops) in enumerate(sorted(peaks["gemm_flops"].items(), key=lambda kv: kv[1])):
        ridge = flops / dram
        ax.plot(
            [x[0], ridge, x[1]],
            [x[0] * dram, flops, flops],
            color=(_FAIL, _PASS, _BLUE, _GREY)[i % 4],
            lw=1.2,
            label=f"{precision} peak {flops / 1e9:.0f} GFLOP/s",
        )
    top = max(peaks["gemm_flops"].values(), default=0.0)
    for bandwidth, size in bandwidths:  # cache-sized working sets: faster memory roofs, up to the top compute roof
        if bandwidth != dram and top:
            ridge = top / bandwidth
            ax.plot(
                [x[0], ridge],
                [x[0] * bandwidth, top],
                color=_GREY,
                ls=":",
                lw=0.8,
                label=f"copy at {size >> 20 or size >> 10} {'MiB' if size >> 20 else 'KiB'}: "
                f"{bandwidth / 1e9:.0f} GB/s",
            )
    total = sum(r["ms"] for r in layers) or 1.0
    ax.scatter(
        intensities if layers else [],
        [r["achieved_flops"] for r in layers],
        s=[max(8.0, 400 * r["ms"] / total) for r in layers],
        c=[_BOUND_COLOURS.get(r.get("bound", ""), _GREY) for r in layers],
        alpha=0.6,
        edgecolors="none",
    )
    for r in sorted(layers, key=lambda r: r["ms"], reverse=True)[:5]:
        ax.annotate(r["name"][:24], (r["intensity"], r["achieved_flops"]), fontsize=6, alpha=0.8)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (FLOP / byte)",
        ylabel="achieved FLOP/s",
        title=f"roofline: {peaks['device']}",
    )
    ax.legend(fontsize=6, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    return _png(fig)
