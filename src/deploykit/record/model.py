"""The run record: one per (config name, precision, backend, flavour), holding every stage's status
and every verdict of the run. Every view — the terminal table, ``--log-format json``, JUnit,
Markdown, the HTML page and the notebook — renders this record and nothing else, so they cannot
disagree with each other or with the exit code (:attr:`RunRecord.exit_code`).

A verdict is a :class:`Check`: one per quantize output, per TensorRT version the lint checked, per
parity output x reference, per task check, per gate target check (model x platform) and per baseline
metric. The stage reports the
HTML sections draw from (``parity.json``, ``gate.json``, the quantize summary with its precision
patch) travel inside the record as ``details``, so a record read back from the store renders the
same page as the run that wrote it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import ArtifactCorrupt, ConfigError, UsageError, first_line
from deploykit.store.artifacts import RUN_NAME

if TYPE_CHECKING:
    from deploykit.metrics.reasons import Reason
    from deploykit.store.artifacts import Store

SCHEMA = "deploykit.run/1"
FOLDER = "records"  # WORKDIR/records/<identity>.json
MAX_BYTES = 64 << 20  # a record holds the stages' reports; bounded like every small untrusted file
GROUPS = ("quantize", "lint", "parity", "task", "gate", "baseline")  # check groups, in pipeline order


@dataclass(frozen=True)
class StageStatus:
    """What one stage did in this run."""

    stage: str
    status: str  # ran | reused | failed | stored (a report built from artifacts, not from a run)
    seconds: float = 0.0
    digest: str = ""
    kind: str = ""
    created: str = ""
    error: str = ""  # why the stage failed, or why its check failed
    note: str = ""  # e.g. when a reused measurement was taken (Stage.reuse_note)


@dataclass(frozen=True)
class Check:
    """One verdict: what was measured against which limit, and whether it passed."""

    group: str  # one of GROUPS
    name: str  # "scores vs onnx", "fps", "p99 latency" ...
    status: str  # pass | fail | inconclusive | skipped
    passed: bool  # inconclusive passes only where the config says warn
    metric: str = ""  # the metric that decided (the worst one for elementwise checks)
    measured: float | None = None
    limit: float | None = None
    op: str = ""  # how measured relates to limit when passing: "<=" or ">="
    message: str = ""  # the reasons, in words
    codes: tuple[str, ...] = ()  # the reasons' codes (deploykit.metrics.reasons.Verdict), for programs and tests

    def used(self) -> float:
        """How much of the allowed margin the measurement uses: above 1 is past the limit (-1: no number)."""
        m, lim = self.measured, self.limit
        if m is None or lim is None or abs(lim) == float("inf"):
            return -1.0
        if self.op == ">=":
            if self.metric == "cosine" and lim < 1.0:
                return (1.0 - m) / (1.0 - lim)
            return lim / m if m > 0 else float("inf")
        return m / lim if lim > 0 else (0.0 if m <= 0 else float("inf"))

    def verdict_line(self) -> str:
        """``rel_l2 0.031 <= 0.1``: the comparison as it stands (``>`` only where the value is past the
        limit), with the reason where the check failed for another (inconclusive, another limit); a
        metric without a limit is reported as measured, not judged."""
        if self.measured is None:
            return self.message or self.status
        if self.limit is None:
            return f"{self.metric} {number(self.measured)} (reported, no limit)" + (
                f": {self.message}" if self.message and not self.passed else ""
            )
        within = (
            self.measured <= self.limit
            if self.op == "<="
            else self.measured >= self.limit
            if self.op == ">="
            else self.passed
        )
        op = self.op if within else {"<=": ">", ">=": "<"}.get(self.op, "vs")
        line = f"{self.metric} {number(self.measured)} {op} {number(self.limit)}"
        if not self.passed and within:
            line += f" ({self.status}: {self.message})" if self.message else f" ({self.status})"
        return line


@dataclass(frozen=True)
class RunRecord:
    """Everything a run decided. ``exit_code`` is what the command line exits with."""

    name: str
    precision: str
    backend: str
    flavour: str  # the quantized graph's target flavour; "" when nothing was quantized
    stages: tuple[StageStatus, ...] = ()
    checks: tuple[Check, ...] = ()
    warnings: tuple[str, ...] = ()  # things a reader must know to trust the numbers
    gate_cached: bool = False  # the gate's measurement was reused from an earlier run, not measured now
    error: str = ""  # why the run failed: the error that stopped it, or the first failed check's error
    hint: str = ""
    error_code: int = 0  # the exit code that error gives (1: a check failed; 2, 3, 4, 70: the run stopped)
    details: dict[str, Any] = field(default_factory=dict)  # stage name -> its report (for the HTML sections)
    workdir: str = ""
    created: str = ""
    tools: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    @property
    def identity(self) -> str:
        """``name.precision.backend[.flavour]``: the record's key in the store."""
        return ".".join(p for p in (self.name, self.precision, self.backend, self.flavour) if p)

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        """0 ok, 1 a check failed, or the stopping error's code (2, 3, 4, 70)."""
        if self.error_code:
            return self.error_code
        if self.error:
            return 70
        return 1 if self.failed_checks else 0

    @property
    def stopped(self) -> bool:
        """Whether an error stopped the run (rather than a check failing in a run that finished)."""
        return bool(self.error) and self.error_code != 1

    @property
    def verdict(self) -> str:
        """PASS, FAIL (a check failed) or ERROR (the run stopped)."""
        return "ERROR" if self.stopped else "FAIL" if self.failed_checks or self.error else "PASS"

    def group(self, *names: str) -> list[Check]:
        return [c for c in self.checks if c.group in names]

    def deciding(self, *groups: str) -> Check | None:
        """The check of these groups that decides their verdict: the failure furthest past its limit
        (the first of them where none has a number), else the passing one closest to its limit."""
        checks = self.group(*groups)
        failed = [c for c in checks if not c.passed]
        return max(failed or checks, key=Check.used, default=None)

    def stage(self, name: str) -> StageStatus | None:
        return next((s for s in self.stages if s.stage == name), None)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(identity=self.identity, passed=self.passed, exit_code=self.exit_code, verdict=self.verdict)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        if data.get("schema") != SCHEMA:
            raise ConfigError(f"not a {SCHEMA} run record (schema {data.get('schema')!r})")
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["stages"] = tuple(StageStatus(**s) for s in data.get("stages", ()))
        values["checks"] = tuple(Check(**{**c, "codes": tuple(c.get("codes", ()))}) for c in data.get("checks", ()))
        values["warnings"] = tuple(data.get("warnings", ()))
        return cls(**values)


