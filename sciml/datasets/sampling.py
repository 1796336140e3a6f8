"""The order of samples: seeds, the seed of one epoch, and one epoch's batches.

Every shuffle in sciml draws from :func:`epoch_seed`, so that the order of an
epoch depends only on the run's seed and the epoch number (an interrupted and
resumed run sees the same samples in the same order).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from sciml.distributed import check_replica

__all__ = ["chunk_order", "epoch_batches", "epoch_seed", "seed_everything"]

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


def chunk_order(
    bounds: Sequence[int],
    *,
    buffer: int,
    seed: int,
    epoch: int,
    replica: tuple[int, int] = (0, 1),
) -> list[int]:
    """One epoch's order of samples stored in chunks: each chunk's samples read in one stretch.

    The chunks (chunk ``c`` holds samples ``bounds[c]`` to ``bounds[c + 1] - 1``) come in a
    random order, ``buffer`` at a time; the samples of those ``buffer`` chunks are shuffled
    among themselves before the next chunks' come. A reader that holds ``buffer`` chunks
    (and reads the next ones ahead) decompresses each chunk once per epoch. The order
    depends only on ``(seed, epoch)``, ``bounds`` and ``buffer``.

    Data-parallel replicas each take one stretch of the chunks in that random order (the
    sequence padded by repeating its start, as ``DistributedSampler`` pads, so that every
    replica gets the same number of samples), then shuffle their samples a window of
    ``buffer`` chunks at a time: replica ``r`` of ``R`` reads about ``1/R`` of the chunks
    (two neighbours share at most one), not a sliver of every chunk. One replica's order is
    the whole epoch's.

    Raises:
        ValueError: ``bounds`` that do not rise from 0, ``buffer`` < 1, or a ``replica``
            that is not a valid ``(index, count)``.
    """
    edges = np.asarray(bounds, dtype=np.int64)
    if edges.ndim != 1 or edges.size < 2 or edges[0] != 0 or np.any(np.diff(edges) <= 0):
        raise ValueError(
            f"chunk bounds must rise strictly from 0 (chunk c holds samples bounds[c] to "
            f"bounds[c + 1] - 1), got {list(bounds)[:8]}"
        )
    if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
        raise ValueError(f"buffer must be a number of chunks >= 1, got {buffer!r}")
    index, replicas = check_replica(replica)
    rng = np.random.default_rng(epoch_seed(seed, epoch))
    chunks = rng.permutation(edges.size - 1)
    samples = np.concatenate([np.arange(edges[c], edges[c + 1]) for c in chunks])
    of_chunk = np.repeat(chunks, np.diff(edges)[chunks])
    per_replica = math.ceil(samples.size / replicas)
    padded = np.resize(np.arange(samples.size), per_replica * replicas)  # the start repeated
    order: list[int] = []
    for r in range(replicas):  # every replica's windows, so that each draws the same numbers
        stretch = padded[r * per_replica : (r + 1) * per_replica]
        piece_starts = np.flatnonzero(np.diff(of_chunk[stretch], prepend=-1) != 0)
        window_starts = [*piece_starts[::buffer].tolist(), stretch.size]
        for lo, hi in zip(window_starts[:-1], window_starts[1:], strict=True):
            window = rng.permutation(samples[stretch[lo:hi]])
            if r == index:
                order += window.tolist()
    return order


def epoch_batches(
    n: int,
    batch_size: int,
    *,
    epoch: int,
    seed: int,
    shuffle: bool = True,
    drop_last: bool = False,
    replica: tuple[int, int] = (0, 1),
    chunks: Sequence[int] | None = None,
    buffer: int = 1,
) -> list[list[int]]:
    """Sample indices of one epoch, split into batches, for one data-parallel replica.

    The order depends only on ``(seed, epoch)`` (and on ``chunks`` and ``buffer``, when
    given). As with ``DistributedSampler``, the permutation is padded by repeating its
    start so that every replica gets the same number of samples, and replica ``r`` of
    ``R`` takes every ``R``-th index starting at ``r``; a shuffled epoch of samples in
    ``chunks`` gives each replica a stretch of the chunks instead (:func:`chunk_order`).

    Args:
        n: The number of samples.
        batch_size: Samples per batch.
        epoch: The epoch (>= 0).
        seed: The run's seed (>= 0).
        shuffle: Shuffle the samples (else in their order).
        drop_last: Drop the last batch when it is smaller.
        replica: ``(index, count)`` of this data-parallel replica.
        chunks: The bounds of the chunks the samples are stored in (``None``: a plain
            permutation): a shuffled epoch follows them (:func:`chunk_order`).
        buffer: Chunks shuffled together (with ``chunks``).

    Raises:
        ValueError: If ``n`` is 0, ``batch_size`` < 1, ``replica`` is not a
            valid ``(index, count)``, or ``chunks`` do not end at ``n``.
    """
    if n == 0:
        raise ValueError("the training dataset is empty")
    if n < 0:
        raise ValueError(f"n must be the number of samples (>= 1), got {n}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    index, replicas = check_replica(replica)
    if chunks is not None and (len(chunks) < 2 or chunks[-1] != n):
        raise ValueError(f"the chunk bounds end at {list(chunks)[-1:]}, not at the {n} samples")
    if shuffle and chunks is not None:
        mine = chunk_order(chunks, buffer=buffer, seed=seed, epoch=epoch, replica=replica)
    else:
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
