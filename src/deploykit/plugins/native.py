"""The C++ CPU kernels (``libdeploykit_plugins_cpu.so``) called through their C ABI with ctypes.

The kernels validate every index themselves and report a message naming the tensor and position;
this binding adds what the C ABI cannot see (shapes that disagree, dtypes) using the op
descriptions, so the C++ path, the torch op and the ONNX path reject the same inputs.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import DataError, EnvironmentProblem, InternalError
from deploykit.plugins.descriptions import bind_shapes, check_dtypes, description, output_shape

CPU_LIBRARY = "libdeploykit_plugins_cpu.so"
ABI_VERSION = 1  # DEPLOYKIT_PLUGINS_ABI_VERSION in plugins/common/abi.h
_ERR_ARGUMENT, _ERR_INDEX = 1, 2
_F32, _I32 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32)


class BevPoolDims(ctypes.Structure):
    """``deploykit_bev_pool_dims`` (plugins/bev_pool/bev_pool.h)."""

    _fields_ = [
        (name, ctypes.c_int64)
        for name in (
            "batch",
            "cameras",
            "depth_bins",
            "height",
            "width",
            "channels",
            "num_points",
            "num_intervals",
            "bev_z",
            "bev_y",
            "bev_x",
        )
    ]


class PillarScatterDims(ctypes.Structure):
    """``deploykit_pillar_scatter_dims`` (plugins/pillar_scatter/pillar_scatter.h)."""

    _fields_ = [(name, ctypes.c_int64) for name in ("batch", "max_pillars", "channels", "grid_y", "grid_x")]


class CpuKernels:
    """The CPU library, loaded once per path; each op takes and returns numpy arrays.

    Raises (from each op):
        DataError: shapes or dtypes that disagree with the op description, or an index outside its
            tensor (the kernel's own message, naming the tensor and position).
    """

    def __init__(self, path: Path) -> None:
        try:
            self.lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise EnvironmentProblem(
                f"cannot load the plugin CPU library {path}: {e}", hint="build it with `deploykit plugins build`"
            ) from e
        self.path = Path(path)
        self.lib.deploykit_plugins_abi_version.restype = ctypes.c_int32
        version = self.lib.deploykit_plugins_abi_version()
        if version != ABI_VERSION:
            raise EnvironmentProblem(
                f"{path} has plugin ABI version {version}, this deploykit needs {ABI_VERSION}",
                hint="rebuild the plugins with `deploykit plugins build`",
            )
        self.lib.deploykit_bev_pool_v2_cpu.argtypes = [
            _F32,
            _F32,
            _I32,
            _I32,
            _I32,
            _I32,
            _I32,
            ctypes.POINTER(BevPoolDims),
            _F32,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        self.lib.deploykit_bev_pool_v2_cpu.restype = ctypes.c_int32
        self.lib.deploykit_pillar_scatter_cpu.argtypes = [
            _F32,
            _I32,
            _I32,
            ctypes.POINTER(PillarScatterDims),
            _F32,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        self.lib.deploykit_pillar_scatter_cpu.restype = ctypes.c_int32

    def bev_pool_v2(
        self,
        depth: Any,
        feat: Any,
        ranks_depth: Any,
        ranks_feat: Any,
        ranks_bev: Any,
        interval_starts: Any,
        interval_lengths: Any,
        bev_shape: tuple[int, int, int],
    ) -> np.ndarray:
        """BEVPoolV2 on float32 numpy arrays; returns (B, Z, Y, X, C)."""
        op = description("BEVPoolV2")
        arrays = _checked(op, (depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_starts, interval_lengths))
        symbols = bind_shapes(op, [a.shape for a in arrays], {"bev_shape": bev_shape})
        out = np.empty(output_shape(op, symbols), np.float32)
        s = symbols
        dims = BevPoolDims(s["B"], s["N"], s["D"], s["H"], s["W"], s["C"], s["P"], s["K"], s["Z"], s["Y"], s["X"])
        self._call(self.lib.deploykit_bev_pool_v2_cpu, arrays, dims, out)
        return out

    def pillar_scatter(self, features: Any, coords: Any, num_pillars: Any, grid: tuple[int, int]) -> np.ndarray:
        """PillarScatter on numpy arrays; returns (B, C, ny, nx)."""
        op = description("PillarScatter")
        arrays = _checked(op, (features, coords, num_pillars))
        symbols = bind_shapes(op, [a.shape for a in arrays], {"grid": grid})
        out = np.empty(output_shape(op, symbols), np.float32)
        dims = PillarScatterDims(symbols["B"], symbols["P"], symbols["C"], symbols["ny"], symbols["nx"])
        self._call(self.lib.deploykit_pillar_scatter_cpu, arrays, dims, out)
        return out

    @staticmethod
    def _call(fn: Any, arrays: list[np.ndarray], dims: ctypes.Structure, out: np.ndarray) -> None:
        err = ctypes.create_string_buffer(512)
        pointers = [a.ctypes.data_as(_F32 if a.dtype == np.float32 else _I32) for a in arrays]
        status = fn(*pointers, ctypes.byref(dims), out.ctypes.data_as(_F32), err, len(err))
        if status == _ERR_INDEX:
            raise DataError(
                err.value.decode(),
                hint="an index lies outside its tensor; fix the preprocessing that "
                "computes it (the CUDA plugin would skip it silently)",
            )
        if status != 0:  # argument errors mean this binding passed something the checks above should refuse
            raise InternalError(f"{fn.__name__} returned status {status}: {err.value.decode()}")


def _checked(op: Any, values: tuple[Any, ...]) -> list[np.ndarray]:
    """Contiguous arrays of the described dtypes; DataError names the first input that is not."""
    arrays = [np.asarray(v) for v in values]
    check_dtypes(op, [a.dtype.name for a in arrays], "cpu")
    return [np.ascontiguousarray(a) for a in arrays]


@functools.cache
def load_cpu_kernels(path: Path | None = None) -> CpuKernels:
    """The CPU library at ``path``, default the one ``deploykit plugins build`` wrote."""
    if path is None:
        from deploykit.plugins.build import default_build_dir

        path = default_build_dir() / CPU_LIBRARY
    if not Path(path).is_file():
        raise EnvironmentProblem(f"plugin CPU library {path} not found", hint="run `deploykit plugins build`")
    return CpuKernels(Path(path))
