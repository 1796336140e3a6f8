"""What the weather benchmarks share: ensemble files, timed training, measured evaluations.

* :func:`chunk_encoding` and :func:`write_in_pieces`: compressed netCDF as the package
  writes it (:func:`sciml.weather.store.netcdf_encoding`), with a chosen number of start
  dates per chunk, filled a piece of start dates at a time (files larger than memory);
* :func:`train`: the default deep model trained a number of steps through
  :func:`sciml.training.fit`, its samples/s and CPU seconds per sample (every thread of
  the process) and its losses;
* :func:`train_emos`, :func:`evaluate` and :func:`max_rel_diff`: an EMOS run to evaluate,
  ``sciml weather evaluate`` in a process of its own (peak resident memory, wall time) and
  how far two score tables differ.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pandas as pd
import torch
import xarray as xr

from sciml.training import TrainConfig, fit
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.models import gaussian_crps_loss
from sciml.weather.postprocess.pooled import PooledPostProcessor
from sciml.weather.postprocess.train import train_postprocessor
from sciml.weather.store import netcdf_encoding

__all__ = ["chunk_encoding", "evaluate", "max_rel_diff", "train", "train_emos", "write_in_pieces"]

#: Runs a command in a fresh process and prints its peak resident memory (KiB on Linux).
_MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if done.returncode:
    sys.exit(done.stderr[-4000:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def chunk_encoding(ds: xr.Dataset, *, chunk_dates: int = 1) -> dict[Hashable, Any]:
    """The package's netCDF encoding (compressed) with ``chunk_dates`` start dates per chunk."""
    encoding = netcdf_encoding(ds)
    for entry in encoding.values():
        if "chunksizes" in entry:
            chunks = list(entry["chunksizes"])
            chunks[chunks.index(1)] = chunk_dates  # time: the only dim of one per chunk
            entry["chunksizes"] = tuple(chunks)
    return encoding


def write_in_pieces(
    path: Path,
    layout: xr.Dataset,
    fill: Callable[[int, int], dict[str, np.ndarray]],
    *,
    encoding: dict[Hashable, Any] | None = None,
    piece: int = 16,
) -> Path:
    """Write ``layout`` (its data lazy), then each variable ``piece`` start dates at a time.

    ``fill(first, count)`` gives the values of start dates ``first`` to ``first + count - 1``
    of every variable with ``time``, by name. Only a piece is in memory at a time.
    """
    layout.to_netcdf(path, encoding=encoding, compute=False)  # the layout only
    dates = layout.sizes["time"]
    with netCDF4.Dataset(path, "a") as out:
        for first in range(0, dates, piece):
            count = min(piece, dates - first)
            for name, values in fill(first, count).items():
                where = tuple(
                    slice(first, first + count) if dim == "time" else slice(None)
                    for dim in layout[name].dims
                )
                out[name][where] = values
    return path


def train(
    data: Any,
    steps: int | None,
    batch: int,
    run_dir: Path,
    warm: int,
    *,
    channels: int = 4,
    epochs: int = 1,
    dtype: torch.dtype = torch.float32,
    from_start: bool = False,
) -> dict[str, Any]:
    """Train ``steps`` steps (``None``: ``epochs``); samples/s and CPU s per sample after ``warm``.

    Timed from the ``warm``-th step's loss to the last one's (the run's setup, its first
    reads and its closing checkpoint left out): each interval holds a step and the next
    batch's read. ``from_start``: timed from the call of :func:`~sciml.training.fit`
    instead (``warm`` ignored): every read of the run counted (a stream's first chunks
    are read ahead while the first steps run), every step but the last. ``losses`` are
    those of every step.
    """
    torch.manual_seed(0)
    model = PooledPostProcessor(channels, static=0).to(dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loop = TrainConfig(
        epochs=epochs, batch_size=batch, progress=False, tensorboard=False, handle_signals=False
    )
    marks: list[tuple[float, float]] = []
    losses: list[float] = []

    def timed(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        marks.append((time.perf_counter(), time.process_time()))
        loss = gaussian_crps_loss(model, batch)
        losses.append(loss.item())
        return loss

    start = (time.perf_counter(), time.process_time())
    fit(model, optimizer, data, timed, run_dir=run_dir, config=loop, preempt_after=steps)
    if len(marks) <= warm + 1:
        raise ValueError(f"{len(marks)} steps, not enough to time after {warm}: a larger file")
    if from_start:
        marks.insert(0, start)
        warm = 0
    (wall0, cpu0), (wall1, cpu1) = marks[warm], marks[-1]
    samples = (len(marks) - 1 - warm) * batch
    return {
        "steps_timed": len(marks) - 1 - warm,
        "samples_per_s": samples / (wall1 - wall0),
        "cpu_s_per_sample": (cpu1 - cpu0) / samples,
        "losses": losses,
    }


def train_emos(data: Path, run: Path) -> Path:
    """EMOS on 5 members fitted on the file ``data``, in the run folder ``run``."""
    with xr.open_dataset(data) as ds:
        config = PostprocessConfig(
            model="emos", members=5, train=TrainConfig(progress=False, tensorboard=False)
        )
        train_postprocessor(ds.load(), config, run)
    return run


def evaluate(run: Path, test: Path, out: Path, block: int | None) -> tuple[float, float]:
    """Peak resident MiB and wall seconds of one ``sciml weather evaluate`` process."""
    command = [sys.executable, "-m", "sciml", "weather", "evaluate", "--run-dir", str(run)]
    command += ["--csv", str(out), str(test)]
    if block is not None:
        command += ["--block-dates", str(block)]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    return int(done.stdout.split()[-1]) / 1024, seconds


def max_rel_diff(a: Path, b: Path) -> float:
    """The largest relative difference of two score tables' numbers (CSV, full precision)."""
    left, right = (pd.read_csv(p) for p in (a, b))
    numbers = [c for c in left.columns if pd.api.types.is_float_dtype(left[c])]
    diff = (left[numbers] - right[numbers]).abs() / left[numbers].abs()
    return float(np.nanmax(diff.where(left[numbers] != 0).to_numpy()))
