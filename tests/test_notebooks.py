"""Every notebook runs top to bottom in a fresh kernel, quick and as shipped.

Quick mode (``SCIML_QUICK=1``) may change sizes only, never code paths: the
notebooks read ``QUICK`` in their first code cell alone, where it picks
values (``NAME = small if QUICK else full``); every other cell runs the same
code in both modes (checked below). ``make system-test`` runs each notebook quick;
the shipped mode, what a user who opens the notebook runs (several minutes in
all), is marked ``shipped`` and run by ``make notebooks``.

The kernel plots with Jupyter's own inline backend, as for a user, and every
figure a cell creates must be shown in that cell's outputs: a library that
switched the backend at import, or a figure left undisplayed, fails the run.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
IDS = [p.name for p in NOTEBOOKS]


def _code_cells(path: Path) -> list[str]:
    notebook = nbformat.read(path, as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


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


def _run(path: Path, monkeypatch: pytest.MonkeyPatch, *, quick: bool) -> None:
    if quick:
        monkeypatch.setenv("SCIML_QUICK", "1")
    else:
        monkeypatch.delenv("SCIML_QUICK", raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)  # Jupyter's inline backend, as for a user
    notebook = nbformat.read(path, as_version=4)
    count = nbformat.v4.new_code_cell(_COUNT_FIGURES)
    report = nbformat.v4.new_code_cell("import json\nprint(json.dumps(_sciml_figures))")
    notebook.cells = [count, *notebook.cells, report]
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    cells = notebook.cells[1:-1]
    errors = [
        f"cell {number}: {output.get('ename')}: {output.get('evalue')}"
        for number, cell in enumerate(cells)
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors
    created = json.loads(notebook.cells[-1].outputs[0]["text"])
    unshown = [
        f"cell {number}: {created[cell.source]} figure(s), {_shown_images(cell)} shown"
        for number, cell in enumerate(cells)
        if cell.cell_type == "code" and created.get(cell.source, 0) > _shown_images(cell)
    ]
    assert not unshown


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_quick_mode_changes_values_only(path: Path) -> None:
    """``QUICK`` is read in the first code cell only, and never decides a statement."""
    first, *rest = _code_cells(path)
    assert [number for number, source in enumerate(rest, 1) if "QUICK" in source] == []
    branches = [
        ast.unparse(node).splitlines()[0]
        for node in ast.walk(ast.parse(first))
        if isinstance(node, ast.If | ast.While | ast.For | ast.Assert | ast.Try | ast.With)
        and "QUICK" in ast.unparse(node)
    ]
    assert branches == []


@pytest.mark.system
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs_quick(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(path, monkeypatch, quick=True)


@pytest.mark.shipped
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs_as_shipped(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(path, monkeypatch, quick=False)
