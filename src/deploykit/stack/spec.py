"""stack.yaml: several models on one device, each at its rate, read and validated before anything runs.

Every problem the file itself shows is one ConfigError naming the entry (exit 2): an unknown key (with
a did-you-mean), a model file that does not exist or is not a config, an ONNX file or an engine folder,
a rate of 0 or NaN, a consumer that also has a rate, a chain with a cycle or an unknown producer, a
duration past ``limits.max_duration_s``, a ``limits.max_duration_s`` past the hard maximum (24 h). A
deadline below a model's measured best case can only be known once the model is loaded:
:mod:`deploykit.stack.runner` checks it before the timed phases.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from deploykit.choices import Precision
from deploykit.config import SoakLimits
from deploykit.config.typed import from_value
from deploykit.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
Device = Literal["cpu", "cuda"]  # cpu: ONNX Runtime sessions on threads; cuda: a CUDA stream per TensorRT engine
Priority = Literal["high", "normal", "low"]  # the CUDA stream's priority (device: cuda)


@dataclass(frozen=True)
class StackModel:
    """One model of the stack (``models.<name>``)."""

    model: str  # a deploykit.yaml, an .onnx file, or an engine folder (`deploykit build -o DIR`)
    rate_hz: float | None = None  # frames per second it is fed; a consumer runs once per producer frame instead
    consumes: str | None = None  # the model whose every finished frame it runs on (a detector feeding a planner)
    deadline_ms: float | None = None  # per-frame budget: completion - the frame's arrival (its release)
    max_miss_rate: float = 0.0  # share of frames allowed late (a dropped frame is late)
    e2e_deadline_ms: float | None = None  # a consumer: budget from the chain head's frame arrival to this end
    threads: int = 1  # cpu: ONNX Runtime intra-op threads of this model's session (its thread budget)
    priority: Priority = "normal"  # cuda: the stream priority
    precision: Precision | None = None  # a config: which build (sets quantize.precision); None: the config's


# The most a stack file may raise limits.max_duration_s to: the file bounds its own run, and this bounds the
# file (a typo of 360000 would otherwise hold a CI machine for days).
HARD_MAX_DURATION_S = 24 * 3600.0


@dataclass(frozen=True)
class StackLimits:
    max_duration_s: float = 3600.0  # the together phase, plus each model alone, may not run longer (<= 24 h)


@dataclass(frozen=True)
class StackSpec:
    models: dict[str, StackModel]
    name: str = "stack"
    duration_s: float = 10.0  # all models together
    alone_s: float = 3.0  # each model alone first, at its rate (the slow-down baseline); 0: skip
    warmup: int = 5  # untimed runs per model before anything is measured (the best case comes from these)
    device: Device = "cpu"
    soak: SoakLimits = SoakLimits()  # drift, memory growth and NaN/Inf of the together phase (the gate's gate.soak)
    limits: StackLimits = StackLimits()
    base_dir: Path = field(default=Path("."), compare=False, metadata={"internal": True})

    def producers(self) -> list[str]:
        """The models fed at their own rate, in file order."""
        return [n for n, m in self.models.items() if m.consumes is None]

    def chain(self, name: str) -> list[str]:
        """The models from the chain's head to ``name``."""
        out = [name]
        while self.models[out[-1]].consumes is not None:
            out.append(self.models[out[-1]].consumes)  # type: ignore[arg-type]
        return out[::-1]

    def path(self, name: str) -> Path:
        p = Path(self.models[name].model)
        return p if p.is_absolute() else self.base_dir / p


def load_stack(path: str | Path) -> StackSpec:
    """Read and validate ``stack.yaml``; raise ConfigError naming the file and the entry."""
    from deploykit.config.load import load_yaml, read_text

    path = Path(path)
    raw = load_yaml(read_text(path), str(path))
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with 'models' at the top level")
    return stack_from_dict(raw, path.parent.resolve(), str(path))


def stack_from_dict(raw: dict, base_dir: Path, where: str = "stack") -> StackSpec:
    """Validate a parsed stack file (``base_dir``: where its relative model paths start)."""
    try:
        spec = from_value(StackSpec, raw, "stack")
    except ConfigError as e:
        raise ConfigError(
            f"{where}: {e.message}", hint="the README's 'Several models on one device' section lists every key"
        ) from e
    spec = dataclasses.replace(spec, base_dir=base_dir)
    for problem in _problems(spec):
        raise ConfigError(f"{where}: {problem}")
    return spec


