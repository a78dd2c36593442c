"""Report JSON: strict (no NaN/Infinity tokens, which most JSON readers reject), sorted, indented."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def clean(value: Any) -> Any:
    """A copy with non-finite floats as None and numpy scalars/arrays as plain Python values."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array
        return clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(clean(report), indent=2, sort_keys=True, allow_nan=False) + "\n"


def write(path: Path, report: dict[str, Any]) -> Path:
    path.write_text(dumps(report))
    return path
