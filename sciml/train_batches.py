"""The batches of one pass over a dataset, as :func:`sciml.training.fit` reads them.

:func:`epoch_loader` turns an epoch's batches of indices into a
``DataLoader``, :func:`progress` shows it as a tqdm bar, :func:`split_loss`
checks what ``loss_fn`` returned and :func:`tagged` names the values for the
metrics log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from sciml.sampling import epoch_seed
from sciml.train_config import TrainConfig
from sciml.train_setup import LossOutput

__all__ = ["accumulate", "epoch_loader", "progress", "split_loss", "tagged"]


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


def epoch_loader(
    dataset: Dataset[Any],
    batches: Sequence[list[int]],
    config: TrainConfig,
    collate_fn: Callable[[list[Any]], Any] | None,
    epoch: int,
) -> DataLoader[Any]:
    """A loader of ``batches`` (lists of indices) of one epoch.

    The loader's own generator seeds its workers, so resuming does not draw
    from (and shift) the global generator.
    """
    generator = torch.Generator().manual_seed(epoch_seed(config.seed, epoch, stream="workers"))
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=config.num_workers,
        collate_fn=collate_fn,
        generator=generator,
        persistent_workers=False,
    )


def progress(
    loader: DataLoader[Any], *, total: int, initial: int, desc: str, show: bool
) -> Iterator[Any]:
    """The loader's batches behind a tqdm bar (shown only when ``show``)."""
    bar = tqdm(
        loader,
        total=total,
        initial=initial,
        desc=desc,
        disable=not show,
        leave=False,
        dynamic_ncols=True,
    )
    return iter(bar)
