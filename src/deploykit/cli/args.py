"""The command line's options and their parsing, shared by every command in :mod:`deploykit.cli.app`.

Choices are the ``Literal`` types of :mod:`deploykit.choices`, so typer validates them, completes
them and lists them in ``--help``; :func:`usage_error` turns the parser's errors into one
``error:`` line with a did-you-mean and the command's usage as the hint. Flags override config
fields one-to-one (:func:`overrides`); shapes follow trtexec (``--shapes x:1x3x640x640``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from deploykit.choices import (
    BackendName,
    Method,
    Precision,
    Provider,
    QuantizeTarget,
    listed,
    only,
    suggest,
)
from deploykit.errors import UsageError

QuantizedPrecision = only(Precision, without=("fp32",))

Workdir = Annotated[
    Path, typer.Option("--workdir", "-w", metavar="DIR", help="Artifact store; reruns reuse what it holds.")
]
Sets = Annotated[
    Optional[list[str]],
    typer.Option("--set", metavar="KEY=VALUE", help="Override a config field: --set gate.iterations=50"),
]
Rerun = Annotated[
    Optional[list[str]],
    typer.Option("--rerun", metavar="STAGE", help="Run this stage even if its artifact exists (repeatable)."),
]
BackendOpt = Annotated[Optional[BackendName], typer.Option("--backend", help="Build backend (sets build.backend).")]
ProviderOpt = Annotated[
    Optional[Provider], typer.Option("--provider", help="ONNX Runtime execution provider (sets build.provider).")
]
PrecisionOpt = Annotated[Optional[Precision], typer.Option("--precision", help="Sets quantize.precision.")]
QuantPrecisionOpt = Annotated[
    Optional[QuantizedPrecision], typer.Option("--precision", help="Sets quantize.precision.")
]
TargetOpt = Annotated[
    Optional[QuantizeTarget], typer.Option("--target", help="Quantized graph flavour; auto follows the backend.")
]
MethodOpt = Annotated[Optional[Method], typer.Option("--method", help="Calibration method (sets quantize.method).")]
Dims = Annotated[
    Optional[list[str]],
    typer.Option(
        "--dim", metavar="NAME=MIN,OPT,MAX", help="A named dynamic dim: --dim batch=1,4,8 (min,opt,max) or batch=4."
    ),
]
Shapes = Annotated[
    Optional[list[str]],
    typer.Option(
        "--shapes",
        metavar="INPUT:DxD...",
        help="Input shapes as trtexec writes them: x:1x3x640x640[,y:...]; sets min=opt=max.",
    ),
]
MinShapes = Annotated[
    Optional[list[str]], typer.Option("--min-shapes", metavar="INPUT:DxD...", help="Profile minimum: x:1x3x640x640.")
]
OptShapes = Annotated[
    Optional[list[str]], typer.Option("--opt-shapes", metavar="INPUT:DxD...", help="Profile optimum: x:4x3x640x640.")
]
MaxShapes = Annotated[
    Optional[list[str]], typer.Option("--max-shapes", metavar="INPUT:DxD...", help="Profile maximum: x:8x3x640x640.")
]
ReportDir = Annotated[
    Optional[Path],
    typer.Option(
        "--report-dir",
        metavar="DIR",
        help="Write the reports here: run.json, junit.xml, summary.md and the stages' JSON.",
    ),
]
Out = Annotated[Optional[Path], typer.Option("--output", "-o", metavar="PATH", help="Copy the stage's output here.")]
Baseline = Annotated[
    Optional[Path],
    typer.Option(
        "--baseline",
        metavar="GATE_JSON",
        help="A previous gate.json: fail when a metric regresses beyond the threshold plus the measured spread.",
    ),
]
AllowMissingTarget = Annotated[
    bool, typer.Option("--allow-missing-target", help="Measure without failing when no target matches.")
]
Iterations = Annotated[
    Optional[int],
    typer.Option("--iterations", min=1, metavar="N", help="Timed iterations per trial (sets gate.iterations)."),
]
Warmup = Annotated[
    Optional[int], typer.Option("--warmup", min=0, metavar="N", help="Warm-up runs at least (sets gate.warmup).")
]
Duration = Annotated[
    Optional[float],
    typer.Option(
        "--duration",
        min=0.0,
        metavar="SECONDS",
        help="Seconds of timed runs at least, over all trials (sets gate.duration_s).",
    ),
]
# trtexec's timing flags, in its spelling and ours; each sets one gate field (refused where the backend cannot).
UseCudaGraph = Annotated[
    bool,
    typer.Option(
        "--use-cuda-graph",
        "--useCudaGraph",
        help="Replay the engine as a CUDA graph while timing (sets gate.cuda_graph=on; TensorRT only).",
    ),
]
NoDataTransfers = Annotated[
    bool,
    typer.Option(
        "--no-data-transfers",
        "--noDataTransfers",
        help="Time the engine alone, without host<->device copies (sets gate.data_transfers=false).",
    ),
]
WarmupMs = Annotated[
    Optional[float],
    typer.Option(
        "--warmup-ms",
        "--warmUp",
        min=0.0,
        metavar="MS",
        help="Warm up for at least this many ms, beside --warmup's count (sets gate.warmup_s).",
    ),
]
AvgRuns = Annotated[
    Optional[int],
    typer.Option(
        "--avg-runs",
        "--avgRuns",
        min=1,
        metavar="N",
        help="Latency percentiles over means of N consecutive runs (sets gate.avg_runs; deadlines judge every run).",
    ),
]
DeadlineMs = Annotated[
    Optional[float],
    typer.Option(
        "--deadline-ms",
        metavar="MS",
        help="Per-frame deadline (sets gate.targets.default.deadline_ms; misses allowed: "
        "gate.targets.default.max_miss_rate).",
    ),
]
Soak = Annotated[
    Optional[float],
    typer.Option(
        "--soak",
        min=0.0,
        metavar="SECONDS",
        help="After the trials, run this many seconds: drift, memory growth, NaN/Inf, errors "
        "(sets gate.soak_s; never reused).",
    ),
]
Trace = Annotated[
    Optional[Path],
    typer.Option(
        "--trace",
        metavar="FILE",
        help="Write a Chrome trace (open in Perfetto) of every stage and timed inference; "
        "NVTX ranges too where nvtx is installed.",
    ),
]
Remeasure = Annotated[
    bool,
    typer.Option("--remeasure", help="Measure again instead of reusing a stored measurement (reruns only the gate)."),
]
TimingCache = Annotated[
    Optional[Path],
    typer.Option(
        "--timing-cache",
        metavar="FILE",
        help="TensorRT timing cache file: read before the build, written after "
        "(sets build.tensorrt.timing_cache_file).",
    ),
]
Plugins = Annotated[
    Optional[list[Path]],
    typer.Option("--plugins", metavar="LIB", help="Plugin library (repeatable; sets build.plugins)."),
]
AutoRepair = Annotated[
    bool,
    typer.Option(
        "--auto-repair",
        help="Quantized: search for the fastest mix of layer precisions that passes parity "
        "(sets quantize.repair.enabled).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
Atol = Annotated[
    Optional[list[str]],
    typer.Option(
        "--atol",
        metavar="[OUTPUT:]ATOL",
        help="Absolute tolerance, as Polygraphy takes it: every element within ATOL "
        "or within RTOL x |reference|; OUTPUT:ATOL for one output (repeatable; sets parity.default.atol / "
        "parity.outputs.OUTPUT.atol).",
    ),
]
Rtol = Annotated[
    Optional[list[str]],
    typer.Option(
        "--rtol", metavar="[OUTPUT:]RTOL", help="Relative tolerance (see --atol); OUTPUT:RTOL for one output."
    ),
]
SaveInputs = Annotated[
    Optional[Path],
    typer.Option("--save-inputs", metavar="FILE", help="Write the samples parity compared on (.npz or .json)."),
]
LoadInputs = Annotated[
    Optional[Path],
    typer.Option(
        "--load-inputs", metavar="FILE", help="Compare on these samples (a --save-inputs file; sets validation)."
    ),
]
SaveOutputs = Annotated[
    Optional[Path],
    typer.Option(
        "--save-outputs", metavar="FILE", help="Write what each side computed on the samples (.npz or .json)."
    ),
]


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``key.path=value`` pairs; values are YAML (read like the file), so numbers, lists and booleans work."""
    from deploykit.config.load import parse_override

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected key.path=value")
        out[key.strip()] = parse_override(key.strip(), value)
    return out


