"""``deploykit doctor``: what this machine can run, as rows of (component, status, detail).

Every probe is independent and never raises: a probe that fails becomes a ``warn`` or ``missing``
row saying why. Versions come from package metadata where importing would be slow (ModelOpt,
torch); TensorRT and ONNX Runtime are imported because what they can do matters, not just that
they are installed. ONNX Runtime's GPU build lists the CUDA and TensorRT execution providers even
on a machine without a GPU, so those rows say whether a driver and a GPU are actually there.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "missing", "warn"]
DEFAULT_PLUGIN_LIBRARY = Path("build/plugins/libdeploykit_plugins.so")


@dataclass(frozen=True)
class Row:
    component: str
    status: Status
    detail: str


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def add(self, component: str, status: Status, detail: str) -> None:
        self.rows.append(Row(component, status, detail))

    @property
    def ok(self) -> bool:
        """No component is in a ``warn`` state (``missing`` optional parts are fine)."""
        return all(r.status != "warn" for r in self.rows)

    def to_json(self) -> str:
        """The rows as a JSON document (``{"rows": [{"component", "status", "detail"}], "ok": bool}``)."""
        return json.dumps({"rows": [asdict(r) for r in self.rows], "ok": self.ok}, indent=2)


def collect(
    plugin_paths: Sequence[str | Path] = (), cwd: Path | None = None, probe: Callable[[], Any] | None = None
) -> Report:
    """Probe the environment.

    Args:
        plugin_paths: extra plugin libraries to look at, besides ``build/plugins/libdeploykit_plugins.so``.
        cwd: the folder the default plugin path is relative to (default: the current directory).
        probe: the CUDA driver probe (default :func:`deploykit.backends.trt_cuda.probe_driver`; tests pass a fake).
    """
    from deploykit.backends import trt_cuda

    report = Report()
    driver = _guard(report, "CUDA driver", probe or trt_cuda.probe_driver)
    _python_rows(report)
    _guard(report, "onnxruntime", lambda: _onnxruntime_rows(report, driver))
    _guard(report, "TensorRT", lambda: _tensorrt_row(report))
    _guard(report, "cuda-python", lambda: _cuda_python_row(report))
    _driver_rows(report, driver)
    _guard(report, "CUDA versions", lambda: _cuda_versions_row(report, driver))
    _guard(report, "backend tensorrt", lambda: _backend_row(report))
    _guard(report, "plugins", lambda: _plugin_rows(report, plugin_paths, cwd or Path.cwd(), driver))
    _guard(report, "TensorRT headers", lambda: _headers_row(report))
    return report


def _headers_row(report: Report) -> None:
    """Which TensorRT headers `deploykit plugins build` compiles the glue against, or where to get them."""
    from deploykit.plugins import trt_headers
    from deploykit.plugins.build import FETCHED_HEADERS
    from deploykit.plugins.descriptions import plugins_source

    installed = trt_headers.installed_tensorrt()
    headers = trt_headers.choose("", installed, trt_headers.candidates(plugins_source().parent / FETCHED_HEADERS))
    if headers.include_dir:
        report.add("TensorRT headers", "ok", f"{headers.include_dir}: {headers.why}")
    else:
        report.add(
            "TensorRT headers",
            "warn" if installed else "missing",
            headers.why if installed else f"{headers.why}; {trt_headers.published('11.x')}",
        )


def _backend_row(report: Report) -> None:
    """Whether ``--backend tensorrt`` works here, in the words the build would fail with."""
    from deploykit.backends.tensorrt import TensorRTBackend

    status = TensorRTBackend().availability()
    report.add(
        "backend tensorrt",
        "ok" if status.available else "missing",
        f"available (TensorRT {status.version})" if status.available else status.reason,
    )


def _guard(report: Report, component: str, fn: Callable[[], Any]) -> Any:
    # A doctor that crashes is useless exactly when it is needed: a failing probe becomes a row.
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        report.add(component, "warn", f"probe failed: {type(e).__name__}: {e}")
        return None


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _python_rows(report: Report) -> None:
    report.add("python", "ok", f"{platform.python_version()} ({sys.executable})")
    report.add(
        "deploykit",
        "ok" if _version("deploykit") else "warn",
        _version("deploykit") or "not installed as a package (running from a source tree?)",
    )
    for dist, label, hint in (
        ("onnx", "onnx", "reinstall deploykit"),
        ("nvidia-modelopt", "ModelOpt", "pip install 'deploykit[quant]' for ModelOpt quantization"),
        ("polygraphy", "polygraphy", "optional; pip install 'deploykit[tensorrt]'"),
    ):
        version = _version(dist)
        report.add(label, "ok" if version else "missing", version or f"not installed; {hint}")


def _onnxruntime_rows(report: Report, driver: Any) -> None:
    dist = "onnxruntime-gpu" if _version("onnxruntime-gpu") else "onnxruntime"
    try:
        import onnxruntime as ort
    except ImportError as e:
        report.add("onnxruntime", "warn", f"not importable ({e}); reinstall deploykit")
        return
    report.add("onnxruntime", "ok", f"{ort.__version__} ({dist})")
    for provider in ort.get_available_providers():
        status, detail = provider_usability(provider, driver)
        report.add(f"onnxruntime {provider}", status, detail)


_PROVIDER_NAMES = {
    "CPUExecutionProvider": "cpu",
    "CUDAExecutionProvider": "cuda",
    "TensorrtExecutionProvider": "tensorrt",
}


def provider_usability(provider: str, driver: Any) -> tuple[Status, str]:
    """Whether an ONNX Runtime execution provider can really run here, not just whether it is listed."""
    from deploykit.backends.onnxruntime import provider_status

    if provider not in _PROVIDER_NAMES:
        return "ok", "listed (not used by deploykit)"
    if provider == "CPUExecutionProvider":
        return "ok", "usable"
    if driver is None or driver.problem:
        why = driver.problem if driver is not None else "the CUDA driver probe failed"
        return "warn", f"listed by onnxruntime but unusable: {why}"
    if provider == "TensorrtExecutionProvider" and not _version("tensorrt"):
        return "warn", "listed by onnxruntime but unusable: TensorRT is not installed"
    status = provider_status(_PROVIDER_NAMES[provider])
    if not status.available:
        return "warn", f"listed by onnxruntime but a session falls back to CPU: {status.reason}"
    return "ok", f"usable (driver {driver.driver_version}, {len(driver.gpus)} GPU(s))"


def _tensorrt_row(report: Report) -> None:
    from deploykit.backends import trt_compat

    trt, problem = trt_compat.import_tensorrt()
    if trt is None:
        report.add("TensorRT", "missing", problem)
        return
    too_old = trt_compat.version_problem(trt.__version__)
    flavour = trt_compat.tensorrt_cuda_flavour()
    detail = f"{trt.__version__}" + (f" ({flavour})" if flavour else "")
    report.add("TensorRT", "warn" if too_old else "ok", too_old or detail)


def _cuda_python_row(report: Report) -> None:
    from deploykit.backends import trt_cuda

    cudart, problem = trt_cuda.import_cudart()
    if cudart is None:
        report.add("cuda-python", "missing", problem)
        return
    version = _version("cuda-python") or _version("cuda-bindings")
    runtime = trt_cuda.runtime_version(cudart)
    report.add("cuda-python", "ok", f"{version or 'installed'}" + (f", CUDA runtime {runtime}" if runtime else ""))


def _driver_rows(report: Report, driver: Any) -> None:
    if driver is None:
        return
    smi = shutil.which("nvidia-smi")
    devices = sorted(p.name for p in Path("/dev").glob("nvidia[0-9]*")) if Path("/dev").is_dir() else []
    seen = f"; nvidia-smi {'at ' + smi if smi else 'not on PATH'}; device nodes: {', '.join(devices) or 'none'}"
    if driver.problem:
        report.add("CUDA driver", "missing", driver.problem + seen)
        return
    report.add("CUDA driver", "ok", f"{driver.driver_version}{seen}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    for gpu in driver.gpus:
        report.add(
            f"GPU {gpu.index}",
            "ok",
            f"{gpu.name}, compute capability {gpu.compute_capability}, "
            f"{gpu.memory_bytes / 2**30:.1f} GiB" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible else ""),
        )


def _cuda_versions_row(report: Report, driver: Any) -> None:
    """The driver's CUDA against the CUDA majors of the TensorRT wheel and cuda-python (all three named)."""
    from deploykit.backends import trt_compat

    flavour, cuda_python = trt_compat.tensorrt_cuda_flavour(), trt_compat.cuda_python_version()
    if driver is None or driver.problem or not (flavour or cuda_python):
        return
    problem = trt_compat.cuda_version_problem(driver.driver_version, flavour, cuda_python)
    seen = (
        f"driver supports CUDA {driver.driver_version}; TensorRT wheel {flavour or 'not installed'}; "
        f"cuda-python {cuda_python or 'not installed'}"
    )
    if problem:
        report.add("CUDA versions", "warn", problem)
        return
    python_major = trt_compat.parse_version(cuda_python)[:1]
    if flavour and python_major and int(flavour.removeprefix("cu")) != python_major[0]:
        report.add(
            "CUDA versions",
            "warn",
            f"{seen}: TensorRT and cuda-python target different CUDA majors "
            f"(two CUDA runtimes in one process); install cuda-python {flavour.removeprefix('cu')}.x",
        )
        return
    report.add("CUDA versions", "ok", seen)


