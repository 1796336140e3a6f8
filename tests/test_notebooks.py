"""Every notebook runs top to bottom in a fresh kernel, quick and as shipped.

Quick mode (``SCIML_QUICK=1``) may change sizes only, never code paths: the
notebooks read ``QUICK`` in their first code cell alone, where it picks
values (``NAME = small if QUICK else full``); every other cell runs the same
code in both modes (checked below). ``make notebooks`` runs each notebook quick
in the development environment (marked ``notebook``) and as shipped, what a user who
opens the notebook runs (several minutes in all; marked ``shipped``); ``make
system-test`` runs them quick twice, in a venv of the runtime plus the ``notebooks``
extra alone (``tests/test_extras.py``) and in the documentation's build
(``tests/test_docs_site.py``).

The kernel plots with Jupyter's own inline backend, as for a user, and every
figure a cell creates must be shown in that cell's outputs: a library that
switched the backend at import, or a figure left undisplayed, fails the run; so does
any output on stderr (a warning, or tqdm's ``TqdmWarning`` where a progress bar should
be drawn). ``tests/scripts/run_notebook.py`` runs them; ``tests/test_extras.py`` runs
them again in a venv of the runtime plus the ``notebooks`` extra alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

from tests.scripts.run_notebook import execute

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
IDS = [p.name for p in NOTEBOOKS]


def _code_cells(path: Path) -> list[str]:
    notebook = nbformat.read(path, as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def _run(path: Path, monkeypatch: pytest.MonkeyPatch, *, quick: bool) -> None:
    if quick:
        monkeypatch.setenv("SCIML_QUICK", "1")
    else:
        monkeypatch.delenv("SCIML_QUICK", raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)  # Jupyter's inline backend, as for a user
    result = execute(path, timeout=600)
    assert result["errors"] == []
    assert result["stderr"] == []  # warnings too: a TqdmWarning where a bar should be drawn
    assert result["unshown"] == []


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


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs_quick(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(path, monkeypatch, quick=True)


@pytest.mark.shipped
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs_as_shipped(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(path, monkeypatch, quick=False)
