"""The batches of one pass over a dataset, as :func:`sciml.training.fit` reads them.

:class:`EpochLoader` reads an epoch's batches of indices (split into
:func:`micro_batches` for gradient accumulation) with workers that persist
across epochs, :func:`progress` shows its steps as a tqdm bar, :func:`split_loss`
checks what ``loss_fn`` returned and :func:`tagged` names the values for the
metrics log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter
from tqdm.auto import tqdm

from sciml.datasets.sampling import epoch_seed, seed_everything
from sciml.training.config import TrainConfig
from sciml.training.setup import LossOutput

__all__ = [
    "EpochLoader",
    "accumulate",
    "batch_seed",
    "micro_batches",
    "progress",
    "split_loss",
    "tagged",
]


def split_loss(output: LossOutput) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss to differentiate and every scalar value to log."""
    values = {"loss": output} if isinstance(output, torch.Tensor) else output
    if not isinstance(values, dict) or "loss" not in values:
        found = sorted(values) if isinstance(values, dict) else type(values).__name__
        raise TypeError(
            f"loss_fn must return a scalar tensor or a dict with a 'loss' entry, got {found}"
        )
    odd = {
        k: getattr(v, "shape", type(v).__name__)
        for k, v in values.items()
        if not isinstance(v, torch.Tensor) or v.numel() != 1
    }
    if odd:
        raise ValueError(f"loss_fn must return one-element tensors; got shapes {odd}")
    return values["loss"], {k: float(v.detach()) for k, v in values.items()}


def accumulate(
    sums: dict[str, float], count: int, values: dict[str, float], size: int, *, where: str
) -> int:
    """Add a batch's values, weighted by its ``size``, to ``sums``; return the new count.

    Raises:
        ValueError: If the values have other names than those summed before
            (``where`` names the batch in the message).
    """
    if count and set(values) != set(sums):
        raise ValueError(
            f"loss_fn returned {sorted(values)} {where} but {sorted(sums)} before; "
            "it must return the same names for every batch"
        )
    for name, value in values.items():
        sums[name] = sums.get(name, 0.0) + value * size
    return count + size


def tagged(split: str, values: dict[str, float]) -> dict[str, float]:
    """Metric names as the metrics log takes them: ``"<split>/<name>"``."""
    return {f"{split}/{name}": value for name, value in values.items()}


def micro_batches(batch: list[int], parts: int) -> list[list[int]]:
    """``batch`` in ``parts`` consecutive parts, as equal as possible (fewer if it is smaller)."""
    parts = min(parts, len(batch))
    edges = [round(k * len(batch) / parts) for k in range(parts + 1)]
    return [batch[edges[k] : edges[k + 1]] for k in range(parts)]


def batch_seed(seed: int, epoch: int, position: int) -> int:
    """The seed of the random state a loader worker reads batch ``position`` of ``epoch`` with."""
    state = np.random.SeedSequence([epoch_seed(seed, epoch, stream="workers"), position])
    return int(state.generate_state(1, dtype=np.uint32)[0])


#: What ``next`` returns from an ended iteration.
_END = object()


class _IndexBatches(Sampler[list[tuple[int, int]]]):
    """The queued batches, handed out in order; more may be queued while they are read.

    The loader pulls batches ahead of the trainer (``prefetch_factor`` per worker), so
    batches queued for the next epoch before this one ends are read while it finishes.
    An iteration ends when it finds the queue empty.
    """

    def __init__(self) -> None:
        self.queue: deque[list[tuple[int, int]]] = deque()

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        while self.queue:
            yield self.queue.popleft()

    def __len__(self) -> int:
        return len(self.queue)


class _SeededReads(Dataset[Any]):
    """Reads a batch of ``(seed, index)`` pairs; inside a worker, seeds its generators first."""

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset

    def __getitems__(self, keys: list[tuple[int, int]]) -> list[Any]:
        if get_worker_info() is not None:
            seed_everything(keys[0][0])
        indices = [index for _, index in keys]
        read = getattr(self.dataset, "__getitems__", None)
        return list(read(indices)) if read else [self.dataset[i] for i in indices]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        return self.__getitems__([key])[0]