def explained(reasons: Iterable[Reason | dict[str, Any] | str], bare: bool = False) -> dict[str, Any]:
    """A Check's ``message`` and ``codes`` from reasons as stored (an artifact written before verdicts had
    codes holds their sentences, which give no code): the sentences joined by "; " (``bare``: without
    their subject, where the Check names it), then every code of each."""
    from deploykit.metrics.reasons import as_reason

    reasons = [as_reason(r) for r in reasons]
    return {
        "message": "; ".join(r.bare if bare else r.sentence for r in reasons),
        "codes": tuple(c for r in reasons for c in r.codes if c),
    }


_STORE_FILE = r"/objects/([0-9a-f]{64})/([^\s;,)]+)"


def portable(text: str, workdir: str) -> str:
    """``text`` for a page read elsewhere (a pull-request comment, an HTML file): a path into the store
    becomes the file and its artifact (``parity.json (artifact f00dcc361d11)``, which ``deploykit
    artifacts show`` finds), and no absolute store path is left."""
    if not workdir or not text:
        return text
    root = re.escape(workdir.rstrip("/"))
    text = re.sub(root + _STORE_FILE, lambda m: f"{m[2]} (artifact {m[1][:12]})", text)
    return text.replace(workdir.rstrip("/"), "<store>")


def number(value: float) -> str:
    """A measurement for a sentence: 26659.2, 0.0312, 1.1e-07."""
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.4g}"


# -- the store -----------------------------------------------------------------------------------


def write(store: Store, record: RunRecord) -> Path:
    """Write ``record`` atomically as ``records/<identity>.json`` in ``store``; return its path."""
    from deploykit.store.jsonio import dumps

    return store.write_record(file_stem(record.identity), dumps(record.to_dict()).encode())


def file_stem(identity: str) -> str:
    """The record's file name without ``.json``, whatever the config's name holds."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", identity)[:128]


def path_of(root: Path, record: RunRecord) -> Path:
    """Where ``record`` lives in the store at ``root`` (:func:`read` checks a record is in its own file)."""
    return root / FOLDER / f"{file_stem(record.identity)}.json"


def read(path: Path) -> RunRecord:
    """A stored run record; ArtifactCorrupt (exit 4) when the file is not one, is not byte for byte the
    record deploykit wrote (an edited verdict, an unknown field), holds another run's record, or (with
    ``DEPLOYKIT_STORE_KEY`` set) has no valid MAC. Whether its verdicts are what its artifacts say is
    :func:`deploykit.record.collect.verify_record`'s to check."""
    from deploykit.safety.smallfile import read_small
    from deploykit.store import key as storekey
    from deploykit.store.jsonio import dumps

    try:
        raw = read_small(path, MAX_BYTES, ArtifactCorrupt, "run record")
        key = storekey.store_key()
        if key is not None:
            storekey.check(key, "run record", path, raw, path.with_suffix(storekey.RECORD_MAC))
        record = RunRecord.from_dict(json.loads(raw))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such run record", hint="see `deploykit artifacts ls`") from None
    except (ValueError, TypeError, AttributeError, RecursionError, ConfigError) as e:
        raise ArtifactCorrupt(
            f"{path}: not a readable run record ({first_line(e)[:200]})", hint=f"delete {path} and rerun"
        ) from e
    if path.name != path_of(path.parent.parent, record).name:
        raise ArtifactCorrupt(
            f"{path}: holds the record of another run ({record.identity})", hint=f"delete {path} and rerun"
        )
    if dumps(record.to_dict()).encode() != raw:
        raise ArtifactCorrupt(
            f"{path}: run record was edited (it is not the file deploykit wrote)",
            hint=f"delete {path} and rerun the config; deploykit never trusts an edited record",
        )
    return record


