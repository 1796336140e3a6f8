"""The options of a CosmoFlow or U-Net training run (``sciml cosmoflow|unet3d train``).

The training options of the command line are generated from :class:`VolumeTraining`'s
fields (:mod:`sciml.cli_args`); :func:`sciml.volumes.train.train_volumes` takes it, and
its run record stores it. Kept free of heavy imports, so that ``--help`` needs none.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

from sciml.cli_args import (
    nested,
    non_negative_float,
    non_negative_int,
    not_an_option,
    option,
    positive_float,
    positive_int,
)
from sciml.spatial_parallel.partition import MESH_AXES
from sciml.training.checks import is_count, is_number
from sciml.training.config import TrainConfig

__all__ = ["DTYPES", "MODELS", "VolumeTraining", "epoch_list"]

#: The two workflows: the target variable each one reads.
MODELS = {"cosmoflow": "params", "unet3d": "label"}
#: The dtypes of the weights and the data.
DTYPES = ("float32", "float64")


def epoch_list(text: str) -> tuple[int, ...]:
    """``--decay-epochs``: comma-separated epochs, e.g. ``32,64`` (empty: no decay)."""
    try:
        return tuple(positive_int(item) for item in text.split(",") if item.strip())  # type: ignore[misc]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated epochs >= 1, e.g. 32,64, got {text!r}"
        ) from None


@dataclass(frozen=True)
class VolumeTraining:
    """Options of a CosmoFlow or U-Net training run.

    Attributes:
        model: ``"cosmoflow"`` or ``"unet3d"`` (the command's workflow).
        mesh: Mesh sizes by axis (``data``, ``depth``, ``height``, ``width``;
            missing axes are 1); their product is the number of processes (the command's
            ``--mesh``, which may also ask the planner for them).
        config: The loop options of :func:`sciml.training.fit` (the command's
            ``--batch-size`` and ``--no-progress`` depend on the grid and the terminal).
        lr: Peak learning rate.
        width: Filters of the first convolution (doubled per level).
        levels: Convolution blocks (CosmoFlow) or poolings (U-Net).
        dropout: Dropout of CosmoFlow's dense layers.
        warmup_epochs: Epochs of linear warm-up of the learning rate (CosmoFlow).
        decay_epochs: Epochs at which the learning rate is multiplied by ``decay``.
        decay: Factor of each step decay.
        dtype: ``"float32"`` or ``"float64"`` (model and data).
    """

    model: Literal["cosmoflow", "unet3d"] = field(default="cosmoflow", metadata=not_an_option())
    mesh: dict[str, int] = field(default_factory=dict, metadata=not_an_option())
    config: TrainConfig = field(
        default_factory=TrainConfig,
        metadata=nested(
            epochs=option("passes over the data", type=positive_int),
            seed=option("seed of weights and order", type=non_negative_int),
            num_workers=option(
                "loader processes per rank", flag="--workers", type=non_negative_int
            ),
            micro_batches=option("gradient accumulation parts", type=positive_int),
            precision=option("autocast dtype", choices=("fp32", "bf16")),
            checkpoint_every=option("also checkpoint every N steps", type=positive_int),
        ),
    )
    lr: float = field(default=0.01, metadata=option("peak learning rate", type=positive_float))
    width: int = field(default=16, metadata=option("first level's filters", type=positive_int))
    levels: int = field(default=3, metadata=option("conv blocks / poolings", type=positive_int))
    dropout: float = field(
        default=0.0,
        metadata=option("dropout of CosmoFlow's dense layers", type=non_negative_float),
    )
    warmup_epochs: int = field(
        default=0, metadata=option("linear warm-up epochs", type=non_negative_int)
    )
    decay_epochs: tuple[int, ...] = field(
        default=(), metadata=option("epochs of step decay, e.g. 32,64", type=epoch_list)
    )
    decay: float = field(
        default=0.25, metadata=option("factor of each step decay", type=positive_float)
    )
    dtype: Literal["float32", "float64"] = field(
        default="float32", metadata=option("weights and data", choices=DTYPES)
    )

    def __post_init__(self) -> None:
        """Reject an unknown model or dtype, out-of-range numbers or a non-increasing schedule."""
        if self.model not in MODELS:
            raise ValueError(
                f"VolumeTraining.model must be one of {sorted(MODELS)}, got {self.model!r}"
            )
        unknown = sorted(set(self.mesh) - set(MESH_AXES))
        if unknown:
            raise ValueError(f"mesh axes {unknown} are unknown; the axes are {MESH_AXES}")
        if not isinstance(self.config, TrainConfig):
            raise ValueError(f"VolumeTraining.config must be a TrainConfig, got {self.config!r}")
        if not (is_number(self.lr) and self.lr > 0):
            raise ValueError(f"VolumeTraining.lr must be a finite number > 0, got {self.lr!r}")
        for name, minimum in (("width", 1), ("levels", 1), ("warmup_epochs", 0)):
            if not is_count(getattr(self, name), minimum):
                raise ValueError(
                    f"VolumeTraining.{name} must be an integer >= {minimum}, "
                    f"got {getattr(self, name)!r}"
                )
        if not (is_number(self.dropout) and 0 <= self.dropout < 1):
            raise ValueError(f"VolumeTraining.dropout must be in [0, 1), got {self.dropout!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"VolumeTraining.dtype must be one of {DTYPES}, got {self.dtype!r}")
        epochs = self.decay_epochs
        if (
            not isinstance(epochs, tuple)
            or list(epochs) != sorted(set(epochs))
            or any(not is_count(e, 1) for e in epochs)
        ):
            raise ValueError(
                f"VolumeTraining.decay_epochs must be increasing epochs >= 1, got {epochs!r}"
            )
        if not (is_number(self.decay) and 0 < self.decay <= 1):
            raise ValueError(f"VolumeTraining.decay must be in (0, 1], got {self.decay!r}")
