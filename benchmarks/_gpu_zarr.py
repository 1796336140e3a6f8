"""The GPU check's Zarr section: CosmoFlow trained from a store on local disk, loader stall too.

Section ``zarr_training`` of ``benchmarks/gpu_check.py``. A bare GPU machine
has no zarr or dask: ``make gpu-wheels`` downloads their wheels for its
Python into ``gpu_wheels/`` (carried with the working tree), and the check
installs them for its sections; without them this section says what is
missing and skips. The store is written by :func:`sciml.volumes.data.write_cosmology`
(as ``sciml cosmoflow data`` writes it) and read by
:class:`~sciml.volumes.dataset.ShardedVolumes` through a ``DataLoader`` with
worker processes, as ``sciml cosmoflow train`` reads it. The rate is set
against the training section's in-memory one: ``loader_stall`` is the share
of a step spent waiting for the next batch.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
from _gpu_probe import importable
from _gpu_report import Part, Row
from _gpu_workloads import MLPERF_H100_SAMPLES_PER_S, failure, precision, release, sizes, sync

#: What reading a Zarr store needs beyond torch and numpy.
NEEDS = ("xarray", "zarr", "dask")


@dataclass(frozen=True)
class StoreSizes:
    """The store and the loader: samples of ``edge``^3, batches, passes, worker processes."""

    samples: int
    edge: int
    batch: int
    passes: int
    workers: int


def store_sizes(dry_run: bool) -> StoreSizes:
    """Eight 128^3 samples read three times by up to 8 workers; tiny ones for a dry run."""
    if dry_run:
        return StoreSizes(samples=4, edge=16, batch=2, passes=2, workers=2)
    return StoreSizes(samples=8, edge=128, batch=4, passes=3, workers=min(8, os.cpu_count() or 1))


def missing() -> list[str]:
    """The packages of :data:`NEEDS` this Python cannot import."""
    return [name for name in NEEDS if not importable(name)]


def _in_memory_rate(part: Part) -> float | None:
    """The training section's float32 CosmoFlow samples/s, if it ran."""
    for row in part.report.get("training", {}).get("rows", []):
        if row.get("model") == "cosmoflow" and row.get("precision") == "fp32":
            rate = row.get("samples_per_s")
            return float(rate) if rate else None
    return None


def _loader_rate(part: Part, store: str, cfg: StoreSizes, dtype: str) -> Row:
    """Samples/s of CosmoFlow Adam steps fed by a ``DataLoader`` over ``store``."""
    from torch.utils.data import DataLoader

    from sciml.volumes.dataset import ShardedVolumes

    device = part.device
    dataset = ShardedVolumes(store)
    loader = DataLoader(
        dataset,
        batch_size=cfg.batch,
        shuffle=True,
        num_workers=cfg.workers,
        pin_memory=device == "cuda",
        persistent_workers=cfg.workers > 0,
        drop_last=True,
    )
    torch.manual_seed(0)
    model = sizes(part.dry_run).model("cosmoflow").to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)
    waited = stepped = 0.0
    samples = 0
    for epoch in range(cfg.passes):
        batches = iter(loader)
        while True:
            start = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                break
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            ready = time.perf_counter()
            with precision(device, dtype):
                out = model(x)
            optimizer.zero_grad(set_to_none=True)
            (out.float() - y).square().mean().backward()
            optimizer.step()
            sync(device)
            if epoch:  # the first pass starts the workers and warms the kernels
                waited += ready - start
                stepped += time.perf_counter() - start
                samples += x.shape[0]
    if not samples:
        raise ValueError(f"no timed batch: {cfg} gives fewer samples than one batch per pass")
    return {
        "samples_per_s": samples / stepped,
        "loader_stall": waited / stepped,
        "timed_samples": samples,
    }


def zarr_training(part: Part) -> None:
    """CosmoFlow from a Zarr store on local disk: samples/s and the loader's stall."""
    absent = missing()
    if absent:
        part.note(
            f"skipped: {', '.join(absent)} missing; `make gpu-wheels` downloads their wheels "
            "into gpu_wheels/ for the GPU machine's Python (carry that folder)"
        )
        return
    from sciml.volumes.data import write_cosmology

    cfg = store_sizes(part.dry_run)
    store = part.scratch / "cosmoflow.zarr"
    if not part.enough(15, f"writing {cfg.samples} samples of {cfg.edge}^3"):
        return
    start = time.perf_counter()
    write_cosmology(store, samples=cfg.samples, size=cfg.edge)
    written = time.perf_counter() - start
    in_memory = _in_memory_rate(part)
    for dtype in ("fp32", "bf16"):
        if not part.enough(10, f"CosmoFlow from the store in {dtype}"):
            return
        row: Row = {
            "model": "cosmoflow",
            "precision": dtype,
            "store": f"{cfg.samples} x 4 x {cfg.edge}^3, local disk",
            "batch": cfg.batch,
            "workers": cfg.workers,
            "write_s": written,
        }
        try:
            row |= _loader_rate(part, str(store), cfg, dtype)
        except Exception as err:  # recorded: the other precision still runs
            row["error"] = failure(err)
        if "samples_per_s" in row:
            row["over_mlperf_h100"] = row["samples_per_s"] / MLPERF_H100_SAMPLES_PER_S
            if in_memory and dtype == "fp32":
                row["over_in_memory"] = row["samples_per_s"] / in_memory
        part.add(row)
        release(part.device)
    part.note(
        "loader_stall: the share of a step spent waiting for the next batch "
        "(reading, decoding and normalising in the workers)"
    )
