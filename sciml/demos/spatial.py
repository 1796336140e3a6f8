"""``sciml demo`` section: a 2-process spatially parallel forward/backward check."""

from __future__ import annotations

import pathlib
import time

import torch

from sciml.demos.report import save_figure
from sciml.distributed import spawn
from sciml.io_utils import markdown_table
from sciml.models import UNet
from sciml.spatial_parallel.plots import plot_decomposition
from sciml.spatial_parallel.testing import check_parallel


def demo(outdir: pathlib.Path, *, quick: bool = False) -> str:
    """Split a small 3D U-Net's input over 2 processes, compare with one device.

    Writes ``spatial_decomposition.png`` under ``outdir`` and returns Markdown.
    """
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    shape = (1, 2, 16, 16, 8) if quick else (2, 2, 32, 24, 16)  # U-Net depth 2: sizes divide by 4
    figure = save_figure(
        plot_decomposition((shape[2], shape[3]), (2, 1)), outdir, "spatial_decomposition.png"
    )
    start = time.perf_counter()
    torch.manual_seed(0)
    model = UNet(shape[1], 2, base_channels=4, depth=2)
    results = spawn(check_parallel, 2, {"depth": 2}, model, shape)
    wall = time.perf_counter() - start
    table = markdown_table(
        ["rank", "block (D, H, W)", "output", "input grad", "param grads", "bound", "fwd+bwd (ms)"],
        [
            [
                r.rank,
                r.block,
                f"{r.worst('out'):.1e}",
                f"{r.worst('xgrad'):.1e}",
                f"{r.worst('grad:'):.1e}",
                f"{max(r.bounds.values()):.0e}",
                f"{r.seconds * 1e3:.0f}",
            ]
            for r in results
        ],
    )
    ok = all(r.ok for r in results)
    return "\n".join(
        [
            "## Spatial parallelism",
            "",
            f"A 3D U-Net (depth 2, float64) on a {shape} volume split along depth over 2 "
            f"gloo processes, against the same model on one process: "
            f"**{'match' if ok else 'MISMATCH'}** (largest relative differences below, each "
            f"within its bound derived from float64 eps and the problem size: "
            f"sciml.spatial_parallel.testing).",
            "",
            f"![decomposition]({figure})",
            "",
            table,
            "",
            f"Launching 2 processes and running the check took {wall:.1f} s.",
        ]
    )
