"""Graph cleanup benchmark: deploykit's sanitize + remove_noops + fold_batchnorm against onnxslim,
onnxsim and `polygraphy surgeon sanitize --fold-constants` on the same inputs.

Models: the example detector exported by torch (dynamo at opset 18, and TorchScript at opset 13 and
at opset 11 without constant folding, as older exports look), and models built in code the way old
exporters wrote them (tests/surgery/models.py: weights in Constant nodes or listed as inputs,
unfused BatchNormalization, traced shape arithmetic): 58 nodes, and 628 with 60 extra blocks.

For each tool: node count, whether ONNX Runtime outputs still match the input model (random inputs,
batch 2 where the batch is dynamic; max abs diff <= 1e-4 + 1e-4 * |ref|), and wall time (median of
ROUNDS, tools interleaved per round; Polygraphy runs as its CLI, so its time includes process start).
Ours runs through the checked runner: its time includes checker, shape inference and the ONNX Runtime
comparison after every pass.

Prints a table and writes bench/results/surgery.json. Times come from one shared machine; compare
within a row.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "detector"))
ROUNDS = 3
PASSES = ["sanitize", "remove_noops", "fold_batchnorm"]


def exported_detector(tmp: Path, dynamo: bool, opset: int, fold: bool = True) -> onnx.ModelProto:
    import torch
    from model import build

    path = tmp / f"detector_{'dynamo' if dynamo else 'ts'}_{opset}.onnx"
    x = torch.randn(1, 3, 128, 128)
    kwargs: dict[str, Any] = (
        {"dynamo": True, "external_data": False, "dynamic_shapes": ({0: torch.export.Dim("batch", min=1, max=4)},)}
        if dynamo
        else {"dynamo": False, "dynamic_axes": {"images": {0: "batch"}}, "do_constant_folding": fold}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            build(), (x,), path, input_names=["images"], output_names=["boxes", "scores"], opset_version=opset, **kwargs
        )
    return onnx.load(path)


def models(tmp: Path) -> dict[str, onnx.ModelProto]:
    from tests.surgery.models import legacy_detector

    return {
        "detector (dynamo, opset 18)": exported_detector(tmp, True, 18),
        "detector (TorchScript, opset 13)": exported_detector(tmp, False, 13),
        "detector (TorchScript, opset 11, no folding)": exported_detector(tmp, False, 11, fold=False),
        "legacy opset 11, Constant weights": legacy_detector(size=64, width=16, opset=11),
        "legacy opset 12, weights as inputs": legacy_detector(size=64, width=16, opset=12, weights_as="input"),
        "legacy opset 11, Constant weights, 628 nodes": legacy_detector(size=64, width=16, opset=11, extra_blocks=60),
    }


def feeds_for(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    from tests.surgery.models import feeds_for as make_feeds

    return make_feeds(model, seed=1, batch=2)


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from deploykit.surgery import ortcheck

    return ortcheck.run(model, feeds)


def ours(model: onnx.ModelProto, tmp: Path) -> onnx.ModelProto:
    from deploykit.surgery.registry import instantiate
    from deploykit.surgery.runner import run_passes

    out, _ = run_passes(model, [instantiate(p) for p in PASSES], feeds_for(model), atol=1e-4, rtol=1e-3, where="bench")
    return out


def onnxslim_tool(model: onnx.ModelProto, tmp: Path) -> onnx.ModelProto:
    import onnxslim

    return onnxslim.slim(onnx.ModelProto.FromString(model.SerializeToString()))


def onnxsim_tool(model: onnx.ModelProto, tmp: Path) -> onnx.ModelProto:
    import onnxsim

    out, ok = onnxsim.simplify(onnx.ModelProto.FromString(model.SerializeToString()))
    if not ok:
        raise RuntimeError("onnxsim's own check failed")
    return out


def polygraphy_tool(model: onnx.ModelProto, tmp: Path) -> onnx.ModelProto:
    src, dst = tmp / "poly_in.onnx", tmp / "poly_out.onnx"
    onnx.save(model, src)
    exe = shutil.which("polygraphy", path=str(Path(sys.executable).parent)) or "polygraphy"
    proc = subprocess.run(
        [exe, "surgeon", "sanitize", str(src), "--fold-constants", "-o", str(dst)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "polygraphy failed")
    return onnx.load(dst)


def available_tools() -> tuple[dict[str, Any], dict[str, str]]:
    tools: dict[str, Any] = {"deploykit": ours}
    missing = {}
    for name, module, fn in (("onnxslim", "onnxslim", onnxslim_tool), ("onnxsim", "onnxsim", onnxsim_tool)):
        try:
            __import__(module)
            tools[name] = fn
        except ImportError as e:
            missing[name] = f"not installed ({e})"
    if shutil.which("polygraphy", path=str(Path(sys.executable).parent)) or shutil.which("polygraphy"):
        tools["polygraphy"] = polygraphy_tool
    else:
        missing["polygraphy"] = "polygraphy CLI not found"
    return tools, missing


def matches(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> tuple[bool, float]:
    worst, ok = 0.0, set(ref) == set(got)
    for name, r in ref.items():
        g = got.get(name)
        if g is None or g.shape != r.shape:
            return False, float("inf")
        diff = np.abs(g.astype(np.float64) - r.astype(np.float64))
        worst = max(worst, float(diff.max(initial=0.0)))
        ok = ok and bool(np.all(diff <= 1e-4 + 1e-4 * np.abs(r)))
    return ok, worst


def measure(tools: dict[str, Any], model: onnx.ModelProto, tmp: Path) -> dict[str, dict[str, Any]]:
    feeds = feeds_for(model)
    ref = run_ort(model, feeds)
    times: dict[str, list[float]] = {name: [] for name in tools}
    outs: dict[str, Any] = {}
    for _ in range(ROUNDS):
        for name, fn in tools.items():  # interleaved: drift on a shared machine hits every tool alike
            if isinstance(outs.get(name), Exception):
                continue
            start = time.perf_counter()
            try:
                outs[name] = fn(model, tmp)
            except Exception as e:
                outs[name] = e
                continue
            times[name].append(time.perf_counter() - start)
    row = {}
    for name, out in outs.items():
        if isinstance(out, Exception):
            row[name] = {"error": f"{type(out).__name__}: {str(out).strip()[:200]}"}
            continue
        try:
            ok, worst = matches(ref, run_ort(out, feeds))
        except Exception as e:
            ok, worst = False, float("nan")
            row[name] = {"error": f"output does not run: {type(e).__name__}: {str(e)[:160]}"}
        row[name] = {
            **row.get(name, {}),
            "nodes": len(out.graph.node),
            "outputs_match": ok,
            "max_abs_diff": worst,
            "seconds": statistics.median(times[name]),
            "seconds_all": times[name],
        }
    return row


def main() -> None:
    tools, missing = available_tools()
    tmp = Path(tempfile.mkdtemp(prefix="deploykit-bench-surgery-"))
    try:
        results = {}
        for label, model in models(tmp).items():
            print(f"{label} …", file=sys.stderr, flush=True)
            results[label] = {"nodes_in": len(model.graph.node), "tools": measure(tools, model, tmp)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = ROOT / "bench" / "results" / "surgery.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"rounds": ROUNDS, "passes": PASSES, "skipped_tools": missing, "models": results}, indent=2)
    )
    print_table(results, list(tools), missing)
    print(f"wrote {out}")


def print_table(results: dict[str, Any], tools: list[str], missing: dict[str, str]) -> None:
    head = f"{'model':<46} {'in':>5} " + " ".join(f"{t:>20}" for t in tools)
    print(head)
    print(f"{'':<46} {'':>5} " + " ".join(f"{'nodes / s / match':>20}" for _ in tools))
    for label, r in results.items():
        cells = []
        for t in tools:
            c = r["tools"].get(t, {})
            if "nodes" not in c:
                cells.append(f"{'error':>20}")
                continue
            cells.append(f"{c['nodes']:>5} {c['seconds']:>8.2f}s {'ok' if c['outputs_match'] else 'DIFF':>5}")
        print(f"{label:<46} {r['nodes_in']:>5} " + " ".join(f"{cell:>20}" for cell in cells))
    for label, r in results.items():
        for t, c in r["tools"].items():
            if "error" in c:
                print(f"  {label} / {t}: {c['error']}")
    for t, why in missing.items():
        print(f"  {t} skipped: {why}")


if __name__ == "__main__":
    main()
