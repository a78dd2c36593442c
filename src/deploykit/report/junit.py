"""JUnit XML for CI systems: one testcase per gate check (model x target)."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET


def render(report: dict[str, Any]) -> str:
    checks = report["checks"]
    suite = ET.Element("testsuite", name=f"deploykit.gate.{report['model']}", tests=str(max(len(checks), 1)),
                       failures=str(sum(not c["passed"] for c in checks)), skipped="0" if checks else "1")
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"{report['model']}.{report['platform']}", name=c["name"],
                             time=f"{report['latency']['mean_ms'] / 1000:.6f}")
        if not c["passed"]:
            ET.SubElement(case, "failure", message=c["message"]).text = c["message"]
    if not checks:
        case = ET.SubElement(suite, "testcase", classname=f"{report['model']}.{report['platform']}", name="target")
        ET.SubElement(case, "skipped", message=report.get("note") or "no target")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
