"""The matrix report: ``matrix.json``, ``junit.xml`` (one testcase per model x precision x target) and
``summary.md``, written atomically into one folder."""

from __future__ import annotations

import os
from pathlib import Path
from xml.etree import ElementTree as ET

from deploykit.matrix.result import ERROR, FAILED, INTERRUPTED, PASSED, SKIPPED, MatrixResult
from deploykit.matrix.table import COLUMNS, footer, rows
from deploykit.store import jsonio

FILES = ("matrix.json", "junit.xml", "summary.md")


def write(result: MatrixResult, folder: Path) -> tuple[Path, ...]:
    folder.mkdir(parents=True, exist_ok=True)
    texts = (jsonio.dumps(result.to_dict()), junit(result), markdown(result))
    out = []
    for name, text in zip(FILES, texts, strict=True):
        path = folder / name
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        out.append(path)
    return tuple(out)


def junit(result: MatrixResult) -> str:
    suite = ET.Element(
        "testsuite", name=f"deploykit.matrix.{result.name}", tests=str(len(result.cells)), time=f"{result.seconds:.3f}"
    )
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    for c in result.cells:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"deploykit.matrix.{c.model}",
            name=f"{c.precision} on {c.target}",
            time=f"{c.seconds:.3f}",
        )
        props = ET.SubElement(case, "properties")
        for key, value in (("attempts", c.attempts), ("node", c.node), ("fps", c.fps), ("shared", " ".join(c.shared))):
            ET.SubElement(props, "property", name=key, value="" if value is None else str(value))
        if c.status == FAILED:
            counts["failures"] += 1
            ET.SubElement(case, "failure", message=c.error).text = c.error
        elif c.status in (ERROR, SKIPPED) and c.exit_code:
            counts["errors"] += 1
            ET.SubElement(case, "error", message=c.error, type=f"exit {c.exit_code}").text = c.error
        elif c.status == INTERRUPTED:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message="interrupted before the cell finished")
        stages = " ".join(f"{s.stage}:{s.status}" for s in c.stages)
        ET.SubElement(case, "system-out").text = f"stages: {stages}; attempts: {c.attempts}"
    for key, n in counts.items():
        suite.set(key, str(n))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def markdown(result: MatrixResult) -> str:
    verdict = "PASS" if result.passed else "FAIL"
    lines = [
        f"## deploykit matrix: {result.name} — {verdict}",
        "",
        footer(result) + ".",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + " --- |" * len(COLUMNS),
    ]
    for row in rows(result):
        cells = [v.replace("|", "\\|") for v in row]
        if row[3] != PASSED:
            cells[3] = f"**{cells[3]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
