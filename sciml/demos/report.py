"""The one report helper of the demo sections: figures linked from the report.

Every section writes its figures with :func:`save_figure`, which returns the
figure's link relative to the report's folder; tables come from
:func:`sciml.io_utils.markdown_table`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from sciml import io_utils

__all__ = ["save_figure"]


def save_figure(fig: Figure, outdir: Path, name: str, *, dpi: int = 90) -> str:
    """Write ``fig`` atomically to ``outdir/name``, close it and return ``name`` (the link)."""
    io_utils.save_figure(fig, Path(outdir) / name, dpi=dpi)
    plt.close(fig)
    return name
