"""One verdict everywhere: for a passing run, a failing parity check, a failing quantize check and a
missed gate target, the exit code and all seven views of the run record agree — the terminal
table and verdict lines, ``--log-format json``, JUnit, Markdown, the HTML page's badge and its
sections, and the notebook view (``_repr_html_``). Every case runs through the console script."""

import json
import re
from xml.etree import ElementTree as ET

import pytest

import deploykit
from deploykit.record import model as records
from deploykit.report.html import render_fragment
from tests.cli.console import deploykit as run

CASES = {
    "pass": ((), "PASS", 0, set()),
    "parity": (("--set", "parity.default.max_abs=0", "--set", "parity.default.rel_l2=0"), "FAIL", 1, {"parity"}),
    "gate": (("--set", "gate.targets.default.fps=1e9"), "FAIL", 1, {"gate"}),
    # parity judges an INT8 model by the quantize tolerance (one set of numbers), so both fail
    "quantize": (
        ("--precision", "int8", "--set", "quantize.tolerances.int8.rel_l2=1e-9"),
        "FAIL",
        1,
        {"quantize", "parity"},
    ),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.e2e] if c == "quantize" else []) for c in CASES])
def test_every_view_and_the_exit_code_agree(quantizable, tmp_path, case):
    cfg, store = quantizable
    flags, verdict, code, failed_groups = CASES[case]
    common = (str(cfg), "-w", str(store), "--report-dir", str(tmp_path / "r"), *flags)
    as_json = run("convert", *common, "--log-format", "json")
    human = run("convert", *common)  # everything reused: the same record, drawn for a person
    assert as_json.returncode == human.returncode == code, (as_json.stderr, human.stderr)

    # 1. terminal: the verdict line and one line per check group
    assert f"result: {verdict} (exit {code})" in human.stdout, human.stdout
    for group in failed_groups:
        assert re.search(rf"^{group}: FAIL", human.stdout, re.M), human.stdout
    for group in {"parity", "gate"} - failed_groups:
        assert re.search(rf"^{group}: PASS", human.stdout, re.M), human.stdout
    # 2. JSON: one object on stdout
    result = json.loads(as_json.stdout)
    assert (result["verdict"], result["exit_code"], result["passed"]) == (verdict, code, code == 0)
    assert {c["group"] for c in result["checks"] if not c["passed"]} == failed_groups
    record = records.RunRecord.from_dict(json.loads((tmp_path / "r" / "run.json").read_text()))
    assert record.exit_code == code and len(record.failed_checks) == len(
        [c for c in result["checks"] if not c["passed"]]
    )
    # 3. JUnit: failures are exactly the failed checks, in their groups
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    failing = [c.get("classname").rsplit(".", 1)[-1] for c in suite.iter("testcase") if c.find("failure") is not None]
    assert suite.get("failures") == str(len(failing)) == str(len(record.failed_checks))
    assert set(failing) == failed_groups and suite.get("errors") == "0"
    names: dict[str, set[str]] = {}  # one testcase per parity output x reference, quantize output, gate check
    for c in suite.iter("testcase"):
        names.setdefault(c.get("classname").rsplit(".", 1)[-1], set()).add(c.get("name"))
    assert {f"{o} vs {r}" for o in ("features", "pooled") for r in ("onnx", "torch")} <= names["parity"]
    assert names["gate"] and all(n.startswith(f"{record.name} on ") for n in names["gate"])  # model x platform
    assert names.get("quantize", set()) == ({"features", "pooled"} if "--precision" in flags else set())
    # 4. Markdown
    md = (tmp_path / "r" / "summary.md").read_text()
    assert md.startswith(f"## deploykit {record.identity} — {verdict} (exit {code})")
    for group in failed_groups:
        assert re.search(rf"^### {group}.* — FAIL$", md, re.M), md
    # 5 + 6. the HTML page from the store: badge and sections
    page_path = tmp_path / "report.html"
    assert run("report", record.name, "-w", str(store), "-o", str(page_path), "--no-plots").returncode == 0
    page = page_path.read_text()
    badge = "pass'>passed" if code == 0 else "fail'>failed"
    assert f"badge {badge}</span>" in page and f"exit {code}" in page
    sections = {"parity": "Parity", "gate": "Gate", "quantize": "Quantization"}
    for group, title in sections.items():
        failed_section = re.search(rf"<h2>{title}:[^<]*<span class='fail'>", page) is not None
        assert failed_section == (group in failed_groups), group
    # 7. the notebook view of the same run
    try:
        deploykit.convert(cfg, workdir=store, overrides=_overrides(flags))
        fragment = None
    except deploykit.DeployKitError as e:
        fragment = e.result._repr_html_()
    fragment = fragment or render_fragment(records.find(store, record.identity)[0])
    assert f"badge {badge}</span>" in fragment


def _overrides(flags: tuple[str, ...]) -> dict:
    from deploykit.cli.args import parse_sets

    sets = [flags[i + 1] for i, f in enumerate(flags) if f == "--set"]
    out = parse_sets(sets)
    if "--precision" in flags:
        out["quantize.precision"] = flags[flags.index("--precision") + 1]
    return out
