"""Plugin libraries: load them into TensorRT's registry before parsing, and check what they register.

A library registers its creators either at load time (``REGISTER_TENSORRT_PLUGIN``, so opening it
with ctypes is enough) or through an exported ``getCreators`` that TensorRT's
``IPluginRegistry.load_library`` calls. Both are handled. A library that registers nothing, or a
model whose plugin nodes find no creator, is an error here rather than the parser's "Plugin not
found" halfway through a build.
"""

from __future__ import annotations

import ctypes
import struct
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.errors import ConfigError, EnvironmentProblem, InvalidInput
from deploykit.safety import elf
from deploykit.store.hashing import digest_file

HEADERS_SYMBOL = "deploykit_tensorrt_headers"  # int32[3] {major, minor, patch}, see plugins/common/trt_plugin.h

Creator = tuple[str, str, str]  # (name, version, namespace)


@dataclass(frozen=True)
class LoadedLibrary:
    path: Path
    sha256: str
    creators: tuple[Creator, ...]  # what this library added to the registry


@dataclass(frozen=True)
class PluginNode:
    node: str
    creator: Creator


# TensorRT module -> {library sha256: creators it registered}; each library is loaded once per process.
_loaded: weakref.WeakKeyDictionary[Any, dict[str, tuple[Creator, ...]]] = weakref.WeakKeyDictionary()
_builtins_registered: weakref.WeakSet[Any] = weakref.WeakSet()


def check_paths(paths: Iterable[str | Path]) -> list[Path]:
    """The plugin library paths as files; raise ConfigError naming any that does not exist."""
    out = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise ConfigError(
                f"plugin library {str(path)!r} does not exist",
                hint="build the plugins first (`deploykit plugins build`) or fix build.plugins / --plugins",
            )
        out.append(path)
    return out


UNNAMED: Creator = ("(unnamed)", "", "")


def registered_creators(trt: Any) -> set[Creator]:
    """Every creator in TensorRT's global plugin registry, as (name, version, namespace).

    A creator the bindings hand back without its name (an interface object that was not downcast) is
    listed as :data:`UNNAMED`, numbered, so that it still counts as registered.
    """
    registry = trt.get_plugin_registry()
    out: set[Creator] = set()
    for i, creator in enumerate(registry.all_creators):
        try:
            out.add((str(creator.name), str(creator.plugin_version), str(creator.plugin_namespace)))
        except AttributeError:
            out.add((UNNAMED[0], str(i), ""))
    return out


def built_against(path: Path) -> tuple[int, int, int] | None:
    """The TensorRT headers (major, minor, patch) a deploykit plugin library records, read from the file.

    None when the library records none (another project's library, or one built before deploykit
    recorded it) or is not an ELF file the reader understands (the dynamic loader then has its say).
    """
    try:
        raw = elf.symbol_bytes(Path(path), HEADERS_SYMBOL)
    except (InvalidInput, OSError):
        return None
    if raw is None or len(raw) < 12:
        return None
    return struct.unpack("<3i", raw[:12])


def abi_problem(path: Path, tensorrt_version: str) -> str:
    """Why a plugin library must not be loaded into this TensorRT, or "" (also "" when it records nothing)."""
    from deploykit.backends.trt_compat import parse_version

    built = built_against(path)
    runtime = parse_version(tensorrt_version)
    if built is None or not runtime or built[0] == runtime[0]:
        return ""
    return (
        f"plugin library {path} was compiled against the TensorRT {built[0]}.{built[1]} headers but this is "
        f"TensorRT {tensorrt_version}; the plugin ABI differs between majors (ILogger and ILoggerFinder derive "
        f"from IVersionedInterface from 11 on), so it would crash on its first log message: rebuild it "
        f"against the TensorRT {runtime[0]}.x headers"
    )


def rebuild_hint(tensorrt_version: str) -> str:
    major = tensorrt_version.split(".")[0]
    return (
        f"`deploykit plugins build --tensorrt-include DIR` with DIR the include folder of TensorRT "
        f"{tensorrt_version} (NvInferVersion.h saying {major}.x)"
    )


