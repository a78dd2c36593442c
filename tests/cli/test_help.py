"""Help text a person reads: no Python types (``<bool>``, ``<list[str]>``) or ``{config}`` in any
command's --help, and ``config show`` of an ONNX file shows the config deploykit would make for it."""

from __future__ import annotations

import pytest
import typer
from onnx import TensorProto, helper

from tests.conftest import run_cli


def _commands() -> list[list[str]]:
    from deploykit.cli.app import app

    out, pending = [], [([], typer.main.get_command(app))]
    while pending:
        path, cmd = pending.pop()
        subs = getattr(cmd, "commands", None)
        if subs:
            pending += [([*path, name], sub) for name, sub in subs.items()]
        else:
            out.append(path)
    return sorted(out)


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_help_names_values_in_words(command):
    code, out, err = run_cli(*command, "--help")
    assert code == 0, err
    for internal in ("<bool>", "<list[", "<path>", "<int>", "<float>", "<str>"):
        assert internal not in out, f"deploykit {' '.join(command)} --help shows {internal!r}"
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage  # a required argument reads CONFIG, not {config}
    assert " ".join(["deploykit", *command]) in out


def test_the_parity_help_reads_as_polygraphy_users_expect():
    code, out, _ = run_cli("parity", "--help")
    assert "deploykit parity [OPTIONS] MODEL [OTHER]" in " ".join(out.split())
    assert "[OUTPUT:]ATOL" in out and "KEY=VALUE" in out and "NAME=MIN,OPT,MAX" in out


def test_config_show_of_an_onnx_file_is_the_config_deploykit_makes(tmp_path):
    import onnx
    import yaml

    graph = helper.make_graph(
        [helper.make_node("Relu", ["images"], ["y"])],
        "det",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 8, 8])],
    )
    path = tmp_path / "det.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    code, out, err = run_cli("config", "show", str(path), "--dim", "batch=1,2,4")
    assert code == 0, err
    shown = yaml.safe_load(out)
    assert shown["name"] == "det" and shown["source"]["onnx"] == str(path.resolve())
    assert shown["inputs"] == [{"name": "images", "shape": ["batch", 3, 8, 8], "dtype": "float32", "kind": "tensor"}]
    assert shown["dims"] == {"batch": {"min": 1, "opt": 2, "max": 4}} and "memory" not in shown["source"]
    code, _, err = run_cli("config", "show", str(path), "--dim", "batchh=1")
    assert code == 2 and "--dim names batchh, which the model does not have" in err
