"""Fuzzing the edges deploykit reads from: configs, matrix files, YAML text, ``--set`` values, small
random ONNX graphs and byte mutations of a valid model. Each run must end in success or a DeployKitError with
its exit code: never another exception, a signal or a hang.

Configs and ``--set`` run in this process (the loaders are pure Python). Models go through the
``deploykit`` CLI in a long-lived worker process (see worker.py): onnx's checker and shape inference
and ONNX Runtime are native code, where a crash is a signal, not an exception.

The default suite runs a bounded, derandomized set (about 200 examples, the same every run);
``make fuzz`` runs the ``fuzz`` profile (random, many more examples, failures kept in build/).
Found and fixed so far: see FINDINGS at the end of this file.
"""

from __future__ import annotations

import dataclasses
import math
import os
import textwrap
import typing
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from deploykit.config import Config, config_from_dict, load_config
from deploykit.config.load import load_yaml
from deploykit.errors import DeployKitError
from deploykit.store.artifacts import RUN_NAME
from tests.fuzz.harness import Worker
from tests.hostile import models
from tests.hostile.conftest import CONFIG

settings.register_profile(
    "default",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "fuzz",
    derandomize=False,
    deadline=None,
    max_examples=int(os.environ.get("DEPLOYKIT_FUZZ_EXAMPLES", "2000")),
    database=DirectoryBasedExampleDatabase(str(Path(__file__).parents[2] / "build" / "hypothesis")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
PROFILE = os.environ.get("DEPLOYKIT_FUZZ_PROFILE", "default")
settings.load_profile(PROFILE)


def _examples(n: int) -> settings:
    """``n`` examples in the default profile; the fuzz profile's own (larger) count otherwise."""
    return settings(max_examples=n) if PROFILE == "default" else settings()


# -- configs --------------------------------------------------------------------------------------


def _paths(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key a Config can hold (dataclass fields, recursively)."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        path = f"{prefix}{f.name}"
        out.append(path)
        tp = hints[f.name]
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)] or (
            [tp] if dataclasses.is_dataclass(tp) else []
        )
        for sub in inner:
            out += _paths(sub, f"{path}.")
    return out


PATHS = _paths(Config)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.integers(-3, 100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "../../x",
            "/abs",
            "",
            "a" * 300,
            "batch",
            "x",
            "fp32",
            "int8",
            "1e-3",
            "nan",
            ".inf",
            "max",
            "auto",
            "module:fn",
        ]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.sampled_from(PATHS), inner, max_size=4)
    ),
    max_leaves=12,
)


def _valid() -> dict:
    return yaml.safe_load(textwrap.dedent(CONFIG))


def _set(raw: dict, dotted: str, value: object) -> None:
    node = raw
    *parents, leaf = dotted.split(".")
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[leaf] = value


def _check_config(cfg: Config) -> None:
    """What a config that loads must satisfy, whatever it came from."""
    assert RUN_NAME.fullmatch(cfg.name)

    def walk(v: object, where: str) -> None:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                walk(getattr(v, f.name), f"{where}.{f.name}")
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{where}.{k}")
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, f"{where}[{i}]")
        elif isinstance(v, float):
            assert not math.isnan(v), where

    walk(cfg, "config")


@_examples(60)
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=4))
def test_random_config_edits_load_or_fail_cleanly(edits):
    raw = _valid()
    for path, value in edits:
        _set(raw, path, value)
    try:
        _check_config(config_from_dict(raw))
    except DeployKitError as e:
        assert e.exit_code == 2 and e.message


@_examples(30)
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3))
def test_random_configs_through_a_file(edits, tmp_path_factory):
    raw = _valid()
    for path, value in edits:
        _set(raw, path, value)
    text = _dumped(raw)
    if text is None:
        return
    path = tmp_path_factory.mktemp("cfg") / "deploykit.yaml"
    path.write_text(text)
    (path.parent / "model.onnx").write_bytes(b"")
    try:
        _check_config(load_config(path))
    except DeployKitError as e:
        assert e.exit_code == 2 and e.message


def _dumped(raw: dict) -> str | None:
    """``raw`` as YAML text, or None where PyYAML cannot write it (the case is then not a file)."""
    try:
        return yaml.safe_dump(raw, allow_unicode=True)
    except yaml.YAMLError:
        return None


YAML_TOKENS = st.sampled_from(
    [
        "&a ",
        "*a",
        "*b",
        "&b ",
        "[",
        "]",
        "{",
        "}",
        ": ",
        ", ",
        "- ",
        "\n",
        "\n  ",
        "\n    ",
        "!!python/object:os.system ",
        "!!binary ",
        "!!set ",
        "<<: ",
        "? ",
        "'",
        '"',
        "#",
        "|",
        ">",
        "name",
        "gate",
        "x",
        "1",
        ".inf",
        ".nan",
        "1e309",
        "9" * 40,
        "~",
        "\t",
        "\\u0000",
        "%YAML 1.1\n",
        "---\n",
        "...\n",
        "\xff",
        "\U0001f600",
    ]
)


