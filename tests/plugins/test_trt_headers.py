"""The TensorRT headers a plugin library is compiled against: chosen for the installed TensorRT, recorded
in the library as a data symbol, read back from the file (never by loading it), and enforced when the
backend loads a library and when `deploykit plugins check` looks at one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from deploykit.backends import trt_plugins
from deploykit.errors import ConfigError, EnvironmentProblem
from deploykit.plugins import build as plugin_build
from deploykit.plugins import library_check, trt_headers
from tests.plugins.test_native import TRT_INCLUDE

try:
    from tests.backends.trt_double import Creator, FakeTensorRT, Scenario
except ImportError:  # rootdir-relative import mode
    from backends.trt_double import Creator, FakeTensorRT, Scenario

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")


def include_dir(folder: Path, major: int, minor: int, patch: int = 0, *, indirect: bool = True) -> Path:
    """A folder with the two headers deploykit reads; 10.x writes its numbers through TRT_*_ENTERPRISE."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "NvInferRuntime.h").write_text("// stand-in\n")
    if indirect:
        text = (
            f"#define TRT_MAJOR_ENTERPRISE {major}\n#define TRT_MINOR_ENTERPRISE {minor}\n"
            f"#define TRT_PATCH_ENTERPRISE {patch}\n#define NV_TENSORRT_MAJOR TRT_MAJOR_ENTERPRISE\n"
            "#define NV_TENSORRT_MINOR TRT_MINOR_ENTERPRISE\n#define NV_TENSORRT_PATCH TRT_PATCH_ENTERPRISE\n"
        )
    else:
        text = (
            f"#define NV_TENSORRT_MAJOR {major}\n#define NV_TENSORRT_MINOR {minor}\n#define NV_TENSORRT_PATCH {patch}\n"
        )
    (folder / "NvInferVersion.h").write_text(text)
    return folder


# -- reading the headers' version --------------------------------------------------------------------


def test_header_version_follows_the_macro_indirection(tmp_path: Path) -> None:
    assert trt_headers.header_version(include_dir(tmp_path / "a", 10, 14, 1)) == (10, 14, 1)
    assert trt_headers.header_version(include_dir(tmp_path / "b", 11, 4, indirect=False)) == (11, 4, 0)
    assert trt_headers.header_version(tmp_path / "missing") is None


@pytest.mark.skipif(TRT_INCLUDE is None, reason="TensorRT headers not fetched (plugins/tools/fetch_trt_headers.sh)")
def test_header_version_of_the_real_fetched_headers() -> None:
    version = trt_headers.header_version(TRT_INCLUDE)
    assert version is not None and version[0] == 10 and version[1] >= 12


# -- choosing them ------------------------------------------------------------------------------------


def test_choose_refuses_headers_of_another_major_than_the_installed_tensorrt(tmp_path: Path) -> None:
    ten = include_dir(tmp_path / "ten", 10, 14, 1)
    with pytest.raises(ConfigError, match="TensorRT 10.14.1 headers but TensorRT 11.4.0.106 is installed"):
        trt_headers.choose(str(ten), "11.4.0.106", [])
    with pytest.raises(ConfigError, match="no NvInferRuntime.h"):
        trt_headers.choose(str(tmp_path / "nothing"), "", [])
    assert trt_headers.choose(str(ten), "10.13.3.9", []).include_dir == str(ten)


def test_choose_builds_no_glue_when_only_the_fetched_10x_headers_exist_for_tensorrt_11(tmp_path: Path) -> None:
    fetched = include_dir(tmp_path / "fetched", 10, 14, 1)
    headers = trt_headers.choose("", "11.4.0.106", [(tmp_path / "none", "the system"), (fetched, "the fetched set")])
    assert headers.include_dir == "" and headers.version is None
    assert "no TensorRT 11.x headers were found" in headers.why and "the fetched set" in headers.why
    assert "10.14.1" in headers.why and "--tensorrt-include" in headers.why


def test_choose_prefers_the_installed_minor_then_the_same_major(tmp_path: Path) -> None:
    found = [
        (include_dir(tmp_path / "a", 11, 1), "the system"),
        (include_dir(tmp_path / "b", 11, 4), "the wheel"),
        (include_dir(tmp_path / "c", 10, 14), "the fetched set"),
    ]
    assert trt_headers.choose("", "11.4.0.106", found).include_dir == str(tmp_path / "b")
    assert trt_headers.choose("", "11.2.0.1", found).version == (11, 1, 0)
    assert trt_headers.choose("", "10.13.3.9", found).version == (10, 14, 0)


