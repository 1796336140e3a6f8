"""Metrics of a training run: ``metrics.csv`` in long form, plus TensorBoard when installed."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

__all__ = ["METRIC_COLUMNS", "MetricsLog"]

#: Columns of ``metrics.csv``.
METRIC_COLUMNS = ("epoch", "step", "split", "metric", "value")


class MetricsLog:
    """``metrics.csv`` in long form (epoch, step, split, metric, value), plus TensorBoard."""

    def __init__(self, run_dir: Path, *, rows: int, tensorboard: bool, enabled: bool) -> None:
        self.enabled = enabled
        self.path = run_dir / "metrics.csv"
        self.rows = rows
        self.writer: Any = None
        if not enabled:
            return
        self._truncate(rows)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                pass
            else:
                self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=None)

    def _truncate(self, rows: int) -> None:
        """Keep the header and the first ``rows`` rows (those a checkpoint has seen)."""
        kept: list[list[str]] = []
        if self.path.exists():
            with open(self.path, newline="") as handle:
                kept = list(csv.reader(handle))[1 : rows + 1]
        with open(self.path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(METRIC_COLUMNS)
            writer.writerows(kept)

    def log(self, epoch: int, step: int, split: str, values: dict[str, float]) -> None:
        self.rows += len(values)
        if not self.enabled:
            return
        with open(self.path, "a", newline="") as handle:
            writer = csv.writer(handle)
            for name, value in values.items():
                writer.writerow((epoch, step, split, name, repr(float(value))))
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(f"{split}/{name}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
