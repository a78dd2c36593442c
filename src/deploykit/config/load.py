"""Reading untrusted configuration: bounded YAML, and the checks a typed Config still needs.

The YAML dialect is YAML's safe subset with three refusals, because a config comes from many hands:
aliases (``*name``: a 2 KB alias bomb expands to gigabytes when the config is copied), duplicate
keys (the last one silently wins), and nesting deeper than ``MAX_DEPTH``. Files are regular, UTF-8
and at most ``MAX_BYTES``. After the typed layer has built the Config, :func:`validate` checks
what types cannot say: every number finite (``.inf`` only where it means "off"), counts and
durations within bounds, the run name an identifier (it names a file), and that no input at its
largest shape needs more memory than ``limits.max_input_mib``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploykit.config.surface import spelled
from deploykit.errors import ConfigError

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_DIM = 2**31 - 1  # TensorRT dims are 32-bit; ONNX Runtime allocates from them


def read_text(path: Path, what: str = "config", example: str = "deploykit.yaml") -> str:
    """A config (or matrix) file's text: a regular file, at most MAX_BYTES, UTF-8."""
    from deploykit.safety.smallfile import read_small

    try:
        raw = read_small(path, MAX_BYTES, ConfigError, what)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} file not found", hint=f"pass the path to a {example}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: line {line}: not UTF-8 text (byte {e.start})", hint=f"save the {what} as UTF-8"
        ) from e


def load_yaml(text: str, where: str) -> Any:
    """Parse ``text`` (from ``where``) with the bounded safe loader; ConfigError on anything else."""
    import yaml

    if len(text) > MAX_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_BYTES // 1024} KiB")
    loader = None
    try:
        loader = _loader_class()(text)  # the reader checks for unprintable characters here
        loader.where = where
        return loader.get_single_data()
    except ConfigError:
        raise
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark else ""
        problem = getattr(e, "problem", None) or " ".join(str(e).split())[:200]
        raise ConfigError(f"{where}:{line} not valid YAML ({problem})") from e
    except (ValueError, RecursionError, OverflowError) as e:  # e.g. an integer of 5000 digits
        raise ConfigError(f"{where}: not a usable YAML value ({type(e).__name__}: {str(e)[:200]})") from e
    finally:
        if loader is not None:
            loader.dispose()


_LOADER: Any = None


def _loader_class() -> Any:
    global _LOADER
    if _LOADER is None:
        _LOADER = _make_loader()
    return _LOADER