def test_choose_without_tensorrt_compiles_against_what_is_found_and_says_so(tmp_path: Path) -> None:
    found = [(tmp_path / "none", "the system"), (include_dir(tmp_path / "f", 10, 14, 1), "the fetched set")]
    headers = trt_headers.choose("", "", found)
    assert headers.version == (10, 14, 1) and "compile check" in headers.why
    assert trt_headers.choose("", "", found[:1]).include_dir == ""


def test_build_options_turn_the_glue_off_when_no_headers_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resolved options reach CMake: DEPLOYKIT_WITH_TENSORRT=OFF instead of the fetched 10.x set."""
    source = tmp_path / "plugins"
    source.mkdir()
    include_dir(tmp_path / "build" / "kernel-lens" / "kernel_lens" / "include" / "tensorrt", 10, 14, 1)
    monkeypatch.setattr(trt_headers, "installed_tensorrt", lambda: "11.4.0.106")
    monkeypatch.setattr(trt_headers, "_SYSTEM_DIRS", ())
    monkeypatch.delenv("TENSORRT_INCLUDE_DIR", raising=False)
    monkeypatch.delenv("TENSORRT_ROOT", raising=False)
    options, headers = plugin_build.with_tensorrt_headers(plugin_build.BuildOptions(), source)
    assert not options.tensorrt_glue and "no TensorRT 11.x headers" in headers.why
    args = plugin_build._cmake_arguments(source, tmp_path / "out", options)
    assert "-DDEPLOYKIT_WITH_TENSORRT=OFF" in args and not any("TENSORRT_INCLUDE_DIR" in a for a in args)
    monkeypatch.setattr(trt_headers, "installed_tensorrt", lambda: "10.13.3.9")
    options, _ = plugin_build.with_tensorrt_headers(plugin_build.BuildOptions(), source)
    assert options.tensorrt_glue and options.tensorrt_include_dir.endswith("kernel_lens/include/tensorrt")


# -- the record in the library, read from the file ---------------------------------------------------

STAND_IN = r"""
#include <stdint.h>
#define API __attribute__((visibility("default")))
API const int32_t deploykit_tensorrt_headers[3] = {MAJOR, MINOR, 1};
API void *getCreators(int32_t *n) { *n = 0; return 0; }
API void setLoggerFinder(void *finder) { (void)finder; }
"""


def stand_in(folder: Path, major: int | None, minor: int = 14, *, cudart: str = "") -> Path:
    """A shared library exporting getCreators, setLoggerFinder and (unless major is None) the headers record;
    with ``cudart``, it needs a library of that name (DT_NEEDED), as the real one needs libcudart.so.<N>."""
    folder.mkdir(parents=True, exist_ok=True)
    source, library = folder / "stand_in.c", folder / "libstand_in.so"
    text = STAND_IN.replace("MAJOR", str(major)).replace("MINOR", str(minor))
    if major is None:
        text = "\n".join(line for line in text.splitlines() if "deploykit_tensorrt_headers" not in line)
    source.write_text(text)
    link = []
    if cudart:
        (folder / "empty.c").write_text("int deploykit_stand_in_cudart;\n")
        subprocess.run(
            ["cc", "-shared", "-fPIC", f"-Wl,-soname,{cudart}", "-o", folder / cudart, folder / "empty.c"], check=True
        )
        link = [f"-L{folder}", f"-l:{cudart}", "-Wl,--no-as-needed"]
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-fvisibility=hidden", "-O2", "-Wl,--no-as-needed", "-o", library, source, *link],
        check=True,
    )
    return library


@needs_cc
def test_the_record_is_read_from_the_file(tmp_path: Path) -> None:
    assert trt_plugins.built_against(stand_in(tmp_path / "a", 10)) == (10, 14, 1)
    assert trt_plugins.built_against(stand_in(tmp_path / "b", None)) is None
    not_elf = tmp_path / "libfake.so"
    not_elf.write_bytes(b"\x7fELF plugin")
    assert trt_plugins.built_against(not_elf) is None  # the dynamic loader then rejects it


@needs_cc
def test_double_load_libraries_refuses_another_major_before_opening_it(tmp_path: Path) -> None:
    """Checks our loader with FakeTensorRT (a test double): nothing is opened when the major differs."""
    library = stand_in(tmp_path, 10)
    opened: list[str] = []

    def opener_for(fake: FakeTensorRT):
        def opener(path: str) -> object:
            opened.append(path)
            fake.registry.all_creators.append(Creator("BEVPoolV2", "1", "deploykit"))
            return object()

        return opener

    eleven = FakeTensorRT(Scenario(version="11.4.0.106"))
    with pytest.raises(EnvironmentProblem) as info:
        trt_plugins.load_libraries(eleven, [library], opener=opener_for(eleven))
    assert opened == [] and info.value.exit_code == 3
    assert "compiled against the TensorRT 10.14 headers but this is TensorRT 11.4.0.106" in info.value.message
    assert "rebuild it against the TensorRT 11.x headers" in info.value.message
    assert "--tensorrt-include" in info.value.hint
    ten = FakeTensorRT(Scenario(version="10.13.3.9"))
    (loaded,) = trt_plugins.load_libraries(ten, [library], opener=opener_for(ten))
    assert opened == [str(library)] and loaded.creators == (("BEVPoolV2", "1", "deploykit"),)


@pytest.fixture
def no_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(library_check, "_creators_from_tensorrt", lambda path: (None, "TensorRT is not installed"))


@needs_cc
@pytest.mark.parametrize(
    ("installed", "status", "text"),
    [
        ("11.4.0.106", "failed", "compiled against the TensorRT 10.14 headers but this is TensorRT 11.4.0.106"),
        ("10.13.3.9", "ok", "TensorRT 10.13.3.9 is installed (same major)"),
        ("", "ok", "no TensorRT installed here to compare with: it runs only on TensorRT 10.x"),
    ],
)
def test_plugins_check_compares_the_record_with_the_installed_tensorrt(
    tmp_path: Path, monkeypatch, no_tensorrt, installed, status, text
) -> None:
    monkeypatch.setattr(trt_headers, "installed_tensorrt", lambda: installed)
    finding = {f.check: f for f in library_check.check_library(stand_in(tmp_path, 10)).findings}["TensorRT headers"]
    assert finding.status == status and text in finding.detail


@needs_cc
def test_plugins_check_says_when_the_library_records_nothing(tmp_path: Path, no_tensorrt) -> None:
    finding = {f.check: f for f in library_check.check_library(stand_in(tmp_path, None)).findings}["TensorRT headers"]
    assert finding.status == "not checked" and "rebuild with `deploykit plugins build`" in finding.detail


@needs_cc
def test_plugins_check_warns_when_the_cuda_runtime_differs_from_tensorrts(
    tmp_path: Path, monkeypatch, no_tensorrt
) -> None:
    from deploykit.backends import trt_compat

    library = stand_in(tmp_path, 10, cudart="libcudart.so.13")
    monkeypatch.setattr(trt_compat, "tensorrt_cuda_flavour", lambda: "cu12")
    report = library_check.check_library(library)
    finding = {f.check: f for f in report.findings}["CUDA runtime"]
    assert finding.status == "warn" and "links libcudart.so.13 but TensorRT is built for CUDA 12" in finding.detail
    assert "creators" in {f.check for f in report.findings}  # a warning does not stop the check
    monkeypatch.setattr(trt_compat, "tensorrt_cuda_flavour", lambda: "cu13")
    finding = {f.check: f for f in library_check.check_library(library).findings}["CUDA runtime"]
    assert finding.status == "ok" and "(cu13)" in finding.detail


def test_without_headers_of_the_installed_major_the_reason_says_where_they_are_published(tmp_path):
    """Defect E: a pip-only TensorRT 11 has no headers; the message names where 11.x's are and the flag to use."""
    from deploykit.plugins import trt_headers

    headers = trt_headers.choose("", "11.4.0.106", [])
    assert headers.include_dir == ""
    assert "github.com/NVIDIA/TensorRT, tag v11.4, folder include/" in headers.why
    assert "--tensorrt-include" in headers.why and "wheels ship no headers" in headers.why


def test_doctor_says_which_headers_the_glue_would_use(monkeypatch, tmp_path):
    from deploykit.cli import doctor
    from deploykit.plugins import trt_headers

    monkeypatch.setattr(trt_headers, "installed_tensorrt", lambda: "11.1.0")
    monkeypatch.setattr(trt_headers, "candidates", lambda fetched=None: [])
    row = next(r for r in doctor.collect().rows if r.component == "TensorRT headers")
    assert row.status == "warn" and "tag v11.1" in row.detail
    include = tmp_path / "include"
    include.mkdir()
    (include / "NvInferRuntime.h").write_text("")
    (include / "NvInferVersion.h").write_text("#define NV_TENSORRT_MAJOR 11\n#define NV_TENSORRT_MINOR 1\n")
    monkeypatch.setattr(trt_headers, "candidates", lambda fetched=None: [(include, "$TENSORRT_ROOT/include")])
    row = next(r for r in doctor.collect().rows if r.component == "TensorRT headers")
    assert row.status == "ok" and str(include) in row.detail and "11.1" in row.detail
