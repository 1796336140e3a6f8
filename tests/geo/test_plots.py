"""Map figures: every title inside the figure, maps in the raster's coordinates."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from sciml.datasets import sample_path
from sciml.geo.plots import map_row, overlay
from sciml.geo.rasters import read_image


@pytest.mark.parametrize("columns", [2, 3, 5])
def test_map_row_keeps_every_title_inside_the_figure(columns: int) -> None:
    image = read_image(sample_path("osbs_image"))
    fig, axes = map_row(columns, image)
    for ax in axes:
        overlay(image, image[0] > 128, ax, title="crown boxes known left of column 150")
    fig.canvas.draw()
    inside = fig.bbox
    for ax in axes:
        title = ax.title.get_window_extent()
        assert inside.x0 <= title.x0 and title.x1 <= inside.x1
        assert inside.y0 <= title.y0 and title.y1 <= inside.y1
    plt.close(fig)


def test_map_row_refuses_no_panels() -> None:
    image = read_image(sample_path("osbs_image"))
    with pytest.raises(ValueError, match="columns >= 1"):
        map_row(0, image)
