"""What every stage declares, and what it gets to work with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from deploykit.artifacts import Artifact, Store
from deploykit.config import Config
from deploykit.progress import Reporter


@dataclass
class StageContext:
    config: Config
    store: Store
    reporter: Reporter
    extra: dict[str, Any] = field(default_factory=dict)  # run-wide facts stages share (e.g. the gate target)


class Stage:
    """A pipeline step: declared inputs (role -> kind), one output, a version, and ``run``.

    ``run`` writes only into the folder it is given and returns a summary for the manifest; the
    pipeline hashes, publishes and caches. ``verdict`` turns a (fresh or reused) summary into a
    gate failure, so a failed check fails again when its report is reused.
    """

    name: ClassVar[str]
    version: ClassVar[int] = 1
    inputs: ClassVar[dict[str, str]] = {}  # role -> artifact kind
    output_kind: ClassVar[str]
    output_roles: ClassVar[tuple[str, ...]]  # the roles the output fills for later stages
    # Summary keys (at any depth) holding timings that differ between two runs of one recipe: the
    # manifest's seal covers them, its identity does not, so an unchanged rerun keeps its digest.
    measured: ClassVar[tuple[str, ...]] = ()

    def applies(self, ctx: StageContext) -> bool:
        """Whether this stage runs for this config (e.g. export only for torch sources)."""
        return True

    def preflight(self, ctx: StageContext) -> None:
        """Fail before any stage runs when this one cannot (backend missing, no gate target)."""

    def key_config(self, ctx: StageContext) -> Any:
        """The config fields that change this stage's output (they enter the recipe key)."""
        raise NotImplementedError

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        """Toolchain/device facts that change the output; empty for portable stages."""
        return {}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        raise NotImplementedError

    def verdict(self, artifact: Artifact) -> None:
        """Raise a GateFailed subclass if the artifact records a failed check."""

    def reuse_note(self, artifact: Artifact) -> str:
        """What a reader of the run must know when this artifact is reused rather than made ('' if nothing)."""
        return ""
