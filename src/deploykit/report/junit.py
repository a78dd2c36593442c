"""JUnit XML for CI systems: one testcase per model x target (plus one for a baseline comparison)."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET


def render(report: dict[str, Any]) -> str:
    """The gate report as a JUnit testsuite; every missed check is a ``<failure>`` of its testcase."""
    model, seconds = report["model"], report["latency"]["mean_ms"] * report["latency"]["n"] / 1000
    suite = ET.Element("testsuite", name=f"deploykit.gate.{model}")
    cases = [_target_case(report, model, seconds)]
    if report.get("baseline"):
        cases.append(_case(model, "baseline", report["baseline"]["checks"], 0.0))
    suite.extend(cases)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
    suite.set("time", f"{seconds:.6f}")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _target_case(report: dict[str, Any], model: str, seconds: float) -> ET.Element:
    name = f"{report['platform']} batch {report['batch']}"
    if not report["checks"]:
        case = ET.Element("testcase", classname=f"deploykit.gate.{model}", name=name, time=f"{seconds:.6f}")
        ET.SubElement(case, "skipped", message=report.get("note") or "no target")
        return case
    return _case(model, name, report["checks"], seconds)


def _case(model: str, name: str, checks: list[dict[str, Any]], seconds: float) -> ET.Element:
    case = ET.Element("testcase", classname=f"deploykit.gate.{model}", name=name, time=f"{seconds:.6f}")
    failed = [c["message"] for c in checks if not c["passed"]]
    if failed:
        ET.SubElement(case, "failure", message="; ".join(failed)).text = "\n".join(failed)
    ET.SubElement(case, "system-out").text = "\n".join(c["message"] for c in checks)
    return case
