"""examples/notebook.ipynb executes headless, top to bottom: it converts a module held in memory at
FP32 and INT8 (calibrated from an iterable), shows progress while it runs, renders the result and the
report, and reruns from the cache; no warning about ipywidgets, no error."""

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"


@pytest.mark.e2e
def test_notebook_runs_headless():
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install nbclient)")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install ipykernel)")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    updates: list[str] = []  # the progress block's redraws, as the kernel sent them

    class Recording(nbclient.NotebookClient):
        def process_message(self, msg, cell, cell_index):  # type: ignore[no-untyped-def]
            if msg.get("msg_type") == "update_display_data":
                updates.append(msg["content"]["data"].get("text/plain", ""))
            return super().process_message(msg, cell, cell_index)

    # generous bounds: a kernel starting beside a loaded machine's other work must not fail the test
    # (nbclient's default start-up timeout is 60 s); they only stop a hung notebook
    client = Recording(
        nb,
        timeout=1800,
        startup_timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in outputs if o.output_type == "display_data")
    text = "".join(o.get("text", "") for o in outputs)
    assert "<table>" in html and "data:image/png;base64," in html  # the result's summary, then the report
    assert "int8" in html and "fp32" in html
    # progress: a block per convert that ends as one line per stage (the bar gone), drawn while it ran
    assert "export ran" in shown and "quantize ran" in shown and "gate reused" in shown
    assert any("parity samples [" in u for u in updates) and not any("[" in line for line in shown.splitlines())
    assert "pass - validation data" in text and "FPS INT8" in text
    assert "'quantize': 'reused'" in text  # the rerun from the cache
    everything = html + shown + text
    assert "ipywidgets" not in everything and "IProgress" not in everything
