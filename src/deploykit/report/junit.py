"""JUnit XML for CI systems, from the run record: one testcase per quantize output, per parity output
x reference, per task check, per gate check (model x platform) and per baseline metric; a run that
stopped on an error is one more testcase with an ``<error>``. ``failures`` counts exactly the checks
that make the run exit 1."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from deploykit.record.model import Check, RunRecord


def render(record: RunRecord) -> str:
    """The record as one JUnit testsuite."""
    suite = ET.Element("testsuite", name=f"deploykit.{record.identity}")
    cases = [_case(record, c) for c in record.checks]
    if record.stopped:
        case = ET.Element("testcase", classname=f"deploykit.{record.name}", name="run", time="0")
        ET.SubElement(case, "error", message=record.error, type=f"exit {record.exit_code}").text = record.error + (
            f"\nhint: {record.hint}" if record.hint else ""
        )
        cases.append(case)
    suite.extend(cases)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(len(record.failed_checks)))
    suite.set("errors", "1" if record.stopped else "0")
    suite.set("skipped", str(sum(c.status == "skipped" for c in record.checks)))
    suite.set("time", f"{sum(s.seconds for s in record.stages if s.status == 'ran'):.6f}")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _case(record: RunRecord, check: Check) -> ET.Element:
    group = "parity" if check.group == "task" else "gate" if check.group == "baseline" else check.group
    case = ET.Element("testcase", classname=f"deploykit.{record.name}.{group}", name=_name(record, check), time="0")
    # the message's other reasons: the deciding metric is in the verdict line already
    others = [r for r in check.message.split("; ") if r and not (check.metric and r.startswith(f"{check.metric} "))]
    text = check.verdict_line() + (f" ({'; '.join(others)})" if others and check.measured is not None else "")
    if record.gate_cached and check.group in ("gate", "baseline"):
        text += " [cached: measured by an earlier run; --remeasure to measure again]"
    if not check.passed:
        ET.SubElement(case, "failure", message=text).text = text
    elif check.status == "skipped":
        ET.SubElement(case, "skipped", message=check.message or "skipped")
    ET.SubElement(case, "system-out").text = text + ("" if check.status != "inconclusive" else " [inconclusive]")
    return case


def _name(record: RunRecord, check: Check) -> str:
    if check.group == "gate":
        return f"{record.name} on {check.name}"  # model x platform: "tiny on default batch 1: fps"
    if check.group == "baseline":
        return f"{record.name} {check.name}"
    return check.name
