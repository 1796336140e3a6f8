"""``sciml demo``: every workflow end to end on the bundled data, one report.

Each section is a module of this package (``spine``, ``spatial``, ``weather``,
``geo``, ``volumes``) with ``demo(outdir: Path, *, quick: bool) -> str`` that writes its
figures under ``outdir`` and returns the Markdown of its part of ``report.md``
(figures linked by paths relative to ``outdir``; tables and figures through
:mod:`sciml.demos.report`); ``report.html`` beside it is the same report as one HTML page
(:mod:`sciml.demos.html`), linking the same figures. The sections sit on top of the library: no
library module imports them. ``sciml demo --only SECTION`` writes its report,
figures and runs to a folder of its own (:func:`report_folder`).

Preemption (SIGUSR1/SIGTERM, as Slurm sends them): :func:`run_demo` records
the signal for the whole run, and :func:`sciml.training.fit` inside a section
sees it too (signal flags nest), checkpoints and returns ``"interrupted"``. A
section that trains passes the result to :func:`stop_if_interrupted`, which
raises :class:`DemoInterrupted`; a section that received the signal outside
training simply finishes, and one that fails after the signal (its worker
processes got it too) counts as interrupted. Either way :func:`run_demo` runs no further section,
writes ``report.md`` marked as interrupted (the finished sections only) and
raises :class:`DemoInterrupted`, on which ``sciml demo`` exits with
:data:`sciml.training.EXIT_REQUEUE`. Sections train with ``resume=True`` into
their own run folder, so running the same command again resumes::

    result = fit(model, optimizer, data, loss_fn, run_dir=outdir / "mine", ...)
    stop_if_interrupted(result, "mine")  # before reading result.history
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sciml.distributed import PreemptionFlag
from sciml.io_utils import atomic_write_text

if TYPE_CHECKING:
    from sciml.training import TrainResult

__all__ = [
    "SECTIONS",
    "DemoInterrupted",
    "report_folder",
    "run_demo",
    "stop_if_interrupted",
    "write_report",
]

#: Section name -> module providing ``demo(outdir, *, quick)``.
SECTIONS: dict[str, str] = {
    "spine": "sciml.demos.spine",
    "spatial": "sciml.demos.spatial",
    "weather": "sciml.demos.weather",
    "geo": "sciml.demos.geo",
    "volumes": "sciml.demos.volumes",
}


class DemoInterrupted(RuntimeError):
    """A demo section stopped on SIGUSR1/SIGTERM after checkpointing; rerunning resumes.

    Attributes:
        section: The section that was running.
        report: The report written so far (marked as interrupted), once
            :func:`run_demo` has written it.
    """

    def __init__(self, section: str, detail: str) -> None:
        """Name the interrupted ``section`` and what stopped it (``detail``)."""
        super().__init__(f"demo section {section!r} interrupted by a signal ({detail})")
        self.section = section
        self.report: Path | None = None


def stop_if_interrupted(result: TrainResult, section: str) -> None:
    """Raise :class:`DemoInterrupted` if a training result says it was interrupted.

    Args:
        result: The result of :func:`sciml.training.fit`.
        section: The section's name in :data:`SECTIONS`.
    """
    if result.status == "interrupted":
        raise DemoInterrupted(section, f"checkpoint {result.checkpoint}")


def _sections(only: Sequence[str] | None) -> list[str]:
    names = list(SECTIONS) if not only else list(dict.fromkeys(only))
    unknown = [name for name in names if name not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown demo section(s) {unknown}; available: {sorted(SECTIONS)}")
    return names


def report_folder(outdir: Path | str, only: Sequence[str] | None = None) -> Path:
    """The folder :func:`run_demo` writes its report, figures and runs to.

    Every section: ``outdir`` itself. Some sections: their own folder
    ``outdir/only-<section>[-<section>...]``, so that a partial run never
    overwrites the full run's report or the figures it links.

    Raises:
        ValueError: For an unknown section name.
    """
    names = _sections(only)
    if set(names) == set(SECTIONS):
        return Path(outdir)
    return Path(outdir) / "only-{}".format("-".join(names))


def run_demo(
    outdir: Path | str = "runs/demo", *, quick: bool = False, only: Sequence[str] | None = None
) -> Path:
    """Run the demo sections and write ``report.md`` and ``report.html`` in :func:`report_folder`.

    Args:
        outdir: Folder for the report and figures (created if needed); a run
            of some sections only writes to its own subfolder
            (:func:`report_folder`).
        quick: Smallest sizes, for smoke tests.
        only: Names of the sections to run (default: all of :data:`SECTIONS`).

    Returns:
        The path of the written report.

    Raises:
        ValueError: For an unknown section name (before anything runs).
        DemoInterrupted: On SIGUSR1/SIGTERM, after the running section
            checkpointed and the partial report was written.
    """
    names = _sections(only)
    outdir = report_folder(outdir, names)
    outdir.mkdir(parents=True, exist_ok=True)
    report = outdir / "report.md"
    parts = ["# sciml demo report", ""]
    with PreemptionFlag() as signals:
        for name in names:
            start = time.perf_counter()
            try:
                markdown = importlib.import_module(SECTIONS[name]).demo(outdir, quick=quick)
            except DemoInterrupted as stop:
                _write_interrupted(report, parts, stop)
                raise
            except Exception as err:
                if signals.received is None:
                    raise
                # e.g. worker processes ended by the same SIGTERM: requeue, do not fail
                failed = DemoInterrupted(
                    name, f"signal {signals.received}; the section failed: {err}"
                )
                _write_interrupted(report, parts, failed)
                raise failed from err
            elapsed = time.perf_counter() - start
            parts += [markdown.rstrip(), "", f"_Section `{name}` took {elapsed:.1f} s._", ""]
            print(f"[demo] {name}: done in {elapsed:.1f} s")
            if signals.received is not None and name != names[-1]:
                after = DemoInterrupted(name, f"signal {signals.received} after the section")
                _write_interrupted(report, parts, after)
                raise after
    write_report(report, "\n".join(parts))
    return report


def write_report(report: Path, markdown: str) -> None:
    """Write ``markdown`` to ``report`` and the same report as HTML beside it, each atomically.

    ``report.html`` (:func:`sciml.demos.html.markdown_to_html`) links the same figures,
    by the same paths relative to the report's folder.
    """
    from sciml.demos.html import markdown_to_html

    atomic_write_text(report, markdown)
    atomic_write_text(report.with_suffix(".html"), markdown_to_html(markdown))


def _write_interrupted(report: Path, parts: list[str], stop: DemoInterrupted) -> None:
    note = (
        f"**Interrupted** ({stop}): later sections did not run. Run the same command "
        "again to resume from the checkpoints."
    )
    write_report(report, "\n".join([*parts, note, ""]))
    stop.report = report
