"""A previous gate report as a baseline: refused unless it measured the same model, on the same
platform and machine, at the same batch; compared metric by metric with the noise-aware rule of
:func:`deploykit.metrics.latency.regression`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploykit.errors import UsageError
from deploykit.metrics.latency import regression
from deploykit.store.hashing import digest_file

SCHEMA = "deploykit.gate/3"  # 2 judged fps on batch / median latency: not comparable
_HINT = "pass a gate.json written by `deploykit gate` for this model on this machine"


def load(path: Path, *, model: str, platform: str, device: dict[str, Any], batch: int) -> dict[str, Any]:
    """Read and vet a baseline; raise UsageError saying why one cannot be compared."""
    from deploykit.safety.smallfile import read_small

    try:
        report = json.loads(read_small(path, 64 << 20, UsageError, f"baseline {path.name}"))
    except FileNotFoundError:
        raise UsageError(f"baseline {path}: no such file", hint=_HINT) from None
    except (OSError, ValueError, RecursionError) as e:
        raise UsageError(f"baseline {path}: not a readable JSON report ({str(e)[:200]})", hint=_HINT) from e
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        found = report.get("schema", "no schema") if isinstance(report, dict) else type(report).__name__
        raise UsageError(
            f"baseline {path}: not a {SCHEMA} report ({found}); older reports measured fps as "
            "batch / median latency (or had no trials to compare spreads with)",
            hint=_HINT,
        )
    for why in _mismatches(report, model, platform, device, batch):
        raise UsageError(f"baseline {path} cannot be compared: {why}", hint=_HINT)
    return {"path": str(path), "digest": digest_file(path), "report": report}


def _mismatches(report: dict[str, Any], model: str, platform: str, device: dict[str, Any], batch: int) -> list[str]:
    out = []
    if report.get("model") != model:
        out.append(f"it measured model {report.get('model')!r}, this run is {model!r}")
    if report.get("platform") != platform:
        out.append(f"it measured platform {report.get('platform')!r}, this machine is {platform!r}")
    theirs = report.get("device", {})
    if theirs.get("model") != device.get("model") or theirs.get("type") != device.get("type"):
        out.append(
            f"it was measured on {theirs.get('type')} {theirs.get('model')!r}, this machine is "
            f"{device.get('type')} {device.get('model')!r}"
        )
    if report.get("batch") != batch:
        out.append(f"it measured batch {report.get('batch')}, this run measures batch {batch}")
    return out


def compare(report: dict[str, Any], base: dict[str, Any], threshold: float) -> dict[str, Any]:
    """Regression checks of ``report`` against the loaded baseline (fps, p99, throughput per batch)."""
    old = base["report"]
    checks = [
        regression("fps", "FPS", report["fps_trials"], old["fps_trials"], threshold, higher_is_better=True),
        regression(
            "p99 latency",
            "ms",
            [t["p99_ms"] for t in report["trials"]],
            [t["p99_ms"] for t in old["trials"]],
            threshold,
            higher_is_better=False,
        ),
    ]
    old_sweep = {s["batch"]: s for s in old.get("sweep", [])}
    for s in report.get("sweep", []):
        if s["batch"] in old_sweep:
            checks.append(
                regression(
                    f"throughput at batch {s['batch']}",
                    "samples/s",
                    s["fps_trials"],
                    old_sweep[s["batch"]]["fps_trials"],
                    threshold,
                    higher_is_better=True,
                )
            )
    return {
        "path": base["path"],
        "digest": base["digest"],
        "threshold": threshold,
        "checks": checks,
        "passed": all(c["passed"] for c in checks),
    }
