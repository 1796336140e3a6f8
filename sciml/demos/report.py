"""The one report helper of the demo sections: Markdown tables and figures.

Every section builds its tables with :func:`markdown_table` and writes its
figures with :func:`save_figure`, which returns the figure's link relative to
the report's folder.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from sciml import io_utils

__all__ = ["markdown_table", "save_figure"]


def markdown_table(
    header: Sequence[str], rows: Iterable[Sequence[object]], *, floats: str = ".3f"
) -> str:
    """A Markdown table; real non-integer cells are formatted with ``floats``, others with ``str``.

    Args:
        header: The column names.
        rows: The rows, each with one cell per column.
        floats: Format spec of float cells (pass strings for other formats).

    Raises:
        ValueError: A row whose number of cells differs from the header's.
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a table row has {len(row)} cells for {len(header)} columns: {row}")
        cells = [format(c, floats) if _is_float(c) else str(c) for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def save_figure(fig: Figure, outdir: Path, name: str, *, dpi: int = 90) -> str:
    """Write ``fig`` atomically to ``outdir/name``, close it and return ``name`` (the link)."""
    io_utils.save_figure(fig, Path(outdir) / name, dpi=dpi)
    plt.close(fig)
    return name


def _is_float(cell: object) -> bool:
    return isinstance(cell, numbers.Real) and not isinstance(cell, numbers.Integral)
