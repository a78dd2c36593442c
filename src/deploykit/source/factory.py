"""Torch model sources: the factory the user named, its cache fingerprint, and building it."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from deploykit.config import Config
from deploykit.errors import ConfigError, ModelError, first_line
from deploykit.safety.usercode import failed_inside, importable_from
from deploykit.store.hashing import digest_file


def _local_module_file(config: Config) -> Path | None:
    """The factory module's file when it lives under the config's folder (the usual case)."""
    rel = config.source.factory.split(":")[0].replace(".", "/")  # type: ignore[union-attr]
    for candidate in (config.base_dir / f"{rel}.py", config.base_dir / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _find_module_file(config: Config) -> Path:
    local = _local_module_file(config)
    if local is not None:
        return local
    module = config.source.factory.split(":")[0]  # type: ignore[union-attr]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise ConfigError(
            f"source.factory: module {module!r} not found in {config.base_dir} or on sys.path",
            hint="give 'module:function' importable from the config's folder",
        )
    return Path(spec.origin)


def _import_factory_module(config: Config) -> Any:
    """Import the factory's module. A module beside the config is always loaded from that file:
    two configs may both name ``model:build``, and a notebook may have edited the file since."""
    name = config.source.factory.split(":")[0]  # type: ignore[union-attr]
    local = _local_module_file(config)
    _forget_other_folders_modules(config.base_dir)
    with importable_from(config.base_dir):  # the module's own imports resolve from its folder
        if local is None:
            return importlib.import_module(name)
        spec = importlib.util.spec_from_file_location(name, local)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module


def _forget_other_folders_modules(folder: Path) -> None:
    """Drop top-level modules named like a file in ``folder`` but loaded from elsewhere, so the
    factory's own ``from model import ...`` reads its sibling, not another example's ``model``."""
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        sibling = folder / f"{name}.py"
        if "." not in name and origin and sibling.is_file() and Path(origin).resolve() != sibling.resolve():
            del sys.modules[name]


def source_fingerprint(config: Config) -> dict[str, str]:
    """Digests of the factory's module file, the weights and declared dependencies.

    Computed without importing torch or the module, so an unchanged rerun is cheap. A factory that
    reads other files must list them under ``source.depends`` for changes to invalidate the cache.
    A module in memory is its weights' digest (what its forward() does is in the ONNX it exports).
    """
    if config.source.memory is not None:
        return {"memory": "torch", "weights": config.source.memory.weights}
    files = {"module": _find_module_file(config)}
    if config.source.weights:
        files["weights"] = config.path(config.source.weights)
    for dep in config.source.depends:
        files[f"depends:{dep}"] = config.path(dep)
    out = {"factory": config.source.factory or ""}
    for role, path in files.items():
        if not path.is_file():
            raise ConfigError(f"source: {role.split(':')[0]} file {path} not found")
        out[role] = digest_file(path)
    return out


def build_model(config: Config) -> Any:
    """Call the user's factory (named explicitly in the config), load weights safely, set eval mode; a
    module passed in memory is used as it is (:func:`deploykit.convert` holds it in eval mode)."""
    import torch

    if config.source.memory is not None:
        return config.source.memory.object

    module_name, fn_name = config.source.factory.split(":")  # type: ignore[union-attr]
    try:
        module = _import_factory_module(config)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            raise ConfigError(
                f"source.factory: module {module_name!r} not found in {config.base_dir} or on sys.path",
                hint="give 'module:function' importable from the config's folder",
            ) from e
        inside, package = failed_inside(e)
        raise ModelError(
            f"source.factory: importing {module_name!r} failed: {first_line(e)}{inside}", hint=_import_hint(package)
        ) from e
    except Exception as e:
        inside, package = failed_inside(e)
        raise ModelError(
            f"source.factory: importing {module_name!r} raised {type(e).__name__}: {first_line(e)}{inside}",
            hint=_import_hint(package),
        ) from e
    factory = getattr(module, fn_name, None)
    if not callable(factory):
        raise ConfigError(f"source.factory: {module_name!r} has no function {fn_name!r}")
    try:
        model = factory()
    except Exception as e:
        inside, _ = failed_inside(e)
        raise ModelError(
            f"source.factory: {config.source.factory}() raised {type(e).__name__}: {first_line(e)}{inside}"
        ) from e
    if not isinstance(model, torch.nn.Module):
        raise ModelError(
            f"source.factory: {config.source.factory}() returned {type(model).__name__}, not a torch.nn.Module"
        )
    if config.source.weights:
        _load_weights(model, config.path(config.source.weights))
    return model.eval()


def _import_hint(package: str) -> str:
    """What to try when the factory's import failed inside an installed package."""
    if not package:
        return "fix the import error above in the factory's module (or what it imports)"
    return (
        f"the failure is inside the installed package {package!r}: `python -c 'import {package}'` shows it "
        "alone; a build for another torch (a CUDA torchvision beside the CPU torch) fails like this, so "
        "reinstall it to match torch"
    )


def _load_weights(model: Any, path: Path) -> None:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # never unpickle code
    except Exception as e:
        raise ModelError(
            f"{path}: cannot read weights as a state_dict ({e})", hint="save with torch.save(model.state_dict(), path)"
        ) from e
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as e:
        first = first_line(e)
        raise ModelError(f"{path}: weights do not fit the model: {first}") from e


def run_torch(model: Any, feeds: dict[str, Any], input_names: list[str]) -> list[Any]:
    """Torch outputs as numpy arrays, flattened in output order."""
    import torch

    try:
        with torch.inference_mode():
            out = model(*(torch.from_numpy(feeds[n]) for n in input_names))
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        return [t.detach().numpy() for t in flat]
    except Exception as e:  # the user's forward() failed on these inputs: name them, not a deploykit bug
        shapes = ", ".join(f"{n}={list(feeds[n].shape)} {feeds[n].dtype}" for n in input_names)
        raise ModelError(
            f"the torch model raised {type(e).__name__} on inputs {shapes}: {first_line(e)}",
            hint="deploykit feeds random values (floats N(0,1), integers 0-15, booleans); an input that "
            "needs other values (a mask, token ids) needs validation data",
        ) from e


def torch_name(config: Config) -> str:
    """The torch model as the user knows it, for messages: the factory, or the module passed in memory."""
    return config.source.memory.label if config.source.memory is not None else f"source.factory {config.source.factory}"
