"""The hybrid-parallel papers' accuracy claim in miniature: larger volumes, better parameters.

Oyama et al. (TPDS 2021) and the CosmoFlow papers train on whole large
volumes (instead of cropping them) because a larger volume holds more of the
field's structure: with the same number of training samples, CosmoFlow
predicts the parameters better. :func:`volume_size_experiment` trains the
same network on generated data sets of several volume edges (the same
samples, seeds and steps) and reports the validation error of each.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sciml.distributed import init_distributed
from sciml.training import TrainConfig
from sciml.volumes.data import write_cosmology
from sciml.volumes.train import VolumeTraining, train_volumes

__all__ = ["volume_size_experiment"]


def volume_size_experiment(
    folder: Path | str,
    *,
    sizes: Sequence[int] = (8, 16, 32),
    seeds: Sequence[int] = (0, 1, 2),
    samples: int = 64,
    val_samples: int = 32,
    epochs: int = 30,
    batch_size: int = 8,
    width: int = 8,
    lr: float = 0.01,
) -> list[dict[str, float]]:
    """Train CosmoFlow on volumes of each edge in ``sizes``, once per seed; one row each.

    Every run sees ``samples`` training volumes (data seed 1000 + seed) and is
    scored on ``val_samples`` others (data seed 2000 + seed) by the mean
    absolute error of the four scaled parameters (in [-1, 1]) after the last
    epoch. The network has three convolution blocks, so a volume must have
    an edge of at least 8; one process (the same code runs on any mesh).

    Returns:
        Rows with ``size``, ``seed``, ``val_mae``, ``val_loss`` and ``train_loss``.
    """
    folder = Path(folder)
    rows = []
    for size in sizes:
        for seed in seeds:
            data = folder / f"size{size}-seed{seed}"
            train = data / "train.zarr"
            val = data / "val.zarr"
            if not train.exists():
                write_cosmology(train, samples=samples, size=size, seed=1000 + seed)
            if not val.exists():
                write_cosmology(val, samples=val_samples, size=size, seed=2000 + seed)
            config = TrainConfig(
                epochs=epochs,
                batch_size=batch_size,
                seed=seed,
                progress=False,
                tensorboard=False,
                handle_signals=False,
            )
            options = VolumeTraining("cosmoflow", config=config, lr=lr, width=width, levels=3)
            with init_distributed(backend="gloo"):
                result = train_volumes(train, data / "run", options, val=val)
            last = result.history[-1]
            rows.append(
                {
                    "size": size,
                    "seed": seed,
                    "val_mae": last["val_mae"],
                    "val_loss": last["val_loss"],
                    "train_loss": last["train_loss"],
                }
            )
    return rows
