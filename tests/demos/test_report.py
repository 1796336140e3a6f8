"""The demo sections' one report helper: Markdown tables and figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from sciml.demos.html import markdown_to_html
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


def test_the_html_report_converts_what_the_sections_write() -> None:
    markdown = "\n".join(
        [
            "# sciml demo report",
            "",
            "Some `a_b <c>` text, **bold** and a [link](x.csv); 3 < 4 & _emphasis_.",
            "over two lines",
            "",
            "![training](volumes/losses.png)",
            "",
            "- first item `x_y`",
            "  continued",
            "- second",
            "",
            markdown_table(["name", "value"], [["a_1", 0.5]]),
            "",
            "```",
            "  grid  d x D <pre>",
            "```",
            "_Section `spine` took 1.0 s._",
        ]
    )
    page = markdown_to_html(markdown)
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    body = page[page.index("<body>") + 7 : page.index("</body>")].splitlines()
    assert body == [
        "<h1>sciml demo report</h1>",
        "<p>Some <code>a_b &lt;c&gt;</code> text, <strong>bold</strong> and a "
        '<a href="x.csv">link</a>; 3 &lt; 4 &amp; <em>emphasis</em>. over two lines</p>',
        '<p><img src="volumes/losses.png" alt="training"></p>',
        "<ul>",
        "<li>first item <code>x_y</code> continued</li>",
        "<li>second</li>",
        "</ul>",
        "<table>",
        "<thead><tr><th>name</th><th>value</th></tr></thead>",
        "<tbody>",
        "<tr><td>a_1</td><td>0.500</td></tr>",
        "</tbody>",
        "</table>",
        "<pre><code>  grid  d x D &lt;pre&gt;</code></pre>",
        "<p><em>Section <code>spine</code> took 1.0 s.</em></p>",
    ]
