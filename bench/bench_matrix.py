"""Build-matrix benchmark: 4 models x 2 precisions (fp32, int8) on the CPU backend.

What a user would otherwise do is a loop of ``convert`` calls; this compares, interleaved over
rounds, each from an empty store:

* ``convert loop``: ``deploykit.convert`` per cell, sequentially, in this process (imports warm:
  the strongest form of the baseline);
* ``local pool``: ``deploykit.matrix`` with the default process pool (2 workers here);
* ``ray local``: ``deploykit.matrix`` on a one-machine Ray cluster with 2 CPUs (started once,
  before the rounds, as a user's running cluster would be; its start-up time is reported apart);
* ``rerun``: the local-pool matrix again on its full store (everything reused).

Per cell on Ray: the driver's submit-to-result time minus the worker's own time (scheduling, object
store, result import) and the transfer times and bytes. Work: stage runs in the matrix (shared jobs
once) against cells x stages.

Prints a table and writes bench/results/matrix.json. The machine is shared: compare the ratios.
"""

from __future__ import annotations

import json
import platform
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ROUNDS = 2
MODELS = {"cnn_a": (16, 32, 32), "cnn_b": (24, 48), "cnn_c": (16, 16, 32, 32), "cnn_d": (32, 32)}
CONFIG = """
name: {name}
source: {{onnx: model.onnx}}
inputs: [{{name: x, shape: [1, 3, 64, 64]}}]
calibration: {{files: calib, samples: 24}}
validation: {{files: calib, samples: 4}}
quantize: {{method: max, check_samples: 8}}
gate: {{warmup: 5, warmup_s: 0.05, iterations: 50, trials: 3, targets: {{default: {{fps: 1}}}}}}
"""


def write_models(root: Path) -> Path:
    import yaml

    from tests.quant import models

    configs = []
    for i, (name, channels) in enumerate(MODELS.items()):
        folder = root / name
        (folder / "calib").mkdir(parents=True)
        models.save(models.cnn(channels, size=64, seed=i), folder / "model.onnx")
        for j, sample in enumerate(models.images(24, size=64, seed=100 + i)):
            np.save(folder / "calib" / f"s{j:02d}.npy", sample["x"])
        (folder / "deploykit.yaml").write_text(textwrap.dedent(CONFIG.format(name=name)))
        configs.append(f"{name}/deploykit.yaml")
    matrix = root / "matrix.yaml"
    matrix.write_text(
        yaml.safe_dump(
            {"models": configs, "precisions": ["fp32", "int8"], "targets": [{"name": "cpu", "backend": "onnxruntime"}]}
        )
    )
    return matrix


def convert_loop(matrix: Path, store: Path) -> float:
    import deploykit

    start = time.perf_counter()
    for name in MODELS:
        for precision in ("fp32", "int8"):
            deploykit.convert(matrix.parent / name / "deploykit.yaml", workdir=store, quantize__precision=precision)
    return time.perf_counter() - start


def timed_matrix(matrix: Path, store: Path, **kwargs: object) -> tuple[float, object]:
    import deploykit

    start = time.perf_counter()
    result = deploykit.matrix(matrix, workdir=store, **kwargs)
    elapsed = time.perf_counter() - start
    if not result.passed:
        raise SystemExit(f"matrix failed:\n{result!r}")
    return elapsed, result


def ray_overheads(result: object) -> dict[str, float]:
    """Per cell: submit to start (min: scheduling with a CPU free; median: mostly waiting for one), the
    worker's own time, and what follows it (returning the result, importing it into the driver)."""
    cells = result.cells  # type: ignore[attr-defined]
    med = statistics.median
    return {
        "schedule_s": min(c.queued for c in cells),
        "queued_s": med(c.queued for c in cells),
        "after_s": med(c.wall - c.queued - c.seconds for c in cells),
        "transfer_in_s": med(c.transfer.get("in_s", 0.0) for c in cells),
        "transfer_out_s": med(c.transfer.get("out_s", 0.0) for c in cells),
        "import_s": med(c.transfer.get("import_s", 0.0) for c in cells),
        "in_bytes": med(c.transfer.get("in_bytes", 0.0) for c in cells),
        "out_bytes": med(c.transfer.get("out_bytes", 0.0) for c in cells),
        "worker_s": med(c.seconds for c in cells),
    }


