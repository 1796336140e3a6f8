"""Throughput, loader stall, peak memory and bytes read of every rank, per epoch.

:class:`EpochClock` times the training steps of an epoch and the time spent
waiting for the loader (the stall); :func:`log_perf` gathers every rank's
figures on rank 0 and appends them to ``run_dir/perf.csv`` (columns
``epoch, step, rank, metric, value``). These figures depend on the machine,
so they live apart from ``metrics.csv``, which a resumed run reproduces
exactly.

Peak memory is the peak of allocated CUDA memory on a GPU, the peak resident
set size of the process on a CPU (Linux ``ru_maxrss``).
"""

from __future__ import annotations

import csv
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from sciml.distributed import all_reduce_cpu, world
from sciml.io_utils import write_errors

__all__ = ["PERF_COLUMNS", "EpochClock", "log_perf", "peak_memory_mib"]

#: Columns of ``perf.csv``.
PERF_COLUMNS = ("epoch", "step", "rank", "metric", "value")


def peak_memory_mib(device: torch.device) -> float:
    """Peak memory of this process so far, in MiB (see the module docstring)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


class EpochClock:
    """Seconds of training, seconds waiting for batches, and samples of one epoch."""

    def __init__(self) -> None:
        """A clock at zero."""
        self.busy = 0.0
        self.stall = 0.0
        self.samples = 0
        self._start: float | None = None

    def batches(self, loader: Iterator[Any]) -> Iterator[Any]:
        """The loader's batches, timing the wait for each one as stall."""
        self._start = time.perf_counter()
        while True:
            before = time.perf_counter()
            try:
                batch = next(loader)
            except StopIteration:
                return
            self.stall += time.perf_counter() - before
            yield batch

    def step_done(self, samples: int) -> None:
        """Count a step's samples and the time since the epoch started."""
        self.samples += samples
        if self._start is not None:
            now = time.perf_counter()
            self.busy += now - self._start
            self._start = now

    def figures(self, device: torch.device, bytes_read: int | None) -> dict[str, float]:
        """This rank's figures: samples/s, stall fraction, peak memory, bytes read."""
        figures = {
            "samples_per_s": self.samples / self.busy if self.busy else 0.0,
            "stall_fraction": self.stall / self.busy if self.busy else 0.0,
            "step_seconds": self.busy,
            "peak_memory_mib": peak_memory_mib(device),
        }
        if bytes_read is not None:
            figures["bytes_read"] = float(bytes_read)
        return figures


def log_perf(path: Path, figures: dict[str, float], *, epoch: int, step: int) -> None:
    """Append every rank's ``figures`` to the CSV at ``path`` (collective; rank 0 writes).

    Every rank must pass the same names.
    """
    rank, size = world()
    names = sorted(figures)
    table = torch.zeros(size, len(names), dtype=torch.float64)
    table[rank] = torch.tensor([figures[name] for name in names], dtype=torch.float64)
    table = all_reduce_cpu(table)
    if rank != 0:
        return
    new = not path.exists()
    with write_errors(path), open(path, "a", newline="") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(PERF_COLUMNS)
        for r in range(size):
            for name, value in zip(names, table[r].tolist(), strict=True):
                writer.writerow((epoch, step, r, name, repr(value)))
