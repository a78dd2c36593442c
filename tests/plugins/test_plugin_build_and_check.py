"""`deploykit plugins build|list|check`: the CMake build cached by source digest, the listing, and the
library check (on the CPU library, on small stand-in libraries, and on the real TensorRT plugin
library where nvcc and TensorRT headers exist)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from deploykit.plugins import library_check
from deploykit.plugins.build import BuildOptions, build_plugins, is_current
from deploykit.plugins.descriptions import descriptions, plugins_source
from tests.conftest import run_cli
from tests.plugins.test_native import NVCC, TRT_INCLUDE

CPU_ONLY = BuildOptions(cuda=False, targets=("deploykit_plugins_cpu",))
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not on PATH")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")


@needs_cmake
def test_build_is_cached_by_source_digest(tmp_path):
    source = tmp_path / "plugins"
    shutil.copytree(plugins_source(), source)
    build = tmp_path / "build"
    first = build_plugins(build, CPU_ONLY, source)
    assert not first.reused and set(first.outputs) == {"cpu"} and is_current(build, source)
    again = build_plugins(build, CPU_ONLY, source)
    assert again.reused and again.digest == first.digest
    kernel = source / "bev_pool" / "bev_pool_cpu.cpp"
    kernel.write_text(kernel.read_text() + "\n// a change\n")
    assert is_current(build, source) is False
    changed = build_plugins(build, CPU_ONLY, source)
    assert not changed.reused and changed.digest != first.digest
    assert build_plugins(build, BuildOptions(cuda=False), source).digest != changed.digest  # options enter the key
    assert is_current(tmp_path / "empty", source) is None


@needs_cmake
def test_a_changed_library_is_rebuilt(tmp_path):
    result = build_plugins(tmp_path / "build", CPU_ONLY)
    Path(result.outputs["cpu"]).write_bytes(b"not a library")
    assert not build_plugins(tmp_path / "build", CPU_ONLY).reused


@needs_cmake
def test_cli_build_then_list(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps table cells to the terminal's width
    build = tmp_path / "build"
    code, out, err = run_cli("plugins", "build", "--build-dir", str(build), "--no-cuda")
    assert code == 0, err
    assert "plugins built" in out and "libdeploykit_plugins_cpu.so" in out
    code, out, _ = run_cli("plugins", "build", "--build-dir", str(build), "--no-cuda")
    assert code == 0 and "plugins up to date" in out
    code, out, _ = run_cli("plugins", "list", "--build-dir", str(build))
    assert code == 0
    for text in ("BEVPoolV2", "PillarScatter", "deploykit", "built from the current sources"):
        assert text in out
    assert "libdeploykit_plugins_cpu.so" in out and "source only" in out  # no CUDA part without nvcc


def test_cli_list_without_a_build(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli("plugins", "list", "--build-dir", str(tmp_path))
    assert code == 0 and "no deploykit build there" in out


def test_cli_check_refuses_the_cpu_library(cpu_kernels, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = run_cli("plugins", "check", str(cpu_kernels.path))
    assert code == 4
    assert "exports getCreators" in err and "this is the CPU kernel library" in out


def test_cli_check_on_a_missing_file(tmp_path):
    code, _, err = run_cli("plugins", "check", str(tmp_path / "nope.so"))
    assert code == 4 and "no such file" in err


# ---------------------------------------------------------------------------------------------
# Stand-in libraries: what the check reads, without CUDA or TensorRT


STAND_IN = r"""
#include <stdint.h>
#define API __attribute__((visibility("default")))
static const char *names[] = {NAMES};
API void *getCreators(int32_t *n) { *n = (int32_t)(sizeof(names) / sizeof(names[0])); return (void *)names; }
API void setLoggerFinder(void *finder) { (void)finder; }
"""


def _stand_in(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    source, library = folder / "stand_in.c", folder / "libstand_in.so"
    source.write_text(STAND_IN.replace("NAMES", ", ".join(f'"{n}"' for n in names)))
    subprocess.run(["cc", "-shared", "-fPIC", "-fvisibility=hidden", "-O2", "-o", library, source], check=True)
    return library


@pytest.fixture
def no_tensorrt(monkeypatch):
    """The check's first way (TensorRT's own registry) is unavailable, as on this CPU machine."""
    monkeypatch.setattr(library_check, "_creators_from_tensorrt", lambda path: (None, "TensorRT is not installed"))


@needs_cc
def test_check_falls_back_to_embedded_names_and_says_what_it_did_not_check(tmp_path, no_tensorrt):
    library = _stand_in(tmp_path, ["BEVPoolV2", "PillarScatter", "deploykit"])
    assert {"getCreators", "setLoggerFinder"} <= library_check.exported_symbols(library)
    report = library_check.check_library(library)
    assert report.passed and report.method == "strings"
    details = {f.check: (f.status, f.detail) for f in report.findings}
    assert details["creators"][0] == "not checked"
    assert (
        details["creator BEVPoolV2"][0] == "ok"
        and "not checked: that they belong to one creator" in details["creator BEVPoolV2"][1]
    )


@needs_cc
def test_check_fails_when_a_name_is_missing(tmp_path, no_tensorrt):
    report = library_check.check_library(_stand_in(tmp_path, ["BEVPoolV2", "deploykit"]))
    assert not report.passed
    failed = [f for f in report.findings if f.status == "failed"]
    assert [f.check for f in failed] == ["creator PillarScatter"]


def _glue_check(
    folder: Path, creators: list[dict], monkeypatch: pytest.MonkeyPatch | None = None, library: Path | None = None
) -> Path:
    """A stand-in deploykit_trt_glue_check that prints the creators JSON the real one prints; with
    ``monkeypatch``, ``folder`` becomes deploykit's build folder with ``library`` as its TensorRT library."""
    from deploykit.plugins import build
    from deploykit.store.hashing import digest_file

    program = folder / library_check.GLUE_CHECK
    program.write_text(f"#!/bin/sh\ntouch {folder}/ran\ncat <<'EOF'\n{json.dumps({'creators': creators})}\nEOF\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    if monkeypatch is not None:
        stamp = {"outputs": {"tensorrt": digest_file(library), "trt_glue_check": digest_file(program)}}
        (folder / build.STAMP).write_text(json.dumps(stamp))
        monkeypatch.setattr(build, "default_build_dir", lambda: folder)
    return program


def _described_creators() -> list[dict]:
    return [
        {
            "name": op.plugin_name,
            "version": op.plugin_version,
            "namespace": op.plugin_namespace,
            "fields": [{"name": a.name, "type": "int32", "length": a.length} for a in op.attributes],
        }
        for op in descriptions().values()
    ]


@needs_cc
def test_check_reads_creators_through_the_glue_check(tmp_path, no_tensorrt, monkeypatch):
    library = _stand_in(tmp_path, ["x"])
    _glue_check(tmp_path, _described_creators(), monkeypatch, library)
    report = library_check.check_library(library)
    assert report.passed and report.method == "glue_check"
    assert [f.check for f in report.findings if f.status == "ok"][-2:] == ["creator BEVPoolV2", "creator PillarScatter"]


@needs_cc
def test_check_reports_creator_mismatches(tmp_path, no_tensorrt, monkeypatch):
    library = _stand_in(tmp_path, ["x"])
    creators = _described_creators()
    creators[0]["version"] = "2"
    creators[1]["fields"][0]["length"] = 3
    creators.append({"name": "Extra", "version": "1", "namespace": "deploykit", "fields": []})
    _glue_check(tmp_path, creators, monkeypatch, library)
    failed = {f.check: f.detail for f in library_check.check_library(library).findings if f.status == "failed"}
    assert "('2', 'deploykit')" in failed["creator BEVPoolV2"]
    assert "fields [('grid', 3)]" in failed["creator PillarScatter"]
    assert "described by no plugins/*/*.yaml" in failed["creator Extra"]


@needs_cc
def test_a_program_beside_an_untrusted_library_is_never_run(tmp_path, no_tensorrt, monkeypatch):
    library = _stand_in(tmp_path / "untrusted", ["BEVPoolV2", "PillarScatter", "deploykit"])
    _glue_check(library.parent, _described_creators())  # planted beside the library
    (tmp_path / "build").mkdir()
    _glue_check(tmp_path / "build", _described_creators(), monkeypatch, tmp_path / "build" / "deploykit_trt_glue_check")
    report = library_check.check_library(library)  # deploykit's own checker describes another library
    assert report.method == "strings"
    assert not (library.parent / "ran").exists() and not (tmp_path / "build" / "ran").exists()


@pytest.mark.parametrize("cut", [20, 64, 200, -100])
@needs_cc
def test_a_truncated_elf_is_invalid_input(tmp_path, cut, no_tensorrt):
    library = _stand_in(tmp_path, ["x"])
    data = library.read_bytes()
    library.write_bytes(data[:cut] if cut > 0 else data[:cut] + b"\xff" * 8)
    code, _, err = run_cli("plugins", "check", str(library))
    assert code == 4 and "Traceback" not in err
    assert str(library) in " ".join(err.split()).replace(" ", "") or library.name in err


@pytest.mark.slow
@pytest.mark.skipif(
    NVCC is None or TRT_INCLUDE is None, reason="needs nvcc and TensorRT headers (plugins/tools/fetch_trt_headers.sh)"
)
def test_check_the_real_tensorrt_plugin_library(tmp_path):
    result = build_plugins(
        tmp_path / "build", BuildOptions(tensorrt_include_dir=str(TRT_INCLUDE), cuda_architectures="90")
    )
    code, out, err = run_cli("plugins", "check", result.outputs["tensorrt"])
    assert code == 0, out + err
    assert "glue_check" in out or "tensorrt" in out
