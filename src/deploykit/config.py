"""deploykit.yaml: frozen dataclasses with their real defaults, read and validated at the edge."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deploykit.data import DataConfig
from deploykit.errors import ConfigError
from deploykit.quant.config import QuantizeConfig
from deploykit.typed import from_value


@dataclass(frozen=True)
class Source:
    """Where the model comes from: a torch factory ``module:function`` or an ONNX file."""

    factory: str | None = None
    onnx: str | None = None
    weights: str | None = None  # a state_dict file, read with torch.load(weights_only=True)
    depends: tuple[str, ...] = ()  # extra files the factory reads; they enter the cache key

    def __post_init__(self) -> None:
        if (self.factory is None) == (self.onnx is None):
            raise ValueError("give exactly one of 'factory' (module:function) or 'onnx' (a file)")
        if self.factory is not None and ":" not in self.factory:
            raise ValueError(f"factory {self.factory!r} must be 'module:function'")


@dataclass(frozen=True)
class Dim:
    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise ValueError(f"needs 1 <= min <= opt <= max, got min={self.min} opt={self.opt} max={self.max}")


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int | str, ...]
    dtype: Literal["float32", "float16", "int64", "int32", "int8", "uint8", "bool"] = "float32"


@dataclass(frozen=True)
class ExportConfig:
    exporter: Literal["auto", "dynamo", "torchscript"] = "auto"
    opset: int = 18
    check_atol: float = 1e-4  # ONNX Runtime vs torch at export, on random inputs
    check_rtol: float = 1e-3
    check_samples: int = 2
    seed: int = 0


@dataclass(frozen=True)
class SurgeryConfig:
    passes: tuple[str | dict[str, Any], ...] = ("sanitize",)
    check_atol: float = 1e-4  # outputs before/after a pass that declares it keeps numerics
    check_rtol: float = 1e-3


@dataclass(frozen=True)
class TensorRTOptions:
    """Builder settings of the TensorRT backend (precision is not here: it lives in the ONNX)."""

    workspace_mib: int = 4096
    builder_optimization_level: int = 3  # 0-5, TensorRT's default is 3
    hardware_compatibility: Literal["none", "ampere_plus", "same_compute_capability"] = "none"
    version_compatible: bool = False  # also sets EXCLUDE_LEAN_RUNTIME
    sparse_weights: bool = False
    refit: bool = False
    strip_plan: bool = False
    timing_cache: bool = True  # persist the timing cache as its own artifact
    error_on_timing_cache_miss: bool = False
    cuda_graphs: bool = True  # replay a captured CUDA graph when benchmarking

    def __post_init__(self) -> None:
        if not 0 <= self.builder_optimization_level <= 5:
            raise ValueError(f"builder_optimization_level must be 0-5, got {self.builder_optimization_level}")
        if self.workspace_mib < 1:
            raise ValueError(f"workspace_mib must be positive, got {self.workspace_mib}")


@dataclass(frozen=True)
class BuildConfig:
    backend: str = "onnxruntime"
    # onnxruntime backend
    optimization_level: Literal["disabled", "basic", "extended", "all"] = "extended"
    intra_op_threads: int = 0  # 0 = ONNX Runtime's choice (one per physical core)
    provider: Literal["cpu", "cuda", "tensorrt"] = "cpu"
    # tensorrt backend
    tensorrt: TensorRTOptions = TensorRTOptions()
    plugins: tuple[str, ...] = ()  # plugin libraries loaded before parsing; their digests enter the key


@dataclass(frozen=True)
class Tolerance:
    max_abs: float = 1e-3
    mean_abs: float = 1e-4
    rel_l2: float = 1e-4
    cosine: float = 0.9999  # a minimum


@dataclass(frozen=True)
class ParityConfig:
    samples: int = 4
    seed: int = 1
    torch_reference: bool = True  # also compare against torch when the source is a torch factory
    default: Tolerance = Tolerance()
    outputs: dict[str, Tolerance] = field(default_factory=dict)

    def tolerance(self, output: str) -> Tolerance:
        return self.outputs.get(output, self.default)


@dataclass(frozen=True)
class Target:
    fps: float | None = None
    latency_ms_p99: float | None = None
    batch: int = 1

    def __post_init__(self) -> None:
        if self.fps is None and self.latency_ms_p99 is None:
            raise ValueError("a target needs 'fps' or 'latency_ms_p99'")


@dataclass(frozen=True)
class GateConfig:
    warmup: int = 20
    iterations: int = 200
    targets: dict[str, Target] = field(default_factory=dict)
    allow_missing_target: bool = False


@dataclass(frozen=True)
class Config:
    name: str
    source: Source
    inputs: tuple[InputSpec, ...]
    dims: dict[str, Dim] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()  # output names to give the exported model (torch sources)
    export: ExportConfig = ExportConfig()
    surgery: SurgeryConfig = SurgeryConfig()
    quantize: QuantizeConfig = QuantizeConfig()
    calibration: DataConfig | None = None  # samples for quantization; random inputs are refused there
    validation: DataConfig | None = None  # samples for parity; random inputs when absent (the report says so)
    build: BuildConfig = BuildConfig()
    parity: ParityConfig = ParityConfig()
    gate: GateConfig = GateConfig()
    # The folder the config's relative paths start from: where the file lives, not a YAML key.
    base_dir: Path = field(default=Path("."), compare=False, metadata={"internal": True})

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError("'inputs' lists no input")
        for spec in self.inputs:
            for d in spec.shape:
                if isinstance(d, str) and d not in self.dims:
                    raise ValueError(f"input {spec.name!r} uses dim {d!r}, which 'dims' does not define")
                if isinstance(d, int) and d < 1:
                    raise ValueError(f"input {spec.name!r} has a non-positive dim {d}")

    def path(self, relative: str) -> Path:
        """A path from the config, resolved against the config file's folder."""
        p = Path(relative)
        return p if p.is_absolute() else (self.base_dir / p)

    def shape(self, spec: InputSpec, which: Literal["min", "opt", "max"]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else getattr(self.dims[d], which) for d in spec.shape)


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> Config:
    """Read ``deploykit.yaml``, apply dotted ``overrides`` (``{"gate.iterations": 50}``) and validate."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found", hint="pass the path to a deploykit.yaml") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror}") from e
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where}: not valid YAML ({getattr(e, 'problem', e)})") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    raw = apply_overrides(raw, overrides or {})
    try:
        return config_from_dict(raw, path.parent.resolve())
    except ConfigError as e:
        raise ConfigError(f"{path}: {e.message}", hint=e.hint or "the README's 'Configuration' section lists every key") from e


def config_from_dict(raw: dict[str, Any], base_dir: Path = Path(".")) -> Config:
    """Validate a parsed config; ``base_dir`` is the folder its relative paths start from."""
    cfg = from_value(Config, raw, "config")
    return dataclasses.replace(cfg, base_dir=base_dir)


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set ``a.b.c``-style keys in a copy of ``raw``; the result is validated like the file."""
    out = _deep_copy(raw)
    for dotted, value in overrides.items():
        node = out
        *parents, leaf = dotted.split(".")
        for key in parents:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {dotted!r}: {key!r} is not a section")
            node = child
        node[leaf] = value
    return out


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
