"""Matplotlib maps of images, road masks, labels and predictions (in CRS coordinates)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from sciml.geo.grid import RasterGrid

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from sciml.geo.experiment import ExperimentResult
    from sciml.geo.scene import Scene


#: Inches above a row of maps for a two-line title.
_TITLE_ROOM = 0.9


def _extent(grid: RasterGrid) -> tuple[float, float, float, float]:
    left, bottom, right, top = grid.bounds
    return left, right, bottom, top


def _rgb(image: xr.DataArray) -> np.ndarray:
    values = np.asarray(image)[:3].transpose(1, 2, 0)
    return values if values.dtype == np.uint8 else np.clip(values, 0, 1)


def show_image(image: xr.DataArray, ax: Any, *, title: str = "") -> None:
    """Draw an RGB ``(band, y, x)`` image in its CRS coordinates."""
    ax.imshow(_rgb(image), extent=_extent(RasterGrid.from_like(image)))
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])


def overlay(
    image: xr.DataArray,
    layer: xr.DataArray | np.ndarray,
    ax: Any,
    *,
    color: str = "yellow",
    alpha: float = 0.45,
    title: str = "",
) -> None:
    """Draw ``image`` with the True (or > 0.5) pixels of ``layer`` tinted in ``color``."""
    from matplotlib.colors import to_rgba

    show_image(image, ax, title=title)
    values = np.asarray(layer)
    on = values > 0.5 if values.dtype != bool else values
    tint = np.zeros((*on.shape, 4))
    tint[on] = to_rgba(color, alpha)
    ax.imshow(tint, extent=_extent(RasterGrid.from_like(image)))


def labels_map(labels: xr.DataArray, ax: Any, *, title: str = "", ignore_index: int = 255) -> None:
    """Draw labels: crowns green, background grey, ignored (off the mask) white."""
    from matplotlib.colors import ListedColormap

    values = np.asarray(labels).astype(int)
    codes = np.where(values == ignore_index, 0, values + 1)
    cmap = ListedColormap(["white", "0.6", "forestgreen"])
    ax.imshow(codes, cmap=cmap, vmin=0, vmax=2, extent=_extent(RasterGrid.from_like(labels)))
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])


def map_row(columns: int, like: xr.DataArray, *, width: float = 4.0) -> tuple[Figure, Any]:
    """A figure of ``columns`` maps of raster ``like``'s extent side by side, titles included.

    A row of equal-aspect maps in a figure too short for them fills its height with
    the maps and clips their titles; this one is as tall as a map ``width`` wide plus
    room for a two-line title.

    Args:
        columns: Number of panels.
        like: A raster (``(y, x)`` or ``(band, y, x)`` with its grid) whose extent the
            panels show.
        width: Width of each panel in inches.

    Returns:
        The figure and its ``columns`` axes.
    """
    import matplotlib.pyplot as plt

    if columns < 1 or not width > 0:
        raise ValueError(f"map_row needs columns >= 1 and width > 0, got {columns} and {width}")
    left, right, bottom, top = _extent(RasterGrid.from_like(like))
    aspect = abs(top - bottom) / abs(right - left)
    fig, axes = plt.subplots(
        1,
        columns,
        figsize=(width * columns, width * aspect + _TITLE_ROOM),
        squeeze=False,
        constrained_layout=True,
    )
    return fig, axes[0]


def experiment_figure(scene: Scene, results: dict[str, ExperimentResult]) -> Figure:
    """Image with roads mask, complete truth, inventory labels and both models' predictions."""
    fig, axes = map_row(5, scene.image)
    overlay(scene.image, scene.mask, axes[0], title="image + road mask")
    labels_map(scene.labels(masked=True), axes[1], title="inventory labels (white: unknown)")
    labels_map(scene.truth, axes[2], title="complete truth (all trees)")
    for ax, name in zip(axes[3:], ("masked", "unmasked"), strict=True):
        result = results[name]
        overlay(
            scene.image,
            result.probability,
            ax,
            color="magenta",
            title=f"{name}: recall of all trees {result.tree_recall:.2f}",
        )
    return fig