def load_libraries(trt: Any, paths: Sequence[Path], opener: Callable[[str], Any] = ctypes.CDLL) -> list[LoadedLibrary]:
    """Load plugin libraries into TensorRT's registry; each must register at least one creator.

    Raises:
        EnvironmentProblem: the library was compiled against another TensorRT major's headers (checked
            from the file, before loading), or the dynamic loader rejects it (missing dependency).
        InvalidInput: a library loads but registers no plugin creator.
    """
    out = []
    loaded = _loaded.setdefault(trt, {})
    for path in paths:
        problem = abi_problem(Path(path), str(trt.__version__))
        if problem:
            raise EnvironmentProblem(problem, hint=rebuild_hint(str(trt.__version__)))
        # Keyed by content: the engine folder's copy of a library already loaded from build/plugins must not
        # be loaded twice (its creators would clash with the ones already registered).
        digest = digest_file(Path(path))
        if digest not in loaded:
            loaded[digest] = _load_one(trt, Path(path), opener)
        if not loaded[digest]:
            raise InvalidInput(
                f"plugin library {path} loaded but registered no TensorRT plugin creator",
                hint="it must use REGISTER_TENSORRT_PLUGIN or export getCreators; check that it "
                "was built with the TensorRT headers (not the CPU-only plugin build)",
            )
        out.append(LoadedLibrary(Path(path), digest, loaded[digest]))
    return out


def _load_one(trt: Any, path: Path, opener: Callable[[str], Any]) -> tuple[Creator, ...]:
    before = registered_creators(trt)
    try:
        handle = opener(str(path))
    except OSError as e:
        raise EnvironmentProblem(
            f"plugin library {path} cannot be loaded: {e}",
            hint=f"plugins must be compiled against the headers of TensorRT {trt.__version__.split('.')[0]}.x, "
            "the version they run with; rebuild them here",
        ) from e
    if not registered_creators(trt) - before and hasattr(handle, "getCreators"):
        # Not self-registering: let TensorRT call its getCreators (it also hands over the logger).
        registry = trt.get_plugin_registry()
        if registry.load_library(str(path)) is None:
            raise EnvironmentProblem(
                f"TensorRT could not load plugin library {path} via getCreators",
                hint="see TensorRT's log above; rebuild the library for this TensorRT",
            )
    return tuple(sorted(registered_creators(trt) - before))


def plugin_nodes(onnx_path: Path) -> list[PluginNode]:
    """Nodes the TensorRT parser maps to plugins: those carrying ``plugin_version``/``plugin_namespace``."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    out = []
    for i, node in enumerate(model.graph.node):
        attrs = {a.name: a for a in node.attribute}
        if "plugin_version" not in attrs and "plugin_namespace" not in attrs:
            continue
        version = attrs["plugin_version"].s.decode() if "plugin_version" in attrs else "1"
        namespace = attrs["plugin_namespace"].s.decode() if "plugin_namespace" in attrs else ""
        out.append(PluginNode(node.name or f"#{i}", (node.op_type, version, namespace)))
    return out


def check_plugin_nodes(trt: Any, nodes: Sequence[PluginNode], libraries: Sequence[LoadedLibrary]) -> None:
    """Raise InvalidInput listing plugin nodes whose creator no loaded library (nor TensorRT) registers."""
    if not nodes:
        return
    available = registered_creators(trt)
    if any(c[0] == UNNAMED[0] for c in available):
        return  # some creators cannot be named from Python: leave the check to TensorRT's parser
    missing = [n for n in nodes if n.creator not in available]
    if not missing:
        return
    wanted = "\n".join(
        f"  - node {n.node!r}: plugin {n.creator[0]!r} version {n.creator[1]!r} namespace {n.creator[2]!r}"
        for n in missing
    )
    given = (
        "\n".join(
            f"  - {lib.path.name}: " + (", ".join(f"{c[0]} v{c[1]} ns {c[2]!r}" for c in lib.creators))
            for lib in libraries
        )
        or "  (no plugin library given)"
    )
    raise InvalidInput(
        f"the model needs TensorRT plugins that are not registered:\n{wanted}\nplugin libraries loaded:\n{given}",
        hint="pass the library that provides them with --plugins (build.plugins), or check the "
        "node's plugin_version / plugin_namespace against the library's creators",
    )


def init_builtin_plugins(trt: Any, logger: Any) -> None:
    """Register TensorRT's own plugins (ROIAlign_TRT, ...) once; the parser and runtime may need them."""
    if trt not in _builtins_registered:
        trt.init_libnvinfer_plugins(logger, "")
        _builtins_registered.add(trt)