def plugin_candidates(plugin_paths: Iterable[str | Path], cwd: Path) -> list[Path]:
    """The default plugin library under ``cwd`` plus the given paths, without duplicates."""
    out: list[Path] = []
    for p in [cwd / DEFAULT_PLUGIN_LIBRARY, *(Path(x) if Path(x).is_absolute() else cwd / x for x in plugin_paths)]:
        if p.resolve() not in {q.resolve() for q in out}:
            out.append(p)
    return out


def _plugin_rows(report: Report, plugin_paths: Sequence[str | Path], cwd: Path, driver: Any) -> None:
    from deploykit.backends import trt_compat

    trt, why_not = trt_compat.import_tensorrt()
    if trt is not None and (driver is None or driver.problem):
        trt, why_not = None, driver.problem if driver is not None else "the CUDA driver probe failed"
    for path in plugin_candidates(plugin_paths, cwd):
        label = f"plugin {path.name}"
        if not path.is_file():
            given = path != cwd / DEFAULT_PLUGIN_LIBRARY
            report.add(
                label,
                "warn" if given else "missing",
                f"{path} not found" + ("" if given else "; build plugins with `deploykit plugins build`"),
            )
            continue
        if trt is None:
            report.add(label, "ok", f"{path} found; its plugins cannot be listed here: {why_not}")
            continue
        report.add(label, *_plugin_creators(trt, path))


def _plugin_creators(trt: Any, path: Path) -> tuple[Status, str]:
    from deploykit.backends import trt_plugins
    from deploykit.backends.trt_logger import get_logger
    from deploykit.errors import DeployKitError

    try:
        trt_plugins.init_builtin_plugins(trt, get_logger(trt))
        (lib,) = trt_plugins.load_libraries(trt, [path])
    except DeployKitError as e:
        return "warn", f"{path}: {e.message}"
    names = ", ".join(f"{name} v{version}" + (f" ({ns})" if ns else "") for name, version, ns in lib.creators)
    return "ok", f"{path} registers {len(lib.creators)} plugin(s): {names}"