def _make_loader() -> Any:
    import yaml
    from yaml.events import AliasEvent

    class BoundedLoader(yaml.SafeLoader):
        where = ""
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(AliasEvent):
                event = self.peek_event()
                raise ConfigError(
                    f"{self.where}: line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed",
                    hint="write the value out; aliases can expand without bound",
                )
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise ConfigError(f"{self.where}: line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                self.flatten_mapping(node)
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # unhashable: the base class reports it
                if first is not None:
                    raise ConfigError(
                        f"{self.where}: line {line}: duplicate key {key!r} (first at line {first})",
                        hint="keep one; YAML would silently use the last",
                    )
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return BoundedLoader


def merged_overrides(overrides: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted overrides from a mapping and from ``a__b=value`` keywords (the API's two spellings);
    a field given both ways must agree."""
    from deploykit.errors import UsageError

    out = {k.replace("__", "."): v for k, v in fields.items()}
    for key, value in (overrides or {}).items():
        if key in out and out[key] != value:
            raise UsageError(f"override {key!r} is given twice, as {out[key]!r} and {value!r}")
        out[key] = value
    return out


def parse_override(key: str, value: str) -> Any:
    """One ``--set key=value``: the value is YAML (numbers, lists, booleans), read like the file."""
    if not key or any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"--set {key}={value}: the key must be a dotted path like gate.iterations")
    return load_yaml(value, f"--set {key}")


# -- checks on the typed config --------------------------------------------------------------

# Fields whose number may be infinite: an infinite limit switches that check off.
INF_MEANS_OFF = {"Tolerance": "*", "QuantTolerance": "*", "Target": ("latency_ms_p99",)}
# Upper bounds of counts and durations that drive loops, threads or allocations.
UPPER = {
    ("GateConfig", "warmup"): 10**7,
    ("GateConfig", "warmup_s"): 3600.0,
    ("GateConfig", "iterations"): 10**7,
    ("GateConfig", "trials"): 1000,
    ("GateConfig", "concurrency"): 256,
    ("ParityConfig", "samples"): 10**6,
    ("ParityConfig", "diagnose_top"): 10**4,
    ("ExportConfig", "check_samples"): 10**4,
    ("ExportConfig", "opset"): 30,
    ("DataConfig", "samples"): 10**7,
    ("RepairConfig", "max_iterations"): 1000,
    ("RepairConfig", "samples"): 10**6,
    ("QuantizeConfig", "num_bins"): 1 << 20,
    ("QuantizeConfig", "check_samples"): 10**6,
    ("TensorRTOptions", "workspace_mib"): 1 << 24,
    ("BuildConfig", "intra_op_threads"): 1024,
    ("GateConfig", "soak_s"): 86400.0,
    ("GateConfig", "avg_runs"): 10**6,
}
# Lower bounds the dataclasses do not check themselves: a count of 0 would make a check vacuous.
LOWER = {
    ("ParityConfig", "samples"): 1,
    ("ParityConfig", "diagnose_top"): 0,
    ("ExportConfig", "check_samples"): 1,
    ("ExportConfig", "opset"): 7,
    ("BuildConfig", "intra_op_threads"): 0,
    ("QuantizeConfig", "int4_block_size"): 1,
    ("ParityConfig", "vacuous_below"): 0,
    ("GateConfig", "regression_threshold"): 0,
    **{("Tolerance", name): 0 for name in ("max_abs", "mean_abs", "rel_l2", "max_rel", "rel_floor", "atol", "rtol")},
    **{("QuantTolerance", name): 0 for name in ("max_abs", "mean_abs")},
}


def validate(cfg: Any) -> None:
    """Raise ConfigError naming the first field a typed Config cannot express as wrong."""
    from deploykit.store.artifacts import RUN_NAME

    if not RUN_NAME.fullmatch(cfg.name):
        raise ConfigError(
            f"config.name: {cfg.name!r} is not a name (letters, digits, '_', '-', '.'; "
            "no path): it names the run's record file",
            hint="e.g. name: resnet50_int8",
        )
    _walk(cfg, "config")
    for what, names in (("inputs", [s.name for s in cfg.inputs]), ("outputs", list(cfg.outputs))):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"config.{what}: {twice[0]!r} is listed twice", hint="each name once")
    _check_input_sizes(cfg)
    _check_flavour_backend(cfg)


def _check_flavour_backend(cfg: Any) -> None:
    """A Q/DQ flavour the build backend cannot take is refused here, not by TensorRT's parser on the GPU box."""
    from deploykit.choices import FLAVOUR_BACKENDS

    q, backend = cfg.quantize, cfg.build.backend
    if not q.enabled or q.precision == "fp16":  # fp16 writes casts, no Q/DQ
        return
    flavour = q.flavour(backend)
    if flavour not in FLAVOUR_BACKENDS:  # a flavour added to choices.Flavour and the registry but not here
        from deploykit.errors import InternalError

        raise InternalError(
            f"quantize flavour {flavour!r} has no entry in choices.FLAVOUR_BACKENDS, so no backend is known to "
            "build its Q/DQ graph",
            hint="a bug in deploykit: list the backends that can build that flavour's graph in FLAVOUR_BACKENDS "
            "(docs/architecture.md, 'Where to add')",
        )
    if backend not in FLAVOUR_BACKENDS[flavour]:
        raise ConfigError(
            f"config.quantize.target: {flavour!r} writes {q.precision.upper()} Q/DQ for ONNX Runtime's "
            f"CPU kernels (asymmetric UINT8, INT32 biases), which the {backend} backend refuses",
            hint=f"set quantize.target: auto (or tensorrt) for build.backend {backend}, or "
            "--set quantize.target=tensorrt",
        )


def _walk(value: Any, path: str, owner: str = "", name: str = "") -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value).__name__
        for f in dataclasses.fields(value):
            if not f.metadata.get("internal"):
                _walk(getattr(value, f.name), f"{path}.{f.name}", cls, f.name)
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{path}.{k}", owner, name)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _walk(v, f"{path}[{i}]", owner, name)
    elif isinstance(value, float) and not isinstance(value, bool):
        _check_float(value, path, owner, name)
    elif isinstance(value, int) and not isinstance(value, bool):
        _check_bound(value, path, owner, name)


def _check_float(value: float, path: str, owner: str, name: str) -> None:
    if math.isnan(value):
        raise ConfigError(f"{path}: NaN is not a number deploykit can use", hint="give a finite number")
    if math.isinf(value):
        allowed = INF_MEANS_OFF.get(owner)
        if allowed != "*" and name not in (allowed or ()):
            raise ConfigError(f"{path}: {value} is not finite", hint="give a finite number")
        if value < 0 and (owner, name) in LOWER:
            raise ConfigError(f"{path}: {value} is below the smallest value that means something here")
        return
    _check_bound(value, path, owner, name)


def _check_bound(value: float, path: str, owner: str, name: str) -> None:
    bottom = LOWER.get((owner, name))
    if bottom is not None and value < bottom:
        raise ConfigError(f"{path}: {value} is below the smallest value that means something here ({bottom})")
    top = UPPER.get((owner, name))
    if top is not None and value > top:
        raise ConfigError(
            f"{path}: {value} is above the largest value deploykit accepts ({top})",
            hint="use a smaller value; counts and durations this large would exhaust the machine",
        )
    if abs(value) > 2**63 - 1:
        raise ConfigError(f"{path}: {value} is out of range (64-bit)")


def _check_input_sizes(cfg: Any) -> None:
    import numpy as np

    for spec in cfg.inputs:
        shape = cfg.shape(spec, "max")  # min <= opt <= max: the largest
        big = next((d for d in shape if d > MAX_DIM), None)
        if big is not None:
            raise ConfigError(
                f"input {spec.name!r}: dim {big} is larger than {MAX_DIM}",
                hint=f"dims are 32-bit in TensorRT; fix the shape or {spelled('dims=', '--dim')}",
            )
        nbytes = math.prod(shape) * np.dtype(spec.dtype).itemsize
        if nbytes > cfg.limits.max_input_mib * 2**20:
            raise ConfigError(
                f"input {spec.name!r}: {list(shape)} at the max shape is {nbytes / 2**20:.0f} MiB, "
                f"above limits.max_input_mib ({cfg.limits.max_input_mib:g})",
                hint=f"lower the dims (or {spelled('dims=', '--dim')}), or raise limits.max_input_mib",
            )


__all__ = ["MAX_BYTES", "MAX_DEPTH", "load_yaml", "parse_override", "read_text", "validate"]
