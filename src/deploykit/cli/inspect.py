"""``deploykit inspect model.onnx``: the model's inputs, outputs, ops and what ONNX Runtime cannot run, as tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from deploykit.cli import result as opt
from deploykit.graph.inspect import inspect_model
from deploykit.safety import thirdparty

DEFAULT_WORKDIR = Path(".deploykit")  # inspect has no store: the default workdir of every other command


def render(info: dict[str, Any]) -> None:
    """Print the inspection as tables (rich)."""
    from rich.markup import escape

    from deploykit.report import terminal

    console = terminal.console()
    opsets = ", ".join(f"{d} {v}" for d, v in info["opsets"].items())
    console.print(
        f"[bold]{info['path']}[/]  {info['file_bytes'] / 2**20:.2f} MiB, IR {info['ir_version']}, "
        f"opsets: {opsets}, producer: {info['producer'] or '?'}",
        highlight=False,
    )
    console.print(
        f"{info['nodes']} nodes, {info['parameters']:,} parameters ({info['parameter_bytes'] / 2**20:.2f} MiB)",
        highlight=False,
    )
    io = terminal.table("inputs and outputs", ["", "name", "type", "shape"])
    for kind in ("inputs", "outputs"):
        for v in info[kind]:
            shape = "?" if v["shape"] is None else "[" + ", ".join(map(str, v["shape"])) + "]"
            io.add_row(kind[:-1], escape(v["name"]), v["type"], escape(shape))
    terminal.print_table(console, io)
    ops = terminal.table("ops", ["op", "count"])
    for op, n in sorted(info["ops"].items(), key=lambda kv: (-kv[1], kv[0])):
        ops.add_row(escape(op), str(n))
    terminal.print_table(console, ops)
    for c in info["custom_nodes"]:
        body = "has an ONNX body" if c["has_body"] else "no body: needs a plugin or custom-op library"
        console.print(f"custom node {c['name'] or '?'!r}: {c['domain']}::{c['op']} ({body})", highlight=False)
    for p in info["problems"]:
        console.print(f"[red]problem:[/] {p}", highlight=False)
    for d in info["declarations"]:
        console.print(f"[yellow]warning:[/] {escape(d)} (a run uses the inferred one)", highlight=False)
    if info["checker"] != "ok":
        console.print(f"[red]ONNX checker:[/] {info['checker']}", highlight=False)
    _render_runtime(console, info.get("onnxruntime"))


def _render_runtime(console: Any, ort_info: dict[str, Any] | None) -> None:
    if ort_info is None:
        return
    if ort_info["loads"]:
        console.print("ONNX Runtime (CPU): [green]loads[/]")
        return
    console.print(f"ONNX Runtime (CPU): [red]cannot load[/]: {ort_info['error']}", highlight=False)
    for n in ort_info["unsupported"]:
        op = f"{n['domain']}::{n['op']}" if n["domain"] else n["op"]
        console.print(f"  node {n['node']!r} ({op}): {n['error']}", highlight=False)


def command(
    model: Annotated[Path, typer.Argument(help="An ONNX file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    runtime: Annotated[bool, typer.Option(help="Check which nodes ONNX Runtime can run.")] = True,
    log_format: opt.LogFormatOpt = "human",
) -> None:
    """Show a model's inputs, outputs, ops, opsets, parameters and the nodes ONNX Runtime cannot run."""
    as_json = opt.json_output(log_format, as_json)
    with thirdparty.logged_to(DEFAULT_WORKDIR):  # made only if onnx or ONNX Runtime says something
        info = inspect_model(model, check_runtime=runtime)
    if as_json:
        opt.emit_json(info)
    else:
        render(info)
