"""What long work tells the person running it: tqdm bars where they are seen, status lines.

Two channels, as batch jobs need them apart from terminals:

* a tqdm bar redraws itself in place, which reads well on a terminal or in a notebook
  and fills a batch job's log with carriage returns: :func:`bar_visible` says whether to
  draw one (on a terminal or in a Jupyter kernel, or wherever the caller insists);
* status lines (what a phase is doing, one line per epoch, a closing summary) go to the
  ``sciml`` loggers at level ``INFO``. A library configures no logging: these lines show
  where the application asks for them. ``sciml``'s command line does, through
  :func:`status_lines`; a notebook or script can call ``logging.basicConfig(level="INFO")``
  or wrap its work in :func:`status_lines` too.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Literal, TextIO

__all__ = [
    "ALWAYS",
    "Milestones",
    "Progress",
    "bar_visible",
    "duration",
    "phase",
    "status_lines",
]

#: The value of a ``progress`` option that draws the bar even where nobody watches.
ALWAYS = "always"

#: A ``progress`` option: ``True`` (a bar where it is seen), ``False`` or :data:`ALWAYS`.
Progress = bool | Literal["always"]


def _in_notebook() -> bool:
    """True inside a Jupyter kernel (where tqdm.auto draws a widget)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def bar_visible(progress: Progress) -> bool:
    """Whether to draw a progress bar for a ``progress`` option.

    Args:
        progress: ``True``: on a terminal (stderr is one) or in a notebook; ``False``:
            never; :data:`ALWAYS`: wherever stderr goes.

    Raises:
        ValueError: For any other value.
    """
    if not (isinstance(progress, bool) or progress == ALWAYS):
        raise ValueError(f"progress must be True, False or {ALWAYS!r}, got {progress!r}")
    if progress == ALWAYS:
        return True
    if not progress:
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty()) or _in_notebook()


@contextlib.contextmanager
def phase(logger: logging.Logger, what: str) -> Iterator[None]:
    """Log ``what`` when a phase starts and how long it took when it ends (``INFO``)."""
    logger.info("%s ...", what)
    start = time.perf_counter()
    yield
    logger.info("%s: done in %s", what, duration(time.perf_counter() - start))


def duration(seconds: float) -> str:
    """``seconds`` as a person reads them: ``"4.2 s"``, ``"3 min 05 s"``, ``"2 h 01 min"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Milestones:
    """A status line each time another tenth of some work is done: a bar for a batch log.

    ``advance`` may be called from several threads.

    Args:
        logger: Where the lines go (``INFO``).
        what: What the work is (each line starts with it).
        total: Units of work in all (>= 0; none: no line).
        unit: The unit's name, plural.
        enabled: Log anything (e.g. ``not bar_visible(progress)``: where no bar shows).
    """

    def __init__(
        self, logger: logging.Logger, what: str, total: int, *, unit: str, enabled: bool
    ) -> None:
        """Start counting (and the clock) at zero."""
        if total < 0:
            raise ValueError(f"Milestones.total must be >= 0, got {total}")
        self.logger, self.what, self.total, self.unit = logger, what, total, unit
        self.enabled, self.done, self.tenths = enabled, 0, 0
        self.start = time.perf_counter()
        self.lock = threading.Lock()

    def advance(self, amount: int) -> None:
        """Count ``amount`` more units; log a line if another tenth is done."""
        with self.lock:
            self.done += amount
            tenths = min(10, self.done * 10 // self.total) if self.total else 0
            if tenths <= self.tenths:
                return
            self.tenths = tenths
            if self.enabled:
                took = duration(time.perf_counter() - self.start)
                self.logger.info(
                    "%s: %d%% (%d/%d %s) after %s",
                    self.what,
                    min(self.done, self.total) * 100 // self.total,
                    self.done,
                    self.total,
                    self.unit,
                    took,
                )


class _Stderr(logging.StreamHandler):
    """Writes to what ``sys.stderr`` is when a line is emitted (pytest and Jupyter swap it)."""

    @property
    def stream(self) -> TextIO:
        """The current ``sys.stderr``."""
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """Ignored: the stream is always the current ``sys.stderr``."""


@contextlib.contextmanager
def status_lines(level: int = logging.INFO) -> Iterator[None]:
    """Print the ``sciml`` loggers' lines at ``level`` and above on stderr while the block runs.

    The lines are printed as they are (no level or logger name); they do not propagate to
    the root logger meanwhile (a configured root would print them twice). The loggers'
    settings are restored afterwards.
    """
    logger = logging.getLogger("sciml")
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    level_before, propagate_before = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level_before)
        logger.propagate = propagate_before
