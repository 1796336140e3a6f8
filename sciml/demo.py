"""``sciml demo``: every workflow end to end on the bundled data, one report.

Each section is a module with ``demo(outdir: Path, *, quick: bool) -> str``
that writes its figures under ``outdir`` and returns the Markdown of its part
of ``report.md`` (figures linked by paths relative to ``outdir``).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from pathlib import Path

from sciml.io_utils import atomic_write_text

#: Section name -> module providing ``demo(outdir, *, quick)``.
SECTIONS: dict[str, str] = {
    "spine": "sciml.spine_demo",
    "spatial": "sciml.spatial_parallel.demo",
    "weather": "sciml.weather.demo",
    "geo": "sciml.geo.demo",
}


def run_demo(
    outdir: Path | str = "runs/demo", *, quick: bool = False, only: Sequence[str] | None = None
) -> Path:
    """Run the demo sections and write ``outdir/report.md``.

    Args:
        outdir: Folder for the report and figures (created if needed).
        quick: Smallest sizes, for smoke tests.
        only: Names of the sections to run (default: all of :data:`SECTIONS`).

    Returns:
        The path of the written report.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    names = list(SECTIONS) if not only else list(only)
    unknown = [name for name in names if name not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown demo section(s) {unknown}; available: {sorted(SECTIONS)}")
    parts = ["# sciml demo report", ""]
    for name in names:
        module = importlib.import_module(SECTIONS[name])
        start = time.perf_counter()
        markdown = module.demo(outdir, quick=quick)
        elapsed = time.perf_counter() - start
        parts += [markdown.rstrip(), "", f"_Section `{name}` took {elapsed:.1f} s._", ""]
        print(f"[demo] {name}: done in {elapsed:.1f} s")
    report = outdir / "report.md"
    atomic_write_text(report, "\n".join(parts))
    return report