def parse_dims(items: list[str] | None) -> dict[str, tuple[int, int, int]]:
    """``--dim name=MIN,OPT,MAX`` or ``name=N``; each a positive integer of at most 32 bits."""
    from deploykit.config.load import MAX_DIM

    out = {}
    for item in items or []:
        name, _, text = item.partition("=")
        try:
            nums = tuple(int(v) for v in text.split(",")) if len(text) <= 64 else ()
        except ValueError:
            nums = ()
        if len(nums) == 1:
            nums = nums * 3
        if not name or len(nums) != 3:
            raise UsageError(f"--dim {item!r}: expected name=MIN,OPT,MAX or name=N (integers)")
        if not all(1 <= n <= MAX_DIM for n in nums) or not nums[0] <= nums[1] <= nums[2]:
            raise UsageError(f"--dim {item!r}: needs 1 <= MIN <= OPT <= MAX <= {MAX_DIM}")
        out[name] = nums  # type: ignore[assignment]
    return out


_SHAPE = re.compile(r"^(?P<name>.+):(?P<dims>\d+(x\d+)*)$")


def parse_shapes(flag: str, items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``name:1x3x640x640`` entries (repeated, or comma-separated as trtexec takes them)."""
    from deploykit.config.load import MAX_DIM

    out: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        for part in filter(None, (p.strip() for p in item.split(","))):
            m = _SHAPE.match(part)
            if not m:
                raise UsageError(f"{flag} {part!r}: expected input:DxDx... (e.g. images:1x3x640x640)")
            dims = tuple(int(d) for d in m["dims"].split("x")) if len(m["dims"]) <= 256 else (0,)
            if not all(1 <= d <= MAX_DIM for d in dims):
                raise UsageError(f"{flag} {part!r}: every dim must be an integer from 1 to {MAX_DIM}")
            out[m["name"]] = dims
    return out


def shape_profiles(
    shapes: list[str] | None, min_: list[str] | None, opt: list[str] | None, max_: list[str] | None
) -> dict[str, dict[str, tuple[int, ...]]]:
    """input -> {"min", "opt", "max"} shapes; ``--shapes`` sets all three, the others one each."""
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, shape in parse_shapes("--shapes", shapes).items():
        out[name] = {"min": shape, "opt": shape, "max": shape}
    for flag, which, items in (
        ("--min-shapes", "min", min_),
        ("--opt-shapes", "opt", opt),
        ("--max-shapes", "max", max_),
    ):
        for name, shape in parse_shapes(flag, items).items():
            out.setdefault(name, {})[which] = shape
    return out


def tolerance_overrides(atol: list[str] | None, rtol: list[str] | None) -> dict[str, Any]:
    """``--atol 1e-3 --atol boxes:1e-2`` (Polygraphy's form) as parity fields: a bare value for every
    output (``parity.default.atol``), ``OUTPUT:VALUE`` for one (``parity.outputs.OUTPUT.atol``)."""
    out: dict[str, Any] = {}
    for flag, items in (("atol", atol), ("rtol", rtol)):
        for item in items or []:
            name, sep, text = item.rpartition(":")
            try:
                value = float(text)
            except ValueError:
                value = -1.0
            if not value >= 0 or value == float("inf") or (sep and not name):
                raise UsageError(f"--{flag} {item!r}: expected a number >= 0, or OUTPUT:NUMBER for one output")
            out[f"parity.outputs.{name}.{flag}" if sep else f"parity.default.{flag}"] = value
    return out


def overrides(**flags: Any) -> dict[str, Any]:
    """Config fields from the flags that were given: ``overrides(**{"gate.iterations": 50, "build.backend": None})``."""
    return {k: v for k, v in flags.items() if v is not None}


def checked_plugins(paths: list[Path] | None) -> list[str] | None:
    """``--plugins`` libraries, resolved; a missing one is a usage error before anything runs."""
    if not paths:
        return None
    for p in paths:
        if not p.is_file():
            raise UsageError(
                f"--plugins {p}: {'not a file' if p.exists() else 'no such file'}",
                hint="build the libraries with `deploykit plugins build`, then pass the .so it names",
            )
    return [str(p.resolve()) for p in paths]


# -- help text a person reads --------------------------------------------------------------------------

_WORDS = {"str": "TEXT", "int": "N", "float": "NUMBER", "path": "PATH", "file": "FILE", "directory": "DIR"}


def readable_help() -> None:
    """Name values in ``--help`` as man pages do. typer >= 0.25 writes an option's Python type
    (``<list[str]>``, ``<bool>`` beside a flag, ``<path>``) and a required argument as ``{config}``
    in the usage line, which read as internals: a flag shows no value, a type becomes a word (``PATH``,
    ``N``, ``TEXT ...`` for a repeatable one), an argument is ``CONFIG`` (``[OTHER]`` when optional).
    Choices stay as typer lists them. A typer without these hooks keeps its own wording."""
    from typer import core

    option, argument = getattr(core, "TyperOption", None), getattr(core, "TyperArgument", None)
    if (
        option is None
        or argument is None
        or not hasattr(option, "display_type_rich")
        or getattr(option, "_deploykit_readable", False)
    ):
        return
    shown_option, shown_argument = option.display_type_rich, argument.display_type_rich

    def option_type(self: Any, ctx: Any) -> str | None:
        if self.metavar is not None:
            return str(self.metavar)
        if getattr(self, "is_flag", False):
            return None
        return _readable(shown_option(self, ctx))

    def argument_type(self: Any, ctx: Any) -> str | None:
        return self.metavar or _readable(shown_argument(self, ctx))

    def usage_name(self: Any) -> str:
        name = str(self.metavar or self.name).upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    option.display_type_rich, argument.display_type_rich = option_type, argument_type
    if hasattr(argument, "_usage_display_name"):
        argument._usage_display_name = usage_name
    option._deploykit_readable = True


def _readable(shown: str | None) -> str | None:
    """``<list[str]>`` -> ``TEXT ...``, ``<path>`` -> ``PATH``; choices (``<a|b>``) as they are."""
    if not shown or not (shown.startswith("<") and ">" in shown):
        return shown
    inner, rest = shown[1 : shown.index(">")], shown[shown.index(">") + 1 :]
    repeated = inner.startswith("list[") and inner.endswith("]")
    inner = inner[5:-1] if repeated else inner
    if "|" in inner:
        return f"<{inner}>{' ...' if repeated else ''}{rest}"
    return f"{_WORDS.get(inner, inner.upper())}{' ...' if repeated else ''}{rest}"


# -- the parser's errors as one line --------------------------------------------------------------------

_NOT_ONE_OF = re.compile(r"'(?P<value>[^']*)' is not one of")


def usage_error(e: Exception) -> UsageError:
    """A typer/click usage error as a UsageError: one line, a did-you-mean where a choice was missed,
    the command's usage as the hint."""
    import difflib

    ctx, param = getattr(e, "ctx", None), getattr(e, "param", None)
    message = e.format_message() if hasattr(e, "format_message") else str(e)  # type: ignore[attr-defined]
    choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
    found = _NOT_ONE_OF.search(message)
    if param is not None and choices and found:
        flag = (param.opts or [param.name])[0]
        literal = _literal(tuple(str(c) for c in choices))
        message = f"{flag} {found['value']!r}: use {listed(literal)}{suggest(found['value'], literal)}"
    elif getattr(e, "option_name", None) and getattr(e, "possibilities", None) is not None:  # an unknown flag
        close = difflib.get_close_matches(e.option_name, list(e.possibilities or ()), n=1, cutoff=0.5)  # type: ignore[attr-defined]
        message = f"no such option {e.option_name}" + (f" (did you mean {close[0]}?)" if close else "")  # type: ignore[attr-defined]
    message = message.replace("Value error, ", "")
    usage = ctx.get_usage().removeprefix("Usage: ").strip() if ctx is not None else "deploykit COMMAND [ARGS]..."
    command = ctx.command_path if ctx is not None else "deploykit"
    return UsageError(message, hint=f"usage: {usage}; see `{command} --help`")


def _literal(options: tuple[str, ...]) -> Any:
    from typing import Literal

    return Literal[options]  # type: ignore[valid-type]


def wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for ``--log-format json`` (errors then go out as JSON too)."""
    for i, arg in enumerate(argv):
        if arg == "--log-format=json" or (arg == "--log-format" and argv[i + 1 : i + 2] == ["json"]):
            return True
    return False