class EpochLoader:
    """A ``DataLoader`` over lists of indices whose workers persist across epochs.

    Each epoch's batches are set by :meth:`epoch`; a worker seeds Python's,
    NumPy's and torch's generators from :func:`batch_seed` before reading a
    batch, so random transforms depend on the seed, the epoch and the batch's
    position only (not on the worker, nor on where a run was resumed).

    Args:
        dataset: Map-style dataset (its ``__getitems__`` is used when it has one).
        config: Gives ``num_workers`` and ``seed``.
        collate_fn: Batch collation (default: torch's).
        pin_memory: Read into page-locked memory (for copies to a GPU).
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        config: TrainConfig,
        collate_fn: Callable[[list[Any]], Any] | None,
        *,
        pin_memory: bool,
    ) -> None:
        """Build the loader; workers start at the first epoch."""
        self.seed = config.seed
        # a dataset read chunk by chunk reads ahead what it is told comes next
        # (sciml.datasets.chunked); only here, where the batches are read
        plan = getattr(dataset, "plan", None) if config.num_workers == 0 else None
        self._plan: Callable[[list[int] | None], None] | None = plan
        self.sampler = _IndexBatches()
        self.loader: DataLoader[Any] = DataLoader(
            _SeededReads(dataset),
            batch_sampler=self.sampler,
            num_workers=config.num_workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            persistent_workers=config.num_workers > 0,
            # its own generator: starting an epoch must not draw from the global one
            generator=torch.Generator().manual_seed(config.seed),
        )
        self._iterator: Iterator[Any] | None = None
        self._ahead: tuple[int, int, list[list[int]]] | None = None

    def epoch(
        self,
        batches: Sequence[list[int]],
        *,
        epoch: int,
        first: int = 0,
        then: Sequence[list[int]] | None = None,
    ) -> Iterator[Any]:
        """The batches of ``epoch``; the first is at position ``first`` of the epoch.

        Args:
            batches: Index batches to read, in order.
            epoch: The epoch they belong to (with ``first``, it sets each batch's seed).
            first: Position of ``batches[0]`` in the epoch.
            then: The next epoch's batches from its start, when known: they are queued
                behind these, so the workers read the next epoch's first batches while
                this one ends (and while validation runs) instead of after it.
        """
        if self._ahead != (epoch, first, [list(b) for b in batches]):
            self._restart()
            self._queue(batches, epoch=epoch, first=first)
        if then is not None:
            self._queue(then, epoch=epoch + 1, first=0)
        self._ahead = None if then is None else (epoch + 1, 0, [list(b) for b in then])
        return self._take(len(batches))

    def _queue(self, batches: Sequence[list[int]], *, epoch: int, first: int) -> None:
        if self._plan is not None:
            self._plan([index for batch in batches for index in batch])
        self.sampler.queue.extend(
            [(batch_seed(self.seed, epoch, first + k), index) for index in batch]
            for k, batch in enumerate(batches)
        )

    def _take(self, count: int) -> Iterator[Any]:
        """The next ``count`` batches, in the order they were queued."""
        for _ in range(count):
            batch = _END if self._iterator is None else next(self._iterator, _END)
            if batch is _END:
                # the iteration ended when its queue ran dry (what it had read ahead
                # is out): a new one reads what was queued since
                self._iterator = iter(self.loader)
                batch = next(self._iterator)
            yield batch

    def _restart(self) -> None:
        """Drop what was queued: the next iteration starts afresh (reads in flight dropped)."""
        self.sampler.queue.clear()
        self._iterator = None
        self._ahead = None
        if self._plan is not None:
            self._plan(None)

    def close(self) -> None:
        """Stop the worker processes now; a later :meth:`epoch` starts new ones.

        Persistent workers otherwise live as long as the loader. Workers still
        running when their process exits are killed, and what they registered
        for clean-up at exit is lost (in a process started by ``spawn``, the
        semaphore numcodecs' Blosc makes in each reading process stays behind
        and Python's resource tracker warns of it).
        """
        self._restart()
        iterator, self.loader._iterator = self.loader._iterator, None
        if isinstance(iterator, _MultiProcessingDataLoaderIter):
            iterator._shutdown_workers()


def progress(*, total: int, initial: int, desc: str, show: bool) -> tqdm:
    """A tqdm bar over an epoch's optimiser steps, drawn only when ``show``.

    Its postfix shows the running training loss (see :func:`sciml.training.fit`); it is
    removed when closed, as the epoch's status line replaces it.
    """
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        disable=not show,
        leave=False,
        dynamic_ncols=True,
        unit="step",
    )