@_examples(40)
@given(text=st.one_of(st.text(max_size=200), st.lists(YAML_TOKENS, max_size=40).map("".join)))
def test_random_yaml_text(text):
    try:
        load_yaml(text, "fuzz.yaml")
    except DeployKitError as e:
        assert e.exit_code == 2 and e.message.startswith("fuzz.yaml")


@_examples(40)
@given(
    key=st.one_of(st.sampled_from(PATHS), st.text(max_size=20)),
    value=st.one_of(st.text(max_size=60), st.lists(YAML_TOKENS, max_size=12).map("".join)),
)
def test_random_set_values(key, value, tmp_path_factory):
    from deploykit.cli.app import parse_sets

    folder = tmp_path_factory.mktemp("set")
    cfg = folder / "deploykit.yaml"
    cfg.write_text(textwrap.dedent(CONFIG))
    try:
        _check_config(load_config(cfg, parse_sets([f"{key}={value}"])))
    except DeployKitError as e:
        assert e.exit_code == 2 and e.message


# -- matrix files ---------------------------------------------------------------------------------

MATRIX_KEYS = [
    "models",
    "precisions",
    "targets",
    "store",
    "overrides",
    "retries",
    "transfer",
    "models[0]",
    "models[0].name",
    "models[0].overrides",
    "models[0].config",
    "targets[0]",
    "targets[0].name",
    "targets[0].backend",
    "targets[0].resources",
    "targets[0].resources.CPU",
    "targets[0].accelerator_type",
    "targets[0].overrides",
]
MATRIX = {
    "models": [{"config": "deploykit.yaml", "name": "conv"}],
    "precisions": ["fp32"],
    "targets": [{"name": "cpu", "backend": "onnxruntime", "resources": {"CPU": 1}}],
}


def _matrix_set(raw: dict, dotted: str, value: object) -> None:
    node: object = raw
    *parents, leaf = dotted.replace("[0]", ".0").split(".")
    for key in parents:
        node = (
            node[int(key)]
            if key == "0" and isinstance(node, list) and node
            else node.setdefault(key, {})
            if isinstance(node, dict)
            else None
        )
        if not isinstance(node, (dict, list)):
            return
    if isinstance(node, dict):
        node[leaf] = value
    elif isinstance(node, list) and node and leaf == "0":
        node[0] = value


def _check_matrix(spec: object) -> None:
    """What a matrix that loads must satisfy."""
    from deploykit.matrix.spec import _NAME, MAX_CELLS

    assert len(spec.models) * len(spec.precisions) * len(spec.targets) <= MAX_CELLS
    for t in spec.targets:
        assert _NAME.fullmatch(t.name) and all(math.isfinite(v) and v >= 0 for v in t.resources.values())
    for e in spec.entries():
        assert e.name is None or _NAME.fullmatch(e.name)


@pytest.fixture(scope="module")
def matrix_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("matrix")
    (folder / "deploykit.yaml").write_text(textwrap.dedent(CONFIG))
    return folder


@_examples(60)
@given(edits=st.lists(st.tuples(st.sampled_from(MATRIX_KEYS), VALUES), min_size=1, max_size=4))
def test_random_matrix_edits_load_or_fail_cleanly(edits, matrix_folder):
    import copy

    raw = copy.deepcopy(MATRIX)
    for key, value in edits:
        _matrix_set(raw, key, value)
    text = _dumped(raw)
    if text is not None:
        _matrix_loads_or_is_refused(matrix_folder / "matrix.yaml", text.encode())


def _matrix_loads_or_is_refused(path: Path, data: bytes) -> None:
    """``data`` as a matrix file loads (and holds what a loaded one must) or is a ConfigError naming it."""
    from deploykit.matrix.spec import load_matrix

    path.write_bytes(data)
    try:
        _check_matrix(load_matrix(path))
    except DeployKitError as e:
        assert e.exit_code == 2 and e.message.startswith(str(path)), e.message


MATRIX_TOKENS = YAML_TOKENS | st.sampled_from(
    ["models", "targets", "precisions", "overrides", "resources", "CPU", "name", "config", "deploykit.yaml", "fp32"]
)


@_examples(40)
@given(
    data=st.one_of(
        st.text(max_size=200).map(str.encode),
        st.binary(max_size=200),
        st.lists(MATRIX_TOKENS, max_size=40).map(lambda t: "".join(t).encode()),
    )
)
def test_random_matrix_bytes(data, matrix_folder):
    _matrix_loads_or_is_refused(matrix_folder / "bytes.yaml", data)


# -- models ---------------------------------------------------------------------------------------

