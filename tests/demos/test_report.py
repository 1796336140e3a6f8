"""The demo sections' one report helper: Markdown tables and figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from sciml.demos.report import save_figure
from sciml.io_utils import markdown_table


def test_markdown_table_formats_real_cells_and_keeps_the_others() -> None:
    table = markdown_table(
        ["name", "count", "score"], [["a", np.int64(3), np.float32(0.25)], ["b", 4, "n/a"]]
    )
    assert table.splitlines() == [
        "| name | count | score |",
        "|---|---|---|",
        "| a | 3 | 0.250 |",
        "| b | 4 | n/a |",
    ]


def test_markdown_table_rejects_a_row_of_another_width() -> None:
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        markdown_table(["a", "b", "c"], [[1.0, 2.0]])


def test_save_figure_writes_and_returns_the_link(tmp_path: Path) -> None:
    fig = Figure()
    fig.add_subplot().plot([0, 1])
    assert save_figure(fig, tmp_path, "line.png") == "line.png"
    assert (tmp_path / "line.png").stat().st_size > 1000
