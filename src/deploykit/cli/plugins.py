"""``deploykit plugins build|list|check``: thin commands over :mod:`deploykit.plugins`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from deploykit.cli import result as opt

app = typer.Typer(no_args_is_help=True, help="Build, list and check the custom-op plugins (plugins/<op>/).")

BuildDir = Annotated[
    Optional[Path], typer.Option("--build-dir", help="Build folder (default: build/plugins beside the plugin sources).")
]


@app.command("build")
def build(
    build_dir: BuildDir = None,
    cuda: Annotated[
        bool, typer.Option(help="Build the CUDA kernels (and the TensorRT plugin) where nvcc is found.")
    ] = True,
    tensorrt_include: Annotated[
        Optional[Path],
        typer.Option(help="Folder holding NvInferRuntime.h (default: headers of the installed TensorRT's major)."),
    ] = None,
    cuda_archs: Annotated[
        str, typer.Option(help="CMAKE_CUDA_ARCHITECTURES, e.g. '87;90' (default: the project's).")
    ] = "",
    force: Annotated[bool, typer.Option(help="Rebuild even when the sources are unchanged.")] = False,
    log_format: opt.LogFormatOpt = "human",
) -> None:
    """Configure and build the plugin libraries with CMake; a rerun with unchanged sources does nothing."""
    from rich.console import Console

    from deploykit.plugins.build import BuildOptions, build_plugins

    options = BuildOptions(
        cuda=cuda,
        tensorrt_include_dir=str(tensorrt_include.resolve()) if tensorrt_include else "",
        cuda_architectures=cuda_archs,
    )
    as_json = opt.json_output(log_format)
    result = build_plugins(build_dir, options, force=force)
    if as_json:
        opt.emit_json(
            {
                "build_dir": str(result.build_dir),
                "reused": result.reused,
                "digest": result.digest,
                "outputs": dict(result.outputs),
                "headers": result.headers or {},
            }
        )
        return
    console = Console()
    state = "up to date" if result.reused else "built"
    console.print(
        f"plugins {state} in {result.build_dir} (source digest {result.digest[:12]})", highlight=False, soft_wrap=True
    )
    for part, path in sorted(result.outputs.items()):
        console.print(f"  {part:15} {path}", highlight=False, soft_wrap=True)
    headers = result.headers or {}
    if headers:
        console.print(f"  TensorRT headers: {headers['why']}", highlight=False, soft_wrap=True)
    if headers.get("library"):
        console.print(
            f"  the TensorRT plugin library records TensorRT {'.'.join(map(str, headers['library']))} "
            "headers; it loads only into that TensorRT major",
            highlight=False,
        )
    if "tensorrt" not in result.outputs:
        console.print(
            "  (no TensorRT plugin library: it needs nvcc and TensorRT headers; see plugins/README.md)", highlight=False
        )


@app.command("list")
def list_(
    build_dir: BuildDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    log_format: opt.LogFormatOpt = "human",
) -> None:
    """The ops, their plugin names and versions, and which parts are built."""
    from rich.markup import escape

    from deploykit.plugins.build import OUTPUTS, built_outputs, default_build_dir, is_current
    from deploykit.plugins.descriptions import descriptions, plugins_source
    from deploykit.report import terminal

    folder = build_dir or default_build_dir()
    built = built_outputs(folder)
    source = plugins_source()
    rows = []
    for op in descriptions().values():
        parts = {}
        for part, suffix in (("cpu", "_cpu.cpp"), ("cuda", ".cu"), ("tensorrt", "_trt.cpp")):
            has_source = (source / op.folder / f"{op.folder}{suffix}").is_file()
            parts[part] = "built" if has_source and part in built else "source only" if has_source else "-"
        rows.append(
            {
                "op": op.plugin_name,
                "version": op.plugin_version,
                "namespace": op.plugin_namespace,
                "torch_op": f"torch.ops.{op.torch_name.replace('::', '.')}",
                "attributes": {a.name: a.describe() for a in op.attributes},
                **parts,
            }
        )
    current = is_current(folder, source)
    if opt.json_output(log_format, as_json):
        opt.emit_json(
            {
                "source": str(source),
                "build_dir": str(folder),
                "current": current,
                "ops": rows,
                "outputs": {part: built.get(part) for part in OUTPUTS},
            }
        )
        return
    table = terminal.table(
        f"plugins in {source}",
        ["op (plugin)", "version", "namespace", "torch op", "attributes", "cpu", "cuda", "tensorrt"],
        text=("attributes",),
    )
    for r in rows:
        attributes = ", ".join(f"{name} ({what})" for name, what in r["attributes"].items())
        table.add_row(
            r["op"], r["version"], r["namespace"], r["torch_op"], escape(attributes), r["cpu"], r["cuda"], r["tensorrt"]
        )
    console = terminal.console()
    terminal.print_table(console, table)
    state = {
        None: "no deploykit build there (run `deploykit plugins build`)",
        True: "built from the current sources",
        False: "stale: the sources changed since (rebuild)",
    }[current]
    console.print(f"build folder {folder}: {state}", highlight=False, soft_wrap=True)
    for part in OUTPUTS:
        console.print(f"  {part:15} {built.get(part, '(not built)')}", highlight=False, soft_wrap=True)


@app.command("check")
def check(
    library: Annotated[
        Path, typer.Argument(help="The TensorRT plugin library, e.g. build/plugins/libdeploykit_plugins.so")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    log_format: opt.LogFormatOpt = "human",
) -> None:
    """Check that a plugin library exports getCreators and registers the creators the op descriptions name."""
    from dataclasses import asdict

    from rich.markup import escape

    from deploykit.errors import InvalidInput
    from deploykit.plugins.library_check import check_library
    from deploykit.report import terminal

    as_json = opt.json_output(log_format, as_json)
    report = check_library(library)
    if as_json:
        opt.emit_json(
            {
                "library": str(library),
                "method": report.method,
                "passed": report.passed,
                "findings": [asdict(f) for f in report.findings],
            }
        )
    else:
        table = terminal.table(f"{library} (creators read by: {report.method})", ["check", "status", "detail"])
        colour = {"ok": "green", "failed": "red", "warn": "yellow", "not checked": "yellow"}
        for f in report.findings:
            table.add_row(escape(f.check), f"[{colour[f.status]}]{f.status}[/]", escape(f.detail))
        terminal.print_table(terminal.console(), table)
    if not report.passed:
        failed = [f"{f.check}: {f.detail}" for f in report.findings if f.status == "failed"]
        raise InvalidInput(
            f"{library}: plugin library check failed: {failed[0]}"
            + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""),
            hint="rebuild with `deploykit plugins build` where nvcc and TensorRT headers exist",
        )