OPS = [
    "Relu",
    "Add",
    "Mul",
    "MatMul",
    "Conv",
    "Reshape",
    "Transpose",
    "Concat",
    "Slice",
    "Gather",
    "Range",
    "ConstantOfShape",
    "Expand",
    "Resize",
    "Softmax",
    "ReduceMean",
    "Cast",
    "Split",
    "Pad",
    "TopK",
    "Einsum",
    "Identity",
    "Shape",
    "Tile",
    "Where",
    "Sigmoid",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Custom",
]


@st.composite
def graphs(draw: st.DrawFn) -> bytes:
    """A small random graph: mostly ill-typed or ill-shaped, sometimes valid."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    elem = draw(st.sampled_from([TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT16, TensorProto.BOOL]))
    shape = draw(st.lists(st.one_of(st.integers(0, 5), st.sampled_from(["n", "m", -1])), min_size=0, max_size=4))
    tensors, nodes, inits = ["x"], [], []
    for i in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(OPS))
        ins = [draw(st.sampled_from(tensors)) for _ in range(draw(st.integers(0, 3)))]
        if draw(st.booleans()):
            dims = draw(st.lists(st.integers(0, 4), max_size=3))
            inits.append(
                numpy_helper.from_array(
                    rng.standard_normal(dims).astype(np.float32) if draw(st.booleans()) else rng.integers(-3, 4, dims),
                    f"w{i}",
                )
            )
            ins.append(f"w{i}")
        attrs = draw(
            st.dictionaries(
                st.sampled_from(
                    ["axis", "axes", "perm", "kernel_shape", "pads", "to", "k", "equation", "mode", "keepdims", "value"]
                ),
                st.one_of(
                    st.integers(-5, 5),
                    st.lists(st.integers(-3, 5), min_size=1, max_size=4),
                    st.sampled_from(["ij,jk->ik", "nearest", "", "...,...->"]),
                ),
                max_size=2,
            )
        )
        domain = "custom.fuzz" if op == "Custom" else ""
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"n{i}", domain=domain, **attrs))
        tensors.append(f"t{i}")
    out_shape = draw(st.one_of(st.none(), st.lists(st.integers(1, 4), max_size=3)))
    graph = helper.make_graph(
        nodes,
        "fuzz",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info(tensors[-1], TensorProto.FLOAT, out_shape)],
        inits,
    )
    opsets = [helper.make_opsetid("", draw(st.sampled_from([13, 17, 18, 21])))]
    if any(n.domain for n in nodes):
        opsets.append(helper.make_opsetid("custom.fuzz", 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = draw(st.sampled_from([7, 8, 10]))
    return model.SerializeToString()


@st.composite
def mutations(draw: st.DrawFn) -> bytes:
    """A valid model's bytes with a few flipped, inserted, deleted or truncated."""
    data = bytearray(models.conv().SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "byte"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        else:
            del data[at:]
        if not data:
            data = bytearray(b"\x08")
    return bytes(data)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = Worker(tmp_path_factory.mktemp("fuzz-worker"))
    yield w
    w.close()


def _through_the_cli(worker: Worker, data: bytes, folder: Path) -> None:
    path = folder / "model.onnx"
    path.write_bytes(data)
    for argv in (
        ("inspect", path, "--json"),
        ("parity", path, "-w", folder / "store", "--set", "parity.samples=1", "--set", "limits.stage_timeout_s=60"),
    ):
        outcome = worker.run(*argv)
        assert not outcome.problem(), f"deploykit {' '.join(map(str, argv))}: {outcome.problem()}"


@_examples(30)
@given(data=graphs())
def test_random_small_graphs(data, worker, tmp_path_factory):
    _through_the_cli(worker, data, tmp_path_factory.mktemp("graph"))


@_examples(30)
@given(data=mutations())
def test_byte_mutations_of_a_valid_model(data, worker, tmp_path_factory):
    _through_the_cli(worker, data, tmp_path_factory.mktemp("mutation"))


FINDINGS = """
Found by these fuzzers and fixed (each now has a case in tests/hostile/ or tests/):
1. YAML text holding a control character ("\\x1f"): PyYAML's reader raises while the loader is
   constructed, outside the try: a ReaderError traceback. config_load builds the loader inside it.
2. A byte flip that makes an op type invalid UTF-8: protobuf hands proto2 strings back as bytes and
   `deploykit inspect` crashed sorting op names (TypeError, exit 70). onnxguard refuses names,
   tensor and dim names, domains and metadata that are not text.
3. A byte flip that drops one dim of the input (rank 3 into a 2-D Conv): onnx's C++ shape inference
   aborts on an STL bounds assertion (SIGABRT), in deploykit's checker and inside ONNX Runtime alike.
   nativeprobe runs onnx's checks in a forked child first; a crash there is a ModelError.
Runs: the default profile (230 examples) every suite; `make fuzz` runs, so far: 400 examples of each
config/YAML/--set test, and 1,300 random graphs and about 1,100 byte mutations through the CLI.
"""
