"""The notebook runs top to bottom on the fixtures (any cell error fails) and is stored clean."""

from __future__ import annotations

import json

import pytest

from conftest import REPO

NOTEBOOK = REPO / "notebooks" / "cost_coefficient.ipynb"
# Per cell, only against a hung kernel: the notebook's speed is not what this test checks.
CELL_TIMEOUT_S = 600
# nbformat, nbclient and jupyter_client are imported by the test that runs the notebook, not at collection: importing
# nbformat validates with jsonschema, whose URI checker builds a grammar at import (~4 s of CPU in every test worker).


def test_notebook_is_stored_without_outputs():
    # the file as JSON (nbformat 4: "cells", each with its "cell_type", a code cell's "outputs" and "execution_count")
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code, "no code cell found"
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None, "".join(cell["source"])[:60]


@pytest.mark.slow  # a kernel running every cell: in `make test`, not in the edit-test loop (`make check`)
def test_notebook_executes_without_errors():
    import nbformat
    from jupyter_client.kernelspec import NATIVE_KERNEL_NAME
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # The native kernel ("python3", ipykernel's own spec, argv "python -m ipykernel_launcher") is started by
    # jupyter_client with this very interpreter (it swaps "python" for sys.executable), so the kernel imports the
    # venv's nsys_cc in a clean checkout without registering anything.
    assert nb.metadata.kernelspec.name == NATIVE_KERNEL_NAME
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=NATIVE_KERNEL_NAME,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4, "the plots were not drawn inline"
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    for name in ("tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"):
        assert name in text
