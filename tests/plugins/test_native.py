"""Native plugin code under plugins/: CPU kernels against numpy, CUDA and TensorRT builds, GPU check.

The CPU library is built once per session with CMake into a temporary folder and called through its
C ABI with ctypes. The CUDA kernels (sm_87 and sm_90 here, to keep the build short) and the TensorRT
glue are compiled where nvcc and TensorRT headers exist; the glue is then exercised without a GPU by
deploykit_trt_glue_check. The GPU test runs plugins/tools/gpu_check.sh and needs a GPU.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
CMAKE = shutil.which("cmake")
NVCC = shutil.which("nvcc")
TEST_ARCHS = "87;90"

needs_cmake = pytest.mark.skipif(CMAKE is None, reason="cmake not on PATH")
needs_nvcc = pytest.mark.skipif(CMAKE is None or NVCC is None, reason="cmake or nvcc not on PATH")


def _trt_include_dir() -> Path | None:
    """TensorRT headers: $TENSORRT_INCLUDE_DIR, $TENSORRT_ROOT/include, kernel-lens installed or fetched."""
    candidates = [os.environ.get("TENSORRT_INCLUDE_DIR")]
    if os.environ.get("TENSORRT_ROOT"):
        candidates.append(str(Path(os.environ["TENSORRT_ROOT"]) / "include"))
    spec = importlib.util.find_spec("kernel_lens")  # locates without importing (it would pull torch)
    if spec is not None and spec.submodule_search_locations:
        candidates.append(str(Path(spec.submodule_search_locations[0]) / "include" / "tensorrt"))
    candidates.append(str(ROOT / "build" / "kernel-lens" / "kernel_lens" / "include" / "tensorrt"))
    for candidate in candidates:
        if candidate and (Path(candidate) / "NvInferRuntime.h").is_file():
            return Path(candidate)
    return None


TRT_INCLUDE = _trt_include_dir()
needs_trt_headers = pytest.mark.skipif(
    TRT_INCLUDE is None,
    reason="TensorRT headers not found: set TENSORRT_INCLUDE_DIR or run plugins/tools/fetch_trt_headers.sh",
)


def _gpu_available() -> bool:
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def _run(cmd: list, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done


def _cmake(build_dir: Path, *options: str, targets: tuple[str, ...] = ()) -> None:
    """Configures plugins/ into build_dir with warnings as errors, then builds `targets` (all if empty)."""
    if not (build_dir / "CMakeCache.txt").exists():
        _run([CMAKE, "-S", PLUGINS, "-B", build_dir, "-DCMAKE_COMPILE_WARNING_AS_ERROR=ON", *options])
    build = [CMAKE, "--build", build_dir, "-j", str(os.cpu_count() or 2)]
    _run(build + (["--target", *targets] if targets else []))


# ---------------------------------------------------------------------------------------------
# ctypes bindings of the CPU library (the C ABI declared in plugins/*/<op>.h)


class BevPoolDims(ctypes.Structure):
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
    _fields_ = [(name, ctypes.c_int64) for name in ("batch", "max_pillars", "channels", "grid_y", "grid_x")]


class NativeError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"status {status}: {message}")
        self.status = status
        self.message = message


ERR_ARGUMENT, ERR_INDEX = 1, 2
_F32, _I32 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32)


class CpuKernels:
    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.deploykit_plugins_abi_version.restype = ctypes.c_int32
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

    @staticmethod
    def _check(status: int, err: ctypes.Array) -> None:
        if status != 0:
            raise NativeError(status, err.value.decode())

    def bev_pool(self, depth, feat, ranks_depth, ranks_feat, ranks_bev, starts, lengths, bev_shape, out=None):
        """Returns (B, Z, Y, X, C); `out` (prefilled by tests) must stay untouched on error."""
        depth, feat = (np.ascontiguousarray(a, np.float32) for a in (depth, feat))
        ints = [np.ascontiguousarray(a, np.int32) for a in (ranks_depth, ranks_feat, ranks_bev, starts, lengths)]
        (b, n, d, h, w), c = depth.shape, feat.shape[-1]
        dims = BevPoolDims(b, n, d, h, w, c, len(ints[0]), len(ints[3]), *bev_shape)
        if out is None:
            out = np.full((b, *bev_shape, c), np.nan, np.float32)
        err = ctypes.create_string_buffer(512)
        status = self.lib.deploykit_bev_pool_v2_cpu(
            depth.ctypes.data_as(_F32),
            feat.ctypes.data_as(_F32),
            *(a.ctypes.data_as(_I32) for a in ints),
            ctypes.byref(dims),
            out.ctypes.data_as(_F32),
            err,
            len(err),
        )
        self._check(status, err)
        return out

    def pillar_scatter(self, features, coords, num_pillars, grid, out=None):
        """Returns (B, C, ny, nx); `out` (prefilled by tests) must stay untouched on error."""
        features = np.ascontiguousarray(features, np.float32)
        coords, num_pillars = (np.ascontiguousarray(a, np.int32) for a in (coords, num_pillars))
        b, p, c = features.shape
        dims = PillarScatterDims(b, p, c, *grid)
        if out is None:
            out = np.full((b, c, *grid), np.nan, np.float32)
        err = ctypes.create_string_buffer(512)
        status = self.lib.deploykit_pillar_scatter_cpu(
            features.ctypes.data_as(_F32),
            coords.ctypes.data_as(_I32),
            num_pillars.ctypes.data_as(_I32),
            ctypes.byref(dims),
            out.ctypes.data_as(_F32),
            err,
            len(err),
        )
        self._check(status, err)
        return out


@pytest.fixture(scope="session")
def cpu(tmp_path_factory) -> CpuKernels:
    if CMAKE is None:
        pytest.skip("cmake not on PATH")
    build = tmp_path_factory.mktemp("plugins-cpu")
    _cmake(build, "-DDEPLOYKIT_WITH_CUDA=OFF", targets=("deploykit_plugins_cpu",))
    return CpuKernels(build / "libdeploykit_plugins_cpu.so")


# ---------------------------------------------------------------------------------------------
# numpy references and input generators


def bev_pool_reference(depth, feat, ranks_depth, ranks_feat, ranks_bev, starts, lengths, bev_shape):
    """float64 BEVPoolV2: every point of interval k adds depth * feat to the cell of ranks_bev[start_k]."""
    c = feat.shape[-1]
    out = np.zeros((depth.shape[0] * int(np.prod(bev_shape)), c))
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    owner_start = np.repeat(starts, lengths)
    points = owner_start + np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    weights = depth.reshape(-1)[ranks_depth[points]].astype(np.float64)
    np.add.at(out, ranks_bev[owner_start], weights[:, None] * feat.reshape(-1, c)[ranks_feat[points]])
    return out.reshape(depth.shape[0], *bev_shape, c)


def pillar_scatter_reference(features, coords, num_pillars, grid):
    """float64 PillarScatter: live pillar p of row b adds its features at (y, x); coords[..., :2] unused."""
    b, _, c = features.shape
    out = np.zeros((b, c, *grid))
    for row in range(b):
        live = slice(0, num_pillars[row])
        np.add.at(out[row].transpose(1, 2, 0), (coords[row, live, 2], coords[row, live, 3]), features[row, live])
    return out


def make_bev_inputs(rng, b, n, d, h, w, c, bev_shape, keep=0.7, messy=False):
    """Frustum points sent to random cells of their batch, sorted into intervals like BEVDet.

    `messy` splits runs into two intervals sharing a cell, adds zero-length intervals and leaves some
    points outside every interval.
    """
    depth = rng.random((b, n, d, h, w), dtype=np.float32)
    feat = rng.standard_normal((b, n, h, w, c), dtype=np.float32)
    ranks = np.flatnonzero(rng.random(depth.size) < keep)
    bi, ni, _, hi, wi = np.unravel_index(ranks, depth.shape)
    cells = int(np.prod(bev_shape))
    ranks_bev = bi * cells + rng.integers(0, cells, ranks.size)
    order = np.argsort(ranks_bev, kind="stable")
    ranks_depth, ranks_bev = ranks[order], ranks_bev[order]
    ranks_feat = np.ravel_multi_index((bi, ni, hi, wi), (b, n, h, w))[order]
    boundaries = np.flatnonzero(np.diff(ranks_bev)) + 1
    starts = np.concatenate([[0], boundaries]) if ranks.size else np.zeros(0, np.int64)
    lengths = np.diff(np.concatenate([starts, [ranks.size]]))
    if messy:
        halves = lengths // 2
        split = halves > 0
        starts = np.concatenate([starts, starts[split] + halves[split]])
        lengths = np.concatenate([np.where(split, halves, lengths), lengths[split] - halves[split]])
        starts = np.concatenate([starts, rng.integers(0, ranks.size + 1, 5)])
        lengths = np.concatenate([lengths, np.zeros(5, np.int64)])
        keep_interval = rng.random(starts.size) < 0.9
        starts, lengths = starts[keep_interval], lengths[keep_interval]
    ints = (np.asarray(a, np.int32) for a in (ranks_depth, ranks_feat, ranks_bev, starts, lengths))
    return depth, feat, *ints


def make_pillar_inputs(rng, b, p, c, grid, num_pillars, duplicates=False):
    """Live pillars on distinct cells (grid corners first); padding and the batch column hold garbage."""
    ny, nx = grid
    features = rng.standard_normal((b, p, c), dtype=np.float32)
    coords = np.full((b, p, 4), -7, np.int32)  # padding: off the grid, must be ignored
    corners = [0, nx - 1, (ny - 1) * nx, ny * nx - 1]
    for row in range(b):
        rest = rng.permutation(np.setdiff1d(np.arange(ny * nx), corners))
        cells = np.concatenate([np.unique(corners), rest])[: num_pillars[row]]
        if duplicates:
            cells[4::5] = cells[3::5][: len(cells[4::5])]
        live = len(cells)
        coords[row, :live, 0] = rng.integers(-5, 50, live)  # the batch column is not read
        coords[row, :live, 1] = 0
        coords[row, :live, 2], coords[row, :live, 3] = np.divmod(cells, nx)
    return features, coords, np.asarray(num_pillars, np.int32)


# ---------------------------------------------------------------------------------------------
# CPU kernels


def test_abi_version(cpu):
    assert cpu.lib.deploykit_plugins_abi_version() == 1


BEV_SHAPES = {
    "tiny": (1, 1, 1, 1, 1, 1, (1, 1, 1)),
    "B2-C16": (2, 2, 8, 4, 6, 16, (1, 8, 8)),
    "C1-Z2": (1, 3, 5, 3, 4, 1, (2, 3, 3)),
    "B2-C80": (2, 2, 10, 4, 8, 80, (1, 16, 16)),
}


@pytest.mark.parametrize("messy", [False, True], ids=["clean", "messy"])
@pytest.mark.parametrize("shape", BEV_SHAPES.values(), ids=BEV_SHAPES.keys())
def test_bev_pool_matches_reference(cpu, shape, messy):
    *sizes, bev_shape = shape
    inputs = make_bev_inputs(np.random.default_rng(0), *sizes, bev_shape, keep=0.8, messy=messy)
    got = cpu.bev_pool(*inputs, bev_shape)
    np.testing.assert_allclose(got, bev_pool_reference(*inputs, bev_shape), rtol=1e-5, atol=1e-5)


def test_bev_pool_by_hand(cpu):
    """Two intervals sharing cell 3 are summed, an empty interval adds nothing, cells 0-2 stay zero."""
    depth = np.array([0.5, 2.0, 1.0], np.float32).reshape(1, 1, 3, 1, 1)
    feat = np.array([[1.0, -1.0]], np.float32).reshape(1, 1, 1, 1, 2)
    ranks_depth, ranks_feat, ranks_bev = [0, 1, 2], [0, 0, 0], [3, 3, 3]
    got = cpu.bev_pool(depth, feat, ranks_depth, ranks_feat, ranks_bev, [0, 1, 3], [1, 2, 0], (1, 2, 2))
    expected = np.zeros((1, 1, 2, 2, 2), np.float32)
    expected[0, 0, 1, 1] = [3.5, -3.5]  # (0.5 + 2 + 1) * feat
    np.testing.assert_array_equal(got, expected)


def test_bev_pool_without_points_or_intervals_is_zero(cpu):
    depth, feat = np.ones((1, 2, 3, 2, 2), np.float32), np.ones((1, 2, 2, 2, 4), np.float32)
    empty = np.zeros(0, np.int32)
    np.testing.assert_array_equal(cpu.bev_pool(depth, feat, empty, empty, empty, empty, empty, (1, 3, 3)), 0)
    # Zero-length intervals may start at P (here 0).
    zeros = np.zeros(2, np.int32)
    np.testing.assert_array_equal(cpu.bev_pool(depth, feat, empty, empty, empty, zeros, zeros, (1, 3, 3)), 0)


@pytest.mark.parametrize(
    ("tensor", "value", "message"),
    [
        ("ranks_depth", 24, r"ranks_depth\[5\] = 24 is outside \[0, 24\) \(B\*N\*D\*H\*W\)"),
        ("ranks_depth", -1, r"ranks_depth\[5\] = -1 is outside \[0, 24\)"),
        ("ranks_feat", 8, r"ranks_feat\[5\] = 8 is outside \[0, 8\) \(B\*N\*H\*W\)"),
        ("ranks_bev", 18, r"ranks_bev\[5\] = 18 is outside \[0, 18\) \(B\*Z\*Y\*X\)"),
    ],
)
def test_bev_pool_rejects_rank_out_of_range(cpu, tensor, value, message):
    inputs = dict(
        zip(
            ("depth", "feat", "ranks_depth", "ranks_feat", "ranks_bev", "starts", "lengths"),
            make_bev_inputs(np.random.default_rng(1), 1, 2, 3, 2, 2, 4, (2, 3, 3), keep=1.0),
            strict=True,
        )
    )
    inputs[tensor][5] = value
    out = np.full((1, 2, 3, 3, 4), np.nan, np.float32)
    with pytest.raises(NativeError, match=message) as caught:
        cpu.bev_pool(*inputs.values(), (2, 3, 3), out=out)
    assert caught.value.status == ERR_INDEX
    assert np.isnan(out).all(), "the output must not be written on error"


@pytest.mark.parametrize(
    ("start", "length", "message"),
    [
        (20, 5, r"interval 2 \(interval_starts\[2\] = 20, interval_lengths\[2\] = 5\) is outside the 24 points"),
        (3, -1, r"interval 2 \(interval_starts\[2\] = 3, interval_lengths\[2\] = -1\)"),
        (-1, 1, r"interval 2 \(interval_starts\[2\] = -1, interval_lengths\[2\] = 1\)"),
    ],
)
def test_bev_pool_rejects_interval_outside_points(cpu, start, length, message):
    depth, feat, rd, rf, rb, starts, lengths = make_bev_inputs(
        np.random.default_rng(2), 1, 2, 3, 2, 2, 4, (1, 3, 3), keep=1.0
    )
    starts[2], lengths[2] = start, length
    with pytest.raises(NativeError, match=message) as caught:
        cpu.bev_pool(depth, feat, rd, rf, rb, starts, lengths, (1, 3, 3))
    assert caught.value.status == ERR_INDEX


def test_negative_sizes_are_argument_errors(cpu):
    err = ctypes.create_string_buffer(256)
    out = np.zeros(1, np.float32)
    dims = BevPoolDims(1, 1, 1, 1, 1, 1, 0, 0, 1, -2, 1)
    status = cpu.lib.deploykit_bev_pool_v2_cpu(
        None, None, None, None, None, None, None, ctypes.byref(dims), out.ctypes.data_as(_F32), err, len(err)
    )
    assert (status, err.value.decode()) == (ERR_ARGUMENT, "BEVPoolV2: size Y = -2 is negative")
    pillar_dims = PillarScatterDims(1, -3, 1, 1, 1)
    status = cpu.lib.deploykit_pillar_scatter_cpu(
        None, None, None, ctypes.byref(pillar_dims), out.ctypes.data_as(_F32), err, len(err)
    )
    assert (status, err.value.decode()) == (ERR_ARGUMENT, "PillarScatter: size P = -3 is negative")


def test_null_buffer_is_an_argument_error(cpu):
    err = ctypes.create_string_buffer(256)
    dims = PillarScatterDims(1, 2, 3, 4, 5)
    status = cpu.lib.deploykit_pillar_scatter_cpu(None, None, None, ctypes.byref(dims), None, err, len(err))
    assert (status, err.value.decode()) == (ERR_ARGUMENT, "PillarScatter: features is NULL but has 6 elements")


PILLAR_CASES = {
    "B2-full-and-empty": (2, 100, 8, (10, 12), [100, 0]),
    "B3-partial": (3, 64, 5, (9, 8), [60, 64, 33]),
    "one-cell": (1, 1, 3, (1, 1), [1]),
    "no-pillars": (2, 16, 4, (5, 6), [0, 0]),
    "C64-wide": (1, 300, 64, (20, 40), [300]),
}


@pytest.mark.parametrize("duplicates", [False, True], ids=["unique", "duplicates"])
@pytest.mark.parametrize("case", PILLAR_CASES.values(), ids=PILLAR_CASES.keys())
def test_pillar_scatter_matches_reference(cpu, case, duplicates):
    b, p, c, grid, live = case
    inputs = make_pillar_inputs(np.random.default_rng(3), b, p, c, grid, live, duplicates)
    got = cpu.pillar_scatter(*inputs, grid)
    np.testing.assert_allclose(got, pillar_scatter_reference(*inputs, grid), rtol=1e-6, atol=1e-6)


def test_pillar_scatter_by_hand(cpu):
    """Row 0: two pillars on (1, 2) are summed, one on the corner (2, 3); the padding row is ignored;
    row 1 has no live pillar although its coords say batch 0."""
    features = np.array([[[1, 10], [2, 20], [4, 40], [9, 9]], [[5, 5], [6, 6], [7, 7], [8, 8]]], np.float32)
    coords = np.array([[[0, 0, 1, 2], [0, 0, 1, 2], [1, 0, 2, 3], [0, 0, 99, 99]], [[0, 0, 0, 0]] * 4], np.int32)
    got = cpu.pillar_scatter(features, coords, [3, 0], (3, 4))
    expected = np.zeros((2, 2, 3, 4), np.float32)
    expected[0, :, 1, 2] = [3, 30]
    expected[0, :, 2, 3] = [4, 40]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            2,
            10,
            r"coords\[1, 3\] = \(-?\d+, 0, 10, \d+\) puts \(y, x\) = \(10, \d+\) "
            r"outside the grid \(ny, nx\) = \(10, 12\)",
        ),
        (3, -1, r"coords\[1, 3\] = \(-?\d+, 0, \d+, -1\) puts \(y, x\) = \(\d+, -1\) outside the grid"),
    ],
)
def test_pillar_scatter_rejects_coordinate_outside_grid(cpu, field, value, message):
    features, coords, num_pillars = make_pillar_inputs(np.random.default_rng(4), 2, 8, 3, (10, 12), [8, 5])
    coords[1, 3, field] = value
    out = np.full((2, 3, 10, 12), np.nan, np.float32)
    with pytest.raises(NativeError, match=message) as caught:
        cpu.pillar_scatter(features, coords, num_pillars, (10, 12), out=out)
    assert caught.value.status == ERR_INDEX
    assert np.isnan(out).all(), "the output must not be written on error"


@pytest.mark.parametrize("count", [9, -1])
def test_pillar_scatter_rejects_num_pillars_outside_range(cpu, count):
    features, coords, _ = make_pillar_inputs(np.random.default_rng(5), 2, 8, 3, (10, 12), [8, 8])
    with pytest.raises(NativeError, match=rf"num_pillars\[1\] = {count} is outside \[0, P = 8\]"):
        cpu.pillar_scatter(features, coords, [8, count], (10, 12))


# ---------------------------------------------------------------------------------------------
# Op description files


def _op_descriptions() -> dict[str, dict]:
    return {path.parent.name: yaml.safe_load(path.read_text()) for path in sorted(PLUGINS.glob("*/*.yaml"))}


def test_op_descriptions_are_complete():
    ops = _op_descriptions()
    assert set(ops) == {"bev_pool", "pillar_scatter"}
    for folder, op in ops.items():
        assert op["plugin"] == {"name": op["name"], "version": "1", "namespace": "deploykit"}, folder
        bound = {s for i in op["inputs"] for s in i["shape"] if isinstance(s, str)}
        for attribute in op["attributes"]:
            assert attribute["type"] == "ints" and attribute["length"] == len(attribute["binds"]), folder
            bound |= set(attribute["binds"])
        for tensor in op["inputs"] + op["outputs"]:
            assert tensor["dtype"] in {"int32", *op["types"]}, (folder, tensor["name"])
        for output in op["outputs"]:
            unbound = {s for s in output["shape"] if isinstance(s, str)} - bound
            assert not unbound, f"{folder}: output dims {unbound} are bound by no input or attribute"


# ---------------------------------------------------------------------------------------------
# CUDA and TensorRT builds (no GPU needed)


@pytest.fixture(scope="session")
def cuda_build(tmp_path_factory) -> Path:
    """A configured build with the CUDA kernels for TEST_ARCHS, plus the TensorRT glue when headers exist."""
    if CMAKE is None or NVCC is None:
        pytest.skip("cmake or nvcc not on PATH")
    build = tmp_path_factory.mktemp("plugins-cuda")
    options = [f"-DCMAKE_CUDA_ARCHITECTURES={TEST_ARCHS}"]
    if TRT_INCLUDE is not None:
        options.append(f"-DTENSORRT_INCLUDE_DIR={TRT_INCLUDE}")
    _run(
        [
            CMAKE,
            "-S",
            PLUGINS,
            "-B",
            build,
            "-DCMAKE_COMPILE_WARNING_AS_ERROR=ON",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
            *options,
        ]
    )
    return build


@pytest.mark.e2e
@needs_nvcc
def test_default_cuda_architectures_include_thor(tmp_path):
    build = tmp_path / "build"
    env = {k: v for k, v in os.environ.items() if k != "CUDAARCHS"}  # CMake's own default source
    _run([CMAKE, "-S", PLUGINS, "-B", build], env=env)
    cache = (build / "CMakeCache.txt").read_text()
    archs = re.search(r"^CMAKE_CUDA_ARCHITECTURES:STRING=(.*)$", cache, re.M).group(1).split(";")
    listed = _run([NVCC, "--list-gpu-arch"]).stdout
    thor = ["110"] if "compute_110" in listed else ["101"] if "compute_101" in listed else []
    assert archs == ["80", "86", "87", "89", "90", *thor]


@pytest.mark.e2e
@needs_nvcc
def test_cuda_kernels_compile(cuda_build):
    _cmake(cuda_build, targets=("deploykit_plugins_cuda", "deploykit_gpu_check"))
    lib = ctypes.CDLL(str(cuda_build / "libdeploykit_plugins_cuda.so"))  # loads without a GPU
    assert lib.deploykit_bev_pool_v2_cuda and lib.deploykit_pillar_scatter_cuda
    commands = json.loads((cuda_build / "compile_commands.json").read_text())
    cu = [c["command"] for c in commands if c["file"].endswith(".cu")]
    assert len(cu) == 2
    for arch in TEST_ARCHS.split(";"):
        assert all(f"code=[compute_{arch},sm_{arch}]" in command for command in cu), arch


@pytest.mark.e2e
@needs_nvcc
@needs_trt_headers
def test_tensorrt_glue_compiles_and_behaves(cuda_build):
    _cmake(cuda_build, targets=("deploykit_plugins", "deploykit_trt_glue_check"))
    # ctypes binds every symbol at load (RTLD_NOW): this proves the library needs no libnvinfer.
    lib = ctypes.CDLL(str(cuda_build / "libdeploykit_plugins.so"))
    assert lib.getCreators and lib.setLoggerFinder  # what IPluginRegistry::loadLibrary looks up
    done = _run([cuda_build / "deploykit_trt_glue_check"])
    creators = {c["name"]: c for c in json.loads(done.stdout)["creators"]}
    for op in _op_descriptions().values():
        creator = creators.pop(op["plugin"]["name"])
        assert (creator["version"], creator["namespace"]) == (op["plugin"]["version"], op["plugin"]["namespace"])
        assert creator["fields"] == [
            {"name": a["name"], "type": "int32", "length": a["length"]} for a in op["attributes"]
        ]
    assert not creators, f"creators without an op description: {sorted(creators)}"
    # The library records the headers it was compiled against, read back from the file without loading it.
    from deploykit.backends.trt_plugins import built_against
    from deploykit.plugins.trt_headers import header_version

    assert built_against(cuda_build / "libdeploykit_plugins.so") == header_version(TRT_INCLUDE)
    assert json.loads(done.stdout)["tensorrt_headers"] == list(header_version(TRT_INCLUDE))


# ---------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not _gpu_available(), reason="no NVIDIA GPU (nvidia-smi missing or failing)")
@needs_nvcc
def test_cuda_matches_cpu_on_gpu(tmp_path):
    results = tmp_path / "gpu_check.json"
    env = {**os.environ, "BUILD_DIR": str(tmp_path / "build")}
    done = subprocess.run([PLUGINS / "tools" / "gpu_check.sh", results], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(results.read_text())
    assert report["ok"]
    assert {(r["op"], r["dtype"]) for r in report["results"]} == {
        (op, dtype) for op in ("BEVPoolV2", "PillarScatter") for dtype in ("float32", "float16")
    }