def stored(root: Path, identity: str) -> RunRecord | None:
    """The record of ``identity`` in the store, or None (only that file is read; a record without a
    valid MAC in a keyed store counts as none: the run replaces it)."""
    from deploykit.errors import Untrusted

    path = root / FOLDER / f"{identity}.json"
    try:
        return read(path) if RUN_NAME.fullmatch(identity) and (path.exists() or path.is_symlink()) else None
    except Untrusted:
        return None


def find(root: Path, ref: str, *, precision: str | None = None, backend: str | None = None) -> list[RunRecord]:
    """The records of run ``ref`` (a config name or a record identity), newest first."""
    folder = root / FOLDER
    exact = folder / f"{ref}.json"
    if RUN_NAME.fullmatch(ref) and exact.is_file() and precision is None and backend is None:
        return [read(exact)]
    records = [read(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    found = [
        r
        for r in records
        if ref in (r.name, r.identity) and precision in (None, r.precision) and backend in (None, r.backend)
    ]
    return sorted(found, key=lambda r: r.created, reverse=True)


def pick(
    root: Path, ref: str, *, precision: str | None = None, backend: str | None = None
) -> tuple[RunRecord | None, str]:
    """The record ``ref`` names, and a note when several match (the newest is taken and the others named).

    None when no record matches (``ref`` may still be an artifact digest).
    """
    found = find(root, ref, precision=precision, backend=backend)
    if not found:
        return None, ""
    if len(found) == 1:
        return found[0], ""
    others = ", ".join(r.identity for r in found[1:])
    return found[0], (
        f"{len(found)} runs of {ref!r}: showing the newest, {found[0].identity}; the others: {others} "
        "(name one, or pass --precision / --backend)"
    )


def scan(root: Path) -> tuple[list[tuple[Path, RunRecord]], list[str]]:
    """Every run record in ``root/records/`` that reads back as one, and one line per file that does not."""
    from deploykit.store import key as storekey

    folder, good, problems = root / FOLDER, [], []
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.name.endswith(storekey.RECORD_MAC) and path.with_suffix(".json").is_file():
            continue  # a record's MAC (DEPLOYKIT_STORE_KEY), checked with the record
        if not path.name.endswith(".json") or path.is_symlink() or not path.is_file():
            problems.append(f"{path}: not a run record (records/<identity>.json)")
            continue
        try:
            good.append((path, read(path)))
        except (ArtifactCorrupt, UsageError) as e:
            problems.append(e.message)
    return good, problems


def no_record(root: Path, ref: str) -> UsageError:
    known = sorted({p.stem for p in (root / FOLDER).glob("*.json")}) if (root / FOLDER).is_dir() else []
    return UsageError(
        f"{ref!r} is neither a run name nor an artifact in {root}",
        hint=f"runs recorded there: {', '.join(known) or 'none'}; see `deploykit artifacts ls`",
    )


def worst_of(metrics: dict[str, Any], tolerance: dict[str, Any]) -> tuple[str, float | None, float | None, str]:
    """The elementwise metric closest to (or furthest past) its limit: (metric, measured, limit, op).

    Maxima (max_abs, rel_l2, ...) compare as measured / limit, minima (cosine, snr_db) by how much
    of the allowed distance from perfect is used; an unchecked or infinite limit never decides.
    """
    best: tuple[float, str, float | None, float | None, str] = (-1.0, "", None, None, "")
    for key, limit in tolerance.items():
        value = metrics.get(key)
        if key not in _CHECKED or limit is None or value is None or abs(limit) == float("inf"):
            continue
        if key == "cosine":
            used = (1.0 - value) / (1.0 - limit) if limit < 1.0 else (0.0 if value >= limit else float("inf"))
            op = ">="
        elif key == "snr_db":
            used = limit / value if value > 0 else float("inf")
            op = ">="
        else:
            used = value / limit if limit > 0 else (0.0 if value <= 0 else float("inf"))
            op = "<="
        if used > best[0]:
            best = (used, key, value, limit, op)
    return best[1], best[2], best[3], best[4]


_CHECKED = ("max_abs", "mean_abs", "rel_l2", "max_rel", "cosine", "snr_db")
