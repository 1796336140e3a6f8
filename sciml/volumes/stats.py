"""Per-channel normalisation statistics of sharded volumes, computed from the blocks.

:func:`block_stats` sums every rank's block of its replica's samples and
all-reduces them (every voxel counted once); :func:`run_stats` caches the
result in the run folder (``norm_stats.json``), so that a resumed run
normalises as the run that wrote it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from sciml.datasets.channels import NormStats
from sciml.distributed import all_reduce_cpu, check_replica, world
from sciml.volumes.dataset import ShardedVolumes

__all__ = ["block_stats", "run_stats"]


def block_stats(dataset: ShardedVolumes, *, replica: tuple[int, int] = (0, 1)) -> NormStats:
    """Per-channel mean and std over every sample, computed collectively.

    Each rank sums its block (without halo) of its replica's share of the
    samples (every ``count``-th from ``index``), then one all-reduce over
    every rank gives the totals (every voxel counted once). A collective:
    every rank calls it, each with its own dataset and replica.

    Raises:
        ValueError: If the ranks' blocks do not tile every sample exactly once
            (datasets built for another mesh, or a wrong ``replica``).
    """
    index, count = check_replica(replica)
    sums = dataset.block_sums(range(index, len(dataset), count))
    n, total, squares = all_reduce_cpu(torch.from_numpy(sums)).numpy()
    expected = len(dataset) * math.prod(dataset.shape)
    if not np.all(n == expected):
        raise ValueError(
            f"block_stats: the ranks' blocks cover {int(n[0])} voxels per channel, expected "
            f"{expected} ({len(dataset)} samples of {dataset.shape}); build every rank's "
            "dataset with the same mesh and pass its data-parallel replica"
        )
    mean = total / n
    std = np.sqrt(np.maximum(squares / n - mean**2, 0.0))
    return NormStats(dataset.channels(), tuple(mean.tolist()), tuple(std.tolist()))


def run_stats(
    dataset: ShardedVolumes,
    run_dir: Path | str,
    *,
    replica: tuple[int, int] = (0, 1),
    cached: bool = True,
) -> NormStats:
    """The statistics cached in ``run_dir/norm_stats.json``, computed by :func:`block_stats` once.

    A collective: every rank calls it. A resumed run reads the cached file, so
    it normalises exactly as the run that wrote it (rank 0 writes it, atomically).

    Args:
        dataset: This rank's training volumes.
        run_dir: The run folder.
        replica: This rank's data-parallel replica (index, count).
        cached: Read the cached file when there is one (``False``: a run that never
            checkpointed, whose data may have been corrected since, computes them again).

    Raises:
        ValueError: If the cached statistics are for other channels.
    """
    path = Path(run_dir) / "norm_stats.json"
    found = torch.tensor([int(cached and path.exists())])
    if bool(all_reduce_cpu(found, op=torch.distributed.ReduceOp.MIN).item()):
        stats = NormStats.from_json(path)
        if stats.channels != dataset.channels():
            raise ValueError(
                f"{path} holds statistics for channels {stats.channels}, the data has "
                f"{dataset.channels()}; give this run another run folder"
            )
        return stats
    stats = block_stats(dataset, replica=replica)
    if world()[0] == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        stats.to_json(path)
    return stats
