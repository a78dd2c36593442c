"""Where `deploykit convert` FP32 of the example detector spends its CPU time: one fresh-workdir run in
this process, with the pipeline's pieces wrapped to add up their CPU time (``time.process_time``:
every thread of the process, so ONNX Runtime's pools count). Used by bench_pipeline.py, which compares
the pieces with bench/plain_tools.py's phases; prints one JSON object.

Pieces are grouped by what they buy: ``same work`` (what the plain script does too: imports, building
the model, the export, the session, the timing loop), ``verification`` (the checks the plain script
does not make: ONNX Runtime against torch at export, each surgery pass's check, parity on the
validation images against the FP32 graph and torch), and ``bookkeeping`` (hashing, manifests, atomic
publishing, the run record and its reports).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

START = time.process_time()
import deploykit.cli.app  # noqa: E402,F401  - what the console script imports before it runs anything

IMPORTED = time.process_time()
ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "detector" / "deploykit.yaml"
SPENT: dict[str, float] = {}
_DEPTH = [0]


def wrap(owner: Any, name: str, piece: str) -> None:
    """Add the CPU time of ``owner.name`` (outermost calls only) to ``piece``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if _DEPTH[0]:
            return original(*args, **kwargs)
        _DEPTH[0] += 1
        start = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[piece] = SPENT.get(piece, 0.0) + time.process_time() - start
            _DEPTH[0] -= 1

    setattr(owner, name, timed)


def instrument() -> None:
    from deploykit.pipeline import runner as pipeline
    from deploykit.record import collect
    from deploykit.record import model as record
    from deploykit.source import factory as torchsource
    from deploykit.stages import build, export, gate, parity, surgery
    from deploykit.store import artifacts

    wrap(torchsource, "build_model", "build the torch model")  # parity imports it when it runs
    wrap(export, "build_model", "build the torch model")  # export imported it by name
    wrap(export, "export_model", "torch.onnx.export")
    wrap(export, "check_against_torch", "verify: export vs torch")
    wrap(surgery.SurgeryStage, "run", "verify: surgery passes and their checks")
    wrap(build.BuildStage, "run", "build: ONNX Runtime offline optimization")
    wrap(parity.ParityStage, "run", "verify: parity (validation images vs FP32 graph and torch)")
    wrap(gate.GateStage, "run", "gate: timing loop and report")
    wrap(artifacts.Store, "publish", "bookkeeping: hash, manifest, publish")
    wrap(artifacts.Store, "lookup", "bookkeeping: recipe lookup")
    for stage in (export.ExportStage, surgery.SurgeryStage, build.BuildStage, parity.ParityStage, gate.GateStage):
        wrap(stage, "key_config", "bookkeeping: recipe keys (hashing inputs)")
    wrap(collect, "build_record", "bookkeeping: run record")
    wrap(record, "write", "bookkeeping: run record")
    wrap(pipeline, "tool_versions", "bookkeeping: tool versions and device")
    wrap(pipeline, "device_fingerprint", "bookkeeping: tool versions and device")


def main() -> None:
    from deploykit import api

    instrument()
    with tempfile.TemporaryDirectory(prefix="deploykit-breakdown-") as tmp, contextlib.redirect_stderr(sys.stdout):
        before = time.process_time()
        result = api.convert(CONFIG, workdir=Path(tmp) / "store", progress=False)
        total = time.process_time() - before
    stages = {r.stage: r.status for r in result.stages}
    pieces = dict(SPENT)
    pieces["other pipeline work"] = total - sum(pieces.values())  # imports inside stages, saving, sessions
    print(
        json.dumps(
            {
                "import_s": IMPORTED - START,
                "convert_s": total,
                "pieces": pieces,
                "stages": stages,
                "passed": result.passed,
            }
        )
    )


if __name__ == "__main__":
    main()