def _positive(value: float | None) -> bool:
    return value is not None and value > 0 and math.isfinite(value)


def _problems(spec: StackSpec) -> list[str]:
    out = []
    if not spec.models:
        out.append("models: lists no model")
    if not _NAME.match(spec.name):
        out.append(f"name: {spec.name!r} must be letters, digits, '_', '.' or '-' (it names the report files)")
    for key in ("duration_s", "alone_s"):
        value = getattr(spec, key)
        if not (value >= 0 and math.isfinite(value)) or (key == "duration_s" and value <= 0):
            out.append(
                f"{key}: {value:g} is not a {'positive' if key == 'duration_s' else 'non-negative'} number of seconds"
            )
    cap, total = spec.limits.max_duration_s, spec.duration_s + spec.alone_s * len(spec.models)
    if not 0 < cap <= HARD_MAX_DURATION_S:
        out.append(
            f"limits.max_duration_s: {cap:g} s is not a positive number of seconds up to the hard maximum of "
            f"{HARD_MAX_DURATION_S:g} s (24 h), which a stack file cannot raise"
        )
    elif math.isfinite(total) and total > cap:
        out.append(
            f"duration_s: {spec.duration_s:g} s together + {spec.alone_s:g} s alone per model = {total:g} s, "
            f"past limits.max_duration_s ({spec.limits.max_duration_s:g} s)"
        )
    for name, m in spec.models.items():
        out += [f"models.{name}.{p}" for p in _model_problems(spec, name, m)]
    out += _cycles(spec)
    return out


def _model_problems(spec: StackSpec, name: str, m: StackModel) -> list[str]:
    out = []
    if not _NAME.match(name):
        out.append(f": {name!r} is not a name (letters, digits, '_', '.', '-')")
    if m.consumes is None and not _positive(m.rate_hz):
        out.append(
            f"rate_hz: {m.rate_hz:g} is not a positive, finite number of frames per second"
            if m.rate_hz is not None
            else "rate_hz: missing (a model runs at a rate, or consumes another's frames)"
        )
    if m.consumes is not None and m.rate_hz is not None:
        out.append(f"rate_hz: {name} consumes {m.consumes!r} and runs once per frame of it; drop its rate_hz")
    if m.consumes is not None and m.consumes not in spec.models:
        out.append(f"consumes: no model named {m.consumes!r} (models: {', '.join(spec.models)})")
    for key in ("deadline_ms", "e2e_deadline_ms"):
        value = getattr(m, key)
        if value is not None and not _positive(value):
            out.append(f"{key}: {value:g} is not a positive, finite number of milliseconds")
    if m.e2e_deadline_ms is not None and m.consumes is None:
        out.append("e2e_deadline_ms: only a model that consumes another's frames ends a chain")
    if not 0.0 <= m.max_miss_rate <= 1.0:
        out.append(f"max_miss_rate: {m.max_miss_rate:g} is not a share from 0 to 1")
    if not 1 <= m.threads <= 256:
        out.append(f"threads: {m.threads} is not from 1 to 256")
    path = spec.path(name)
    if not path.exists():
        out.append(f"model: {m.model} not found (looked at {path}; paths are relative to the stack file)")
    elif not (
        path.suffix in (".yaml", ".yml", ".onnx")
        and path.is_file()
        or path.is_dir()
        and (path / "engine.json").is_file()
    ):
        out.append(f"model: {m.model} is not a deploykit.yaml, an .onnx file or an engine folder (with engine.json)")
    elif m.precision is not None and path.suffix not in (".yaml", ".yml", ".onnx"):
        out.append("precision: an engine folder is built already; drop precision")
    return out


def _cycles(spec: StackSpec) -> list[str]:
    for start in spec.models:
        seen, name = [start], spec.models[start].consumes
        while name is not None and name in spec.models:
            if name in seen:
                loop = " -> ".join([*seen[seen.index(name) :], name])
                return [f"models.{start}.consumes: the chain has a cycle ({loop})"]
            seen.append(name)
            name = spec.models[name].consumes
    return []


__all__ = ["StackLimits", "StackModel", "StackSpec", "load_stack", "stack_from_dict"]
