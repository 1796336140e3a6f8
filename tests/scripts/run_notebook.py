"""Run notebooks top to bottom in a fresh kernel and say what went wrong, as JSON.

``python tests/scripts/run_notebook.py [--save DIR] NOTEBOOK...`` prints one JSON object per
notebook (``{"notebook", "seconds", "errors", "stderr", "unshown", "kernel"}``, the last the
kernel's ``sys.executable``) and exits 0 when none has errors, stderr or unshown figures;
``--save DIR`` also writes each executed notebook, outputs included, to DIR.
It needs nbformat and nbclient only, which the ``notebooks`` extra brings (through
JupyterLab), so it runs in an environment of the runtime plus ``[notebooks]`` as well as in
the test venv; ``tests/test_notebooks.py`` calls :func:`execute` in-process. The kernel is
the Python running this file (``python3``: jupyter_client starts it with ``sys.executable``)
and plots with Jupyter's inline backend, as for a user; quick mode is the caller's
``SCIML_QUICK``.

What counts as wrong: an error output; any output on stderr (a warning, a log line, a
``TqdmWarning`` where a progress bar should be drawn); a figure that a cell creates and does
not show in its outputs (a library that switched the backend at import, or a figure left
undisplayed).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

# Run before the notebook's cells: counts the matplotlib figures each cell
# creates, by the cell's source.
_COUNT_FIGURES = """
import matplotlib.figure
from IPython import get_ipython

_sciml_figures, _sciml_cell = {}, [None]
_sciml_init = matplotlib.figure.Figure.__init__


def _sciml_counting_init(self, *args, **kwargs):
    _sciml_init(self, *args, **kwargs)
    _sciml_figures[_sciml_cell[0]] = _sciml_figures.get(_sciml_cell[0], 0) + 1


def _sciml_cell_starts(info):
    _sciml_cell[0] = info.raw_cell


matplotlib.figure.Figure.__init__ = _sciml_counting_init
get_ipython().events.register("pre_run_cell", _sciml_cell_starts)
"""


def _shown_images(cell: nbformat.NotebookNode) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for output in cell.get("outputs", [])
        if output.get("output_type") in ("display_data", "execute_result")
    )


def execute(path: Path, timeout: int = 600, save: Path | None = None) -> dict[str, Any]:
    """Run the notebook at ``path`` in its folder; errors, stderr and unshown figures by cell.

    Cells are numbered as in the notebook, from 0, markdown cells included. ``save``: a
    folder to write the executed notebook to, under its own name.
    """
    start = time.perf_counter()
    notebook = nbformat.read(path, as_version=4)
    count = nbformat.v4.new_code_cell(_COUNT_FIGURES)
    report = nbformat.v4.new_code_cell(
        "import json, sys\nprint(json.dumps({'figures': _sciml_figures, 'kernel': sys.executable}))"
    )
    notebook.cells = [count, *notebook.cells, report]
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    failed = None
    try:
        client.execute()
    except Exception as error:  # noqa: BLE001 - the error output below names it too
        failed = f"{type(error).__name__}: {str(error)[-2000:]}"
    cells = notebook.cells[1:-1]
    outputs = [
        (number, output) for number, cell in enumerate(cells) for output in cell.get("outputs", [])
    ]
    errors = [
        f"cell {number}: {output.get('ename')}: {output.get('evalue')}"
        for number, output in outputs
        if output.get("output_type") == "error"
    ]
    if failed and not errors:
        errors.append(failed)
    stderr = [
        f"cell {number}: {output.get('text', '')[-2000:]}"
        for number, output in outputs
        if output.get("output_type") == "stream" and output.get("name") == "stderr"
    ]
    unshown: list[str] = []
    kernel = None
    if failed is None:
        reported = json.loads(notebook.cells[-1].outputs[0]["text"])
        created, kernel = reported["figures"], reported["kernel"]
        unshown = [
            f"cell {number}: {created[cell.source]} figure(s), {_shown_images(cell)} shown"
            for number, cell in enumerate(cells)
            if cell.cell_type == "code" and created.get(cell.source, 0) > _shown_images(cell)
        ]
    if save is not None:
        executed = nbformat.v4.new_notebook(cells=cells, metadata=notebook.metadata)
        nbformat.write(executed, Path(save) / path.name)
    return {
        "notebook": path.name,
        "seconds": round(time.perf_counter() - start, 1),
        "errors": errors,
        "stderr": stderr,
        "unshown": unshown,
        "kernel": kernel,
    }


def main(arguments: list[str]) -> int:
    """Run each notebook, print its result as one JSON line; 1 when any went wrong."""
    save = None
    if arguments[:1] == ["--save"]:
        save, arguments = Path(arguments[1]), arguments[2:]
        save.mkdir(parents=True, exist_ok=True)
    ok = True
    for name in arguments:
        result = execute(Path(name).resolve(), save=save)
        print(json.dumps(result), flush=True)
        ok = ok and not (result["errors"] or result["stderr"] or result["unshown"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
