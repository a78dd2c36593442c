"""Report renderers: JSON is written by the stages; JUnit XML and Markdown for CI; HTML for people.

Modules: ``terminal``, ``junit``, ``markdown``, ``html`` and ``plots`` (matplotlib's Figure API,
imported only when a report with plots renders), ``baseline`` (load and compare a previous gate
report). What they render is the run record, built beside the pipeline (:mod:`deploykit.record`:
``model``, the record; ``collect``, a record from a run or from the store); strict JSON is
:mod:`deploykit.store.jsonio`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deploykit.record.collect import StageInfo


def write_html(
    workdir: str | Path,
    ref: str,
    output: str | Path,
    stages: Sequence[StageInfo],
    with_plots: bool = True,
    *,
    precision: str | None = None,
    backend: str | None = None,
) -> tuple[Path, str]:
    """Render the run or artifact ``ref`` from the store at ``workdir`` into one self-contained HTML file.

    Args:
        workdir: the artifact store.
        ref: a run name (the config's ``name``), a record identity (``name.precision.backend[.flavour]``)
            or an artifact digest (or a unique prefix).
        output: the HTML file to write.
        stages: what the stages are (``deploykit.stages.default_stages()``; :func:`deploykit.api.write_report`
            passes them).
        with_plots: embed plots (needs matplotlib; without it the page says so).
        precision: pick the run of this precision when the name has several.
        backend: pick the run of this backend when the name has several.

    Returns:
        The file written, and a note naming the other runs when ``ref`` matched several.
    """
    from deploykit.record.collect import from_store
    from deploykit.report.html import render_page

    record, note = from_store(str(workdir), ref, stages, precision=precision, backend=backend)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_page(record, with_plots), encoding="utf-8")
    return output, note
