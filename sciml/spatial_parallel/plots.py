"""Figures: the decomposition of a volume and the halos a layer needs."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from sciml.spatial_parallel.partition import Window, block_bounds, window_plan


def plot_decomposition(
    shape: tuple[int, int], grid: tuple[int, int], *, window: Window | None = None
) -> Figure:
    """Plot the blocks of a ``(depth, height)`` slice split over ``grid`` ranks, with halos.

    Each block's halo is the extra input its output block reads for ``window``.

    Args:
        shape: Global ``(D, H)`` sizes of the slice.
        grid: Ranks along ``(depth, height)``.
        window: Layer geometry (default: a 3x3x3 'same' convolution).
    """
    window = window or Window(3, 1, 1, 1, 1)
    plans = [
        window_plan(window, size, parts, layer="conv", dim=name)
        for size, parts, name in zip(shape, grid, ("depth", "height"), strict=True)
    ]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    colors = plt.get_cmap("tab10")
    for d, (d0, d1) in enumerate(block_bounds(shape[0], grid[0])):
        for h, (h0, h1) in enumerate(block_bounds(shape[1], grid[1])):
            rank = d * grid[1] + h
            color = colors(rank % 10)
            axes[0].add_patch(Rectangle((h0, d0), h1 - h0, d1 - d0, color=color, alpha=0.55))
            axes[0].text(
                (h0 + h1) / 2,
                (d0 + d1) / 2,
                f"rank {rank}\n{d1 - d0}x{h1 - h0}",
                ha="center",
                va="center",
            )
            (a, b), (c, e) = plans[0].needs[d], plans[1].needs[h]
            axes[1].add_patch(
                Rectangle(
                    (c, a),
                    e - c,
                    b - a,
                    fill=False,
                    lw=2,
                    ec=color,
                    ls="--",
                    label=f"rank {rank} reads",
                )
            )
            axes[1].add_patch(Rectangle((h0, d0), h1 - h0, d1 - d0, color=color, alpha=0.25))
    for ax, title in zip(
        axes, ("blocks (torch.tensor_split order)", "halos of a 3x3 conv"), strict=True
    ):
        ax.set_xlim(-1.5, shape[1] + 1.5)
        ax.set_ylim(shape[0] + 1.5, -1.5)
        ax.set_xlabel("height index")
        ax.set_ylabel("depth index")
        ax.set_title(title)
        ax.add_patch(Rectangle((0, 0), shape[1], shape[0], fill=False, ec="k", lw=1))
        ax.set_aspect("equal")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig
