"""The order of samples: seeds, the seed of one epoch, and one epoch's batches.

Every shuffle in sciml draws from :func:`epoch_seed`, so that the order of an
epoch depends only on the run's seed and the epoch number (an interrupted and
resumed run sees the same samples in the same order).
"""

from __future__ import annotations

import math
import random
from typing import Literal

import numpy as np
import torch

from sciml.distributed import check_replica

__all__ = ["epoch_batches", "epoch_seed", "seed_everything"]

#: Multiplier of the run's seed for each stream of random numbers of an epoch.
_STREAMS = {"order": 1_000_003, "workers": 7919}


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - user code draws from the global state
    torch.manual_seed(seed)


def epoch_seed(seed: int, epoch: int, *, stream: Literal["order", "workers"] = "order") -> int:
    """The seed of one epoch's random numbers, from the run's seed and the epoch.

    Args:
        seed: The run's seed (>= 0).
        epoch: The epoch (>= 0).
        stream: ``"order"`` for the order of the samples, ``"workers"`` for the
            seeds of ``DataLoader`` worker processes (independent of the order).

    Raises:
        ValueError: If ``seed`` or ``epoch`` is negative or not an integer, or
            ``stream`` is unknown.
    """
    for name, value in (("seed", seed), ("epoch", epoch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if stream not in _STREAMS:
        raise ValueError(f"stream must be one of {sorted(_STREAMS)}, got {stream!r}")
    return seed * _STREAMS[stream] + epoch


def epoch_batches(
    n: int,
    batch_size: int,
    *,
    epoch: int,
    seed: int,
    shuffle: bool = True,
    drop_last: bool = False,
    replica: tuple[int, int] = (0, 1),
) -> list[list[int]]:
    """Sample indices of one epoch, split into batches, for one data-parallel replica.

    The order depends only on ``(seed, epoch)``. As with ``DistributedSampler``,
    the permutation is padded by repeating its start so that every replica
    gets the same number of samples, and replica ``r`` of ``R`` takes every
    ``R``-th index starting at ``r``.

    Raises:
        ValueError: If ``n`` is 0, ``batch_size`` < 1, or ``replica`` is not a
            valid ``(index, count)``.
    """
    if n == 0:
        raise ValueError("the training dataset is empty")
    if n < 0:
        raise ValueError(f"n must be the number of samples (>= 1), got {n}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    index, replicas = check_replica(replica)
    if shuffle:
        generator = torch.Generator().manual_seed(epoch_seed(seed, epoch))
        order = torch.randperm(n, generator=generator).tolist()
    else:
        order = list(range(n))
    per_replica = math.ceil(n / replicas)
    order = (order * math.ceil(per_replica * replicas / n))[: per_replica * replicas]
    mine = order[index::replicas]
    batches = [mine[i : i + batch_size] for i in range(0, len(mine), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches
