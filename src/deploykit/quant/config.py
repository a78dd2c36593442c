"""Moved: the quantize stage's settings live in :mod:`deploykit.config` (the bottom layer: the config
must not import a package above it), the enumerations in :mod:`deploykit.choices`.

DEPRECATED re-exports for merging branches and tests written against this module; nothing in
``src/deploykit`` imports it. ``QuantTolerance`` is :class:`deploykit.config.Tolerance` (one
tolerance type). Delete once those branches are merged (issue 11).
"""

from __future__ import annotations

from deploykit.choices import Flavour, Precision
from deploykit.config import QuantizeConfig, QuantTolerances, RepairConfig
from deploykit.config import Tolerance as QuantTolerance

__all__ = ["Flavour", "Precision", "QuantTolerance", "QuantTolerances", "QuantizeConfig", "RepairConfig"]
