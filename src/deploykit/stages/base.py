"""What every stage declares, what it gets to work with, and the typed summary it returns."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from deploykit.config import Config
from deploykit.progress import Reporter
from deploykit.record.model import Check
from deploykit.store.artifacts import Artifact, Store

S = TypeVar("S", bound="Summary")


class Summary:
    """Base of the stage summaries: a stage returns one, its consumers read it by field.

    Each subclass is a frozen dataclass declared beside its stage, every field with a default. The
    manifest stores :meth:`to_dict` (plain JSON values) and :meth:`of` reads it back, ignoring keys
    the class does not know, so an artifact written by another deploykit version stays readable.
    """

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any]) -> S:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        return cls(**{f.name: _read(hints[f.name], data[f.name]) for f in fields if f.name in data})

    @classmethod
    def of(cls: type[S], artifact: Artifact) -> S:
        """The summary stored in ``artifact``'s manifest."""
        return cls.from_dict(artifact.manifest.summary)

    def failure(self) -> str:
        """Why the stage's check failed; "" when it passed or the stage checks nothing."""
        return ""


def _plain(value: Any) -> Any:
    if isinstance(value, Summary):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _read(hint: Any, value: Any) -> Any:
    """A stored value as the field's type: nested summaries become their class, the rest stays."""
    if isinstance(value, Mapping):
        for tp in (hint, *typing.get_args(hint)):
            if isinstance(tp, type) and issubclass(tp, Summary):
                return tp.from_dict(value)
    return value


@dataclass
class StageContext:
    config: Config
    store: Store
    reporter: Reporter
    torch_model: Any = None  # the torch model this run built: export builds it, parity's torch reference reuses it
    # while a stage's run() runs: the config facts its recipe key was made of (canonical form), so a
    # stage that needs one again (quantize: the calibration files' digests) reads it instead of redoing it
    recipe: Any = None


class Stage:
    """A pipeline step: declared inputs (role -> kind), one output, a version, and ``run``.

    ``run`` writes only into the folder it is given and returns its :class:`Summary` (of type
    ``summary_type``) for the manifest; the pipeline hashes, publishes and caches. ``verdict`` turns
    a (fresh or reused) summary into a gate failure, so a failed check fails again when its report
    is reused. ``report_files`` are the files of the output that CI picks up (main JSON first).
    """

    name: ClassVar[str]
    version: ClassVar[int] = 1
    inputs: ClassVar[dict[str, str]] = {}  # role -> artifact kind
    output_kind: ClassVar[str]
    output_roles: ClassVar[tuple[str, ...]]  # the roles the output fills for later stages
    summary_type: ClassVar[type[Summary]]
    report_files: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def summary(cls, artifact: Artifact) -> Summary:
        """The typed summary of an artifact this stage wrote."""
        return cls.summary_type.of(artifact)

    @classmethod
    def report(cls, artifact: Artifact) -> dict[str, Any] | None:
        """The report a person reads (the main JSON report file), or None for a stage without one."""
        import json

        return json.loads(artifact.file(cls.report_files[0]).read_text()) if cls.report_files else None

    # Summary keys (at any depth) holding timings or provenance that differ between two runs of one recipe: the
    # manifest's seal covers them, its identity does not, so an unchanged rerun keeps its digest.
    measured: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def checks(cls, artifact: Artifact) -> list[Check]:
        """The verdicts ``artifact`` records, one :class:`~deploykit.record.model.Check` each (the run
        record's entries); a stage whose ``verdict`` can raise must fail one of them exactly when it does."""
        return []

    def applies(self, ctx: StageContext) -> bool:
        """Whether this stage runs for this config (e.g. export only for torch sources)."""
        return True

    def preflight(self, ctx: StageContext) -> None:
        """Fail before any stage runs when this one cannot (backend missing, no gate target)."""

    def fresh_every_run(self, ctx: StageContext) -> bool:
        """Whether this config asks for a measurement that is never reused from the cache (a soak)."""
        return False

    def key_config(self, ctx: StageContext) -> Any:
        """The config fields that change this stage's output (they enter the recipe key)."""
        raise NotImplementedError

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        """Toolchain/device facts that change the output; empty for portable stages."""
        return {}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> Summary:
        raise NotImplementedError

    def verdict(self, artifact: Artifact) -> None:
        """Raise a GateFailed subclass if the artifact records a failed check."""

    def reuse_note(self, artifact: Artifact) -> str:
        """What a reader of the run must know when this artifact is reused rather than made ('' if nothing)."""
        return ""
