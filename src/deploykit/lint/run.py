"""Run every rule for every requested TensorRT version and merge what they find."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from deploykit.lint import dtypes, operators, plugins, qdq, shapes
from deploykit.lint.findings import Issue, LintReport, merged
from deploykit.lint.tables import VERSIONS, table
from deploykit.lint.view import GraphView


@dataclass(frozen=True)
class LintOptions:
    """What to lint against.

    Attributes:
        versions: the TensorRT versions (support tables) to check, e.g. ``("10.13", "11")``.
        plugins: the plugin libraries TensorRT would load; None when the run names none and builds no
            TensorRT engine (a plugin node without a creator is then a warning, not an error).
        profiles: input name -> (min, opt, max) shapes; every dynamic input needs one.
    """

    versions: tuple[str, ...] = VERSIONS
    plugins: tuple[Path, ...] | None = ()
    profiles: Mapping[str, Sequence[Sequence[int]]] | None = None


def lint_model(model: onnx.ModelProto, options: LintOptions = LintOptions(), name: str = "") -> LintReport:
    """Lint an in-memory model (its external data, if any, already loaded)."""
    view = GraphView(model)
    libs = plugins.libraries(options.plugins) if options.plugins is not None else None
    per_version: dict[str, list[Issue]] = {}
    for version in options.versions:
        t = table(version)
        found = [
            *operators.check(view, t),
            *dtypes.check(view, t),
            *qdq.check(view, t),
            *shapes.check(view, t, options.profiles),
            *plugins.check(view, t, libs),
        ]
        per_version[version] = found
    notes = list(dict.fromkeys(view.notes))
    if libs:
        notes.append(
            "plugin creators were found by their names among each library's read-only strings (the "
            "library is never loaded): their versions and fields are not checked here (`deploykit plugins "
            "check LIB` checks them where TensorRT or deploykit's glue checker runs)"
        )
    return LintReport(
        model=name or model.graph.name,
        versions=tuple(options.versions),
        findings=merged(per_version),
        notes=tuple(notes),
        tables={v: {"tensorrt": table(v).tensorrt, **table(v).source} for v in options.versions},
        plugins=tuple(str(p) for p in options.plugins or ()),
        plugins_known=options.plugins is not None,
    )


def lint_file(path: Path, options: LintOptions = LintOptions()) -> LintReport:
    """Lint an ONNX file (read as data: :func:`deploykit.graph.files.load_model` refuses hostile files).

    Raises:
        ModelError: the file is not a readable ONNX model.
    """
    from deploykit.graph.files import load_model

    return lint_model(load_model(Path(path)), options, name=str(path))
