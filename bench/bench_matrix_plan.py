"""Planning a large build matrix: how long ``load_matrix`` and ``make_plan`` take for up to the
largest matrix deploykit accepts (``MAX_CELLS`` cells), before any cell runs.

Shapes: few models x many targets (the usual large matrix: one model family on many machines) and
many models x few targets; each at 1,000 and 10,000 cells, fp32 and fp16 (fp16 changes the shared
chain); and 3,000 models x 1 precision x 1 target, where no cell shares a config with another.
Cells whose configs are the same are planned once; the rest is per-cell bookkeeping.

Prints a table and writes bench/results/matrix_plan.json. The machine is shared: the load average
is printed beside the times.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHAPES = [  # (label, models, precisions, targets)
    ("4 models x 2 precisions x 125 targets", 4, ("fp32", "fp16"), 125),
    ("4 models x 2 precisions x 1,250 targets", 4, ("fp32", "fp16"), 1250),
    ("50 models x 2 precisions x 10 targets", 50, ("fp32", "fp16"), 10),
    ("100 models x 2 precisions x 50 targets", 100, ("fp32", "fp16"), 50),
    # every cell its own model: nothing is shared, each config is read and keyed once (issue 29 item 4)
    ("3,000 models x 1 precision x 1 target", 3000, ("fp32",), 1),
]


def _matrix(folder: Path, models: int, precisions: tuple[str, ...], targets: int) -> Path:
    from tests.hostile.conftest import write_project

    for i in range(models):
        cfg = write_project(folder / f"m{i}")
        cfg.write_text(cfg.read_text().replace("name: conv", f"name: m{i}"))
    lines = [
        "models:",
        *[f"  - m{i}/deploykit.yaml" for i in range(models)],
        f"precisions: [{', '.join(precisions)}]",
        "targets:",
        *[f"  - {{name: t{j}, overrides: {{gate.trials: {1 + j % 2}}}}}" for j in range(targets)],
    ]
    path = folder / "matrix.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    from deploykit.matrix.plan import make_plan
    from deploykit.matrix.spec import load_matrix, resolve_models
    from deploykit.store.artifacts import Store

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm = _matrix(Path(tmp) / "warm-up", 1, ("fp32",), 1)  # imports, once; its own files: nothing cached
        with Store(Path(tmp) / "warm-up" / "store") as store:
            spec = load_matrix(warm)
            make_plan(spec, resolve_models(spec, warm), store)
        for label, models, precisions, targets in SHAPES:
            folder = Path(tmp) / f"{models}x{len(precisions)}x{targets}"
            path = _matrix(folder, models, precisions, targets)
            with Store(folder / "store") as store:  # timed as `deploykit matrix` plans: every file read cold
                t0 = time.perf_counter()
                spec = load_matrix(path)
                found = resolve_models(spec, path)
                t1 = time.perf_counter()
                plan = make_plan(spec, found, store)
                t2 = time.perf_counter()
            rows.append(
                {
                    "shape": label,
                    "cells": len(plan.cells),
                    "jobs": len(plan.jobs),
                    "load_s": round(t1 - t0, 3),
                    "plan_s": round(t2 - t1, 3),
                    "plan_us_per_cell": round((t2 - t1) / len(plan.cells) * 1e6, 1),
                    "loadavg1": round(os.getloadavg()[0], 2),
                }
            )
            print(
                f"{label:42} {rows[-1]['cells']:>6} cells  load {rows[-1]['load_s']:6.3f} s  plan "
                f"{rows[-1]['plan_s']:6.3f} s ({rows[-1]['plan_us_per_cell']:7.1f} us/cell)  load avg "
                f"{rows[-1]['loadavg1']}"
            )
    out = ROOT / "bench" / "results" / "matrix_plan.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "rows": rows},
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
