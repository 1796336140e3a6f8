"""Per-channel normalisation statistics of sharded volumes, computed from the blocks.

:func:`block_stats` sums every rank's block of its replica's samples and
all-reduces them (every voxel counted once); :func:`run_stats` gives a resumed
run those of its record (``norm_stats`` of ``RUN_DIR/volumes.json``), so that it
normalises as the run that wrote them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from sciml.datasets.channels import NormStats
from sciml.distributed import all_reduce_cpu, check_replica
from sciml.volumes.dataset import ShardedVolumes
from sciml.volumes.volume_record import RECORD, recorded_stats

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
    """The statistics ``run_dir`` recorded, or those of :func:`block_stats` for a new run.

    A collective: every rank calls it. A resumed run reads its record's, so it normalises
    exactly as the run that wrote them; :func:`sciml.volumes.volume_record.record_volumes`
    records those of a new run.

    Args:
        dataset: This rank's training volumes.
        run_dir: The run folder.
        replica: This rank's data-parallel replica (index, count).
        cached: Read the recorded ones when there are (``False``: a run that never
            checkpointed, whose data may have been corrected since, computes them again).

    Raises:
        ValueError: If the recorded statistics are for other channels.
    """
    stats = recorded_stats(run_dir) if cached else None
    found = torch.tensor([int(stats is not None)])  # every rank takes part
    every = bool(all_reduce_cpu(found, op=torch.distributed.ReduceOp.MIN).item())
    if stats is None or not every:
        return block_stats(dataset, replica=replica)
    if stats.channels != dataset.channels():
        raise ValueError(
            f"{Path(run_dir) / RECORD} holds statistics for channels {stats.channels}, the "
            f"data has {dataset.channels()}; give this run another run folder"
        )
    return stats
