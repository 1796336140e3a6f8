"""CosmoFlow from sharded files: samples/s, loader stall, peak memory and bytes read per rank.

Usage: python benchmarks/volumes_throughput.py [--quick] [--size S] [--out PATH]

Trains CosmoFlow for two epochs on a generated data set read from disk
(uncompressed Zarr, chunked for block reads) on data-only, spatial-only and
hybrid meshes of 1, 2 and 4 processes, with the loader reading inline
(``--workers 0``: no prefetch) and with two background loader processes per
rank that read ahead along the seeded order of the epoch (prefetch). The
figures are those ``fit`` writes to ``perf.csv`` for the second epoch:
samples/s of the run (every replica's samples), the loader stall as a
fraction of step time, the peak resident memory of a rank, and the bytes a
rank read per sample against its share of a sample (sample bytes / spatial
ranks), from the inline loader's runs: with workers, ``fit`` reads the next
epoch's first samples before it starts, so an epoch's count is not its own
(the column shows "-"; the run reads the same bytes in all).

The store is chunked ``--chunks`` voxels per edge, by default half the
volume edge: the largest chunk that keeps every benchmarked rank's block
whole chunks (no grid here splits a dim more than twice). Zarr pays a fixed
cost per chunk read (about 0.1 ms on this machine when quiet), so the
generator's default of a quarter edge (64 chunks per sample: 4 KiB chunks at
32^3) makes a 32^3 sample cost 4-5x more to read than 8 chunks do.
"""

from __future__ import annotations

import argparse
import csv
import functools
import tempfile
from pathlib import Path
from typing import Any

from _report import write_report

from sciml.distributed import spawn
from sciml.training import TrainConfig
from sciml.volumes.config import VolumeTraining
from sciml.volumes.data import write_cosmology
from sciml.volumes.train import train_volumes

MESHES: list[dict[str, int]] = [
    {},
    {"data": 2},
    {"depth": 2},
    {"data": 4},
    {"depth": 2, "height": 2},
    {"data": 2, "depth": 2},
]


def _rank(data: str, run_dir: str, mesh: dict[str, int], workers: int, batch: int) -> int:
    config = TrainConfig(
        epochs=2, batch_size=batch, num_workers=workers, progress=False, tensorboard=False
    )
    options = VolumeTraining("cosmoflow", mesh=mesh, config=config, width=8, levels=3)
    return train_volumes(data, options, run_dir).global_step


def _figures(run_dir: Path) -> dict[int, dict[str, float]]:
    """The second epoch's figures by rank, and the first epoch's bytes read."""
    ranks: dict[int, dict[str, float]] = {}
    with open(run_dir / "perf.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            figures = ranks.setdefault(int(row["rank"]), {})
            key = row["metric"] if row["epoch"] == "1" else f"{row['metric']}_epoch1"
            figures[key] = float(row["value"])
    return ranks


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _row(
    mesh: dict[str, int], workers: int, figures: dict[int, dict[str, float]], **sizes: Any
) -> dict[str, Any]:
    ranks = len(figures)
    data = mesh.get("data", 1)
    spatial = ranks // data
    per_replica = sizes["samples"] / data
    share = sizes["sample_bytes"] / spatial
    read = [(f["bytes_read"] - f["bytes_read_epoch1"]) / per_replica for f in figures.values()]
    exact = workers == 0  # see the module docstring
    return {
        "ranks": ranks,
        "mesh": mesh or {"data": 1},
        "workers": workers,
        "samples_per_s": data * min(f["samples_per_s"] for f in figures.values()),
        "stall_fraction": max(f["stall_fraction"] for f in figures.values()),
        "peak_memory_mib_per_rank": max(f["peak_memory_mib"] for f in figures.values()),
        "bytes_per_sample_per_rank": max(read) if exact else None,
        "share_bytes": share,
        "read_over_share": max(read) / share if exact else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16^3 volumes, 8 samples")
    parser.add_argument("--size", type=int, default=64, help="volume edge")
    parser.add_argument("--samples", type=int, default=32, help="training samples")
    parser.add_argument("--chunks", type=int, default=None, help="chunk edge (size // 2)")
    parser.add_argument("--out", default="runs/bench/volumes_throughput.json")
    args = parser.parse_args(argv)
    size, samples = (16, 8) if args.quick else (args.size, args.samples)
    chunks = args.chunks or max(size // 2, 1)
    batch = 2
    rows = []
    print(
        f"{'ranks':>5} {'mesh':>22} {'workers':>7} {'samples/s':>9} {'stall':>6} "
        f"{'peak MiB':>9} {'read/share':>10}"
    )
    with tempfile.TemporaryDirectory(prefix="sciml-bench-") as tmp:
        data = write_cosmology(
            Path(tmp) / "c.zarr", samples=samples, size=size, seed=0, chunks=chunks
        )
        for mesh in MESHES:
            ranks = mesh.get("data", 1) * mesh.get("depth", 1) * mesh.get("height", 1)
            for workers in (0, 2):
                run_dir = Path(tmp) / f"run-{len(rows)}"
                run = functools.partial(_rank, batch=batch)
                spawn(run, ranks, str(data), str(run_dir), mesh, workers, timeout=1800)
                row = _row(
                    mesh,
                    workers,
                    _figures(run_dir),
                    samples=samples,
                    sample_bytes=4 * size**3 * 2,
                )
                rows.append(row | {"size": size, "chunks": chunks, "batch_per_replica": batch})
                print(
                    f"{row['ranks']:>5} {str(row['mesh']):>22} {workers:>7} "
                    f"{row['samples_per_s']:>9.2f} {row['stall_fraction']:>6.1%} "
                    f"{row['peak_memory_mib_per_rank']:>9.0f} {_ratio(row['read_over_share']):>10}"
                )
    path = write_report(
        args.out, "volumes_throughput", rows, size=size, samples=samples, chunks=chunks
    )
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