def main() -> None:
    import warnings

    import ray

    import deploykit  # noqa: F401  (warm imports for the in-process baseline)
    from deploykit.matrix.worker import NODE_DIR_ENV
    from deploykit.stages import default_stages

    warnings.simplefilter("ignore")
    default_stages()
    tmp = Path(tempfile.mkdtemp(prefix="deploykit-bench-matrix-"))
    matrix = write_models(tmp / "models")
    node_dir = tmp / "ray-node"  # the workers' own store: emptied before each round, like a fresh node
    t0 = time.perf_counter()
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": {NODE_DIR_ENV: str(node_dir)}},
    )
    ray_start = time.perf_counter() - t0
    times: dict[str, list[float]] = {"convert loop": [], "local pool": [], "ray local": [], "rerun": []}
    overheads, work = [], {}
    for i in range(ROUNDS):
        print(f"round {i + 1}/{ROUNDS} …", file=sys.stderr, flush=True)
        times["convert loop"].append(convert_loop(matrix, tmp / f"loop{i}"))
        t, pool = timed_matrix(matrix, tmp / f"pool{i}", jobs=2)
        times["local pool"].append(t)
        work = pool.work()  # type: ignore[attr-defined]
        shutil.rmtree(node_dir, ignore_errors=True)
        t, on_ray = timed_matrix(matrix, tmp / f"ray{i}", ray="local")
        times["ray local"].append(t)
        overheads.append(ray_overheads(on_ray))
        t, again = timed_matrix(matrix, tmp / f"pool{i}", jobs=2)
        times["rerun"].append(t)
        assert again.work()["ran"] == 0  # type: ignore[attr-defined]
        assert on_ray.work()["cell_ran"] == 24  # type: ignore[attr-defined]  (no node cache served a stage)
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    over = {k: statistics.median(o[k] for o in overheads) for k in overheads[0]}
    results = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": 2, "loaded": True},
        "cells": 8,
        "rounds": ROUNDS,
        "seconds": times,
        "median_s": med,
        "vs_convert_loop": {k: med["convert loop"] / v for k, v in med.items()},
        "ray_start_s": ray_start,
        "ray_per_cell": over,
        "work": work,
    }
    print_table(results)
    out = ROOT / "bench" / "results" / "matrix.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")


def print_table(r: dict) -> None:
    print(
        f"\n4 models x 2 precisions on the CPU backend, median of {r['rounds']} interleaved rounds "
        "(shared, loaded machine)"
    )
    print(f"{'mode':<14} {'wall s':>8} {'speed-up vs loop':>17}  rounds")
    for mode, t in r["median_s"].items():
        rounds = ", ".join(f"{x:.1f}" for x in r["seconds"][mode])
        print(f"{mode:<14} {t:>8.1f} {r['vs_convert_loop'][mode]:>16.2f}x  {rounds}")
    o, w = r["ray_per_cell"], r["work"]
    print(
        f"\nRay (2 CPUs): cluster start {r['ray_start_s']:.1f} s (once). Per cell: scheduling {o['schedule_s']:.2f} s "
        f"(submit to start with a CPU free; median {o['queued_s']:.2f} s, mostly waiting for a CPU), worker "
        f"{o['worker_s']:.2f} s, result back and imported {o['after_s']:.2f} s; inputs {o['in_bytes'] / 1024:.0f} KiB "
        f"unpacked in {o['transfer_in_s'] * 1000:.1f} ms, outputs {o['out_bytes'] / 1024:.0f} KiB packed in "
        f"{o['transfer_out_s'] * 1000:.1f} ms, verified into the driver's store in {o['import_s'] * 1000:.0f} ms "
        "(medians)"
    )
    print(
        f"work: {w['cell_stages']} cell x stage results; {w['ran']} stage runs ({w['shared_ran']} in shared jobs, "
        f"{w['cell_ran']} in cells), {w['reused']} reused instead of run"
    )


if __name__ == "__main__":
    main()
