"""The samples parity compares on: the validation data (its dims checked), else random inputs.

One definition, because two stages judge on them: the parity stage, and the quantize stage, whose
check and mixed-precision search run on exactly parity's validation samples so that a quantize pass
implies a parity pass. Neither stage imports the other for this.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from deploykit.config import Config
from deploykit.errors import DataError
from deploykit.graph.feeds import distinct_shapes, random_feeds


@dataclass(frozen=True)
class ValidationSamples:
    """Parity's validation samples in parity's order, and how its report names their source."""

    samples: list[dict[str, np.ndarray]]
    note: str


def validation_source(cfg: Config) -> Any:
    """The configured validation DataSource (``cfg.validation`` must be set)."""
    from deploykit.data.sources import DataSource, inputs_from_config

    return DataSource(
        cfg.validation, cfg.base_dir, inputs_from_config(cfg), what="validation", max_input_mib=cfg.limits.max_input_mib
    )


def validation_fingerprint(cfg: Config) -> Any:
    """What the validation data is, by content, for recipe keys; None without validation data."""
    return validation_source(cfg).fingerprint() if cfg.validation else None


def validation_samples(cfg: Config) -> ValidationSamples | None:
    """Parity's validation samples, read once; None without validation data (parity then runs on
    random inputs)."""
    if cfg.validation is None:
        return None
    samples, data = parity_samples(cfg)
    return ValidationSamples(list(samples), data["note"])


def parity_samples(cfg: Config) -> tuple[Iterator[dict[str, np.ndarray]], dict[str, Any]]:
    """The samples to compare on, and how the report describes them."""
    if cfg.validation is not None:
        v = cfg.validation
        where = v.folder or v.files or v.function or ""
        kind = "folder" if v.folder else "files" if v.files else "function" if v.function else "memory"
        if v.memory is not None:
            where = f"{v.memory.count} samples in memory, sha256 {v.memory.digest[:12]}"
        data = {
            "kind": "validation",
            "source": f"{kind}: {where}",
            "planned": v.samples,
            "note": f"validation data ({where})" if v.memory else f"validation data ({kind} {where})",
        }
        if v == cfg.calibration:
            data["warning"] = (
                "the validation data is the calibration data: parity on samples the quantizer saw is optimistic"
            )
        return _checked_dims(cfg, iter(validation_source(cfg))), data
    shapes = distinct_shapes(cfg)

    def random_samples() -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(cfg.parity.seed)
        for which in shapes:
            for _ in range(cfg.parity.samples):
                yield random_feeds(cfg, which, rng)

    return random_samples(), {
        "kind": "random",
        "note": "random normal inputs: no validation data configured",
        "seed": cfg.parity.seed,
        "samples_per_shape": cfg.parity.samples,
        "shapes": shapes,
        "planned": len(shapes) * cfg.parity.samples,
    }


def _checked_dims(cfg: Config, samples: Iterator[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
    """Dynamic dims of validation samples must lie in the configured min..max (the engine's profile)."""
    for i, feeds in enumerate(samples):
        for spec in cfg.inputs:
            for axis, dim in enumerate(spec.shape):
                if isinstance(dim, str):
                    size, d = feeds[spec.name].shape[axis], cfg.dims[dim]
                    if not d.min <= size <= d.max:
                        raise DataError(
                            f"validation sample {i}: input {spec.name!r} axis {axis} is {size}, outside "
                            f"dim {dim!r} range [{d.min}, {d.max}]",
                            hint="widen 'dims' in the config or batch the validation data differently",
                        )
        yield feeds
