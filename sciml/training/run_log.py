"""Metrics of a training run, behind one interface: ``log(metrics, step)`` and ``close()``.

As in torchtitan's ``components/metrics.py``, every destination is a
:class:`MetricLogger`, and the training loop talks to one of them, a
:class:`MetricsLog` that fans out to the others:

* :class:`CsvLogger`: ``metrics.csv`` in long form (epoch, step, split, metric, value);
* :class:`TensorBoardLogger`: TensorBoard scalars, when TensorBoard is installed.

Metric names are ``"<split>/<name>"`` (``"train_step/loss"``, ``"epoch/val_loss"``):
they are TensorBoard's tags, and the CSV's ``split`` and ``metric`` columns.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from sciml.io_utils import atomic_write_text, write_errors

__all__ = [
    "METRIC_COLUMNS",
    "CsvLogger",
    "MetricLogger",
    "MetricsLog",
    "TensorBoardLogger",
    "open_metrics_log",
]

#: Columns of ``metrics.csv``.
METRIC_COLUMNS = ("epoch", "step", "split", "metric", "value")


class MetricLogger(Protocol):
    """Where metrics go: one call per step, then ``close`` once."""

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` (``"<split>/<name>"`` -> value) at optimiser step ``step``."""

    def close(self) -> None:
        """Flush and release the destination."""


def _split_name(key: str) -> tuple[str, str]:
    split, slash, name = key.partition("/")
    if not slash or not split or not name:
        raise ValueError(f"metric names must read '<split>/<name>', got {key!r}")
    return split, name


class CsvLogger:
    """``metrics.csv`` in long form, one row per metric.

    Args:
        path: The CSV file.
        rows: Rows to keep from an earlier run (those its checkpoint has seen);
            the rest are dropped, so that a resumed run does not log them twice.
        epoch: Gives the epoch of the rows being logged.
    """

    def __init__(self, path: Path, *, rows: int, epoch: Callable[[], int]) -> None:
        """Rewrite ``path`` with its header and the first ``rows`` rows kept."""
        self.path, self.epoch = path, epoch
        kept: list[list[str]] = []
        if path.exists():
            with open(path, newline="") as handle:
                kept = list(csv.reader(handle))[1 : rows + 1]
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(METRIC_COLUMNS)
        writer.writerows(kept)
        atomic_write_text(path, text.getvalue())  # a failed rewrite keeps the old rows

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Append one row per metric.

        Raises:
            sciml.io_utils.WriteError: The file system failed the write (named).
        """
        epoch = self.epoch()
        with write_errors(self.path), open(self.path, "a", newline="") as handle:
            writer = csv.writer(handle)
            for key, value in metrics.items():
                writer.writerow((epoch, step, *_split_name(key), repr(float(value))))

    def close(self) -> None:
        """Nothing to release: every row is written when it is logged."""


class TensorBoardLogger:
    """TensorBoard scalars in ``folder``, tagged with the metric names."""

    def __init__(self, folder: Path) -> None:
        """Open an event writer in ``folder``."""
        from torch.utils.tensorboard import SummaryWriter

        self.writer: Any = SummaryWriter(str(folder), purge_step=None)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Add one scalar per metric."""
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        """Flush the event file."""
        self.writer.close()


class MetricsLog:
    """The run's loggers as one, counting the rows logged (on every rank).

    Args:
        loggers: Destinations (none on ranks other than 0).
        rows: Rows logged before (a resumed run's count).
    """

    def __init__(self, loggers: Sequence[MetricLogger], *, rows: int) -> None:
        """Gather ``loggers``, counting from ``rows``."""
        self.loggers, self.rows = list(loggers), rows

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Pass ``metrics`` on to every logger."""
        for key in metrics:
            _split_name(key)
        self.rows += len(metrics)
        for logger in self.loggers:
            logger.log(metrics, step)

    def close(self) -> None:
        """Close every logger."""
        for logger in self.loggers:
            logger.close()


def open_metrics_log(
    run_dir: Path, *, rows: int, tensorboard: bool, enabled: bool, epoch: Callable[[], int]
) -> MetricsLog:
    """The metrics log of a run folder: ``metrics.csv``, plus TensorBoard when asked and installed.

    Args:
        run_dir: The run folder.
        rows: Rows of ``metrics.csv`` to keep (see :class:`CsvLogger`).
        tensorboard: Also log to ``run_dir/tensorboard`` when TensorBoard is installed.
        enabled: Write anything (true on rank 0 only).
        epoch: Gives the epoch of the rows being logged.
    """
    if not enabled:
        return MetricsLog([], rows=rows)
    loggers: list[MetricLogger] = [CsvLogger(run_dir / "metrics.csv", rows=rows, epoch=epoch)]
    if tensorboard:
        with contextlib.suppress(ImportError):  # TensorBoard is optional
            loggers.append(TensorBoardLogger(run_dir / "tensorboard"))
    return MetricsLog(loggers, rows=rows)
