"""The options of a segmenter training run (``sciml geo train``), checked when made.

The command line is generated from :class:`SegmenterConfig`'s fields
(:mod:`sciml.cli_args`); :func:`sciml.geo.training.train_segmenter` takes it, and its run
record stores it. Kept free of heavy imports, so that ``--help`` needs none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from sciml.cli_args import (
    nested,
    non_negative_int,
    not_an_option,
    option,
    positive_float,
    positive_int,
)
from sciml.training.checks import is_count, is_rate
from sciml.training.config import TrainConfig

__all__ = ["LOSS_KINDS", "LossKind", "SegmenterConfig", "check_tiles"]

LossKind = Literal["bce", "dice", "tversky", "bce+dice"]
#: Loss kinds accepted by :func:`sciml.geo.losses.masked_loss` and :class:`SegmenterConfig`.
LOSS_KINDS: tuple[LossKind, ...] = ("bce", "dice", "tversky", "bce+dice")


def check_tiles(tile: int, overlap: int, depth: int, *, depth_from: str = "--depth") -> None:
    """Reject ``overlap >= tile`` and a ``tile`` not divisible by ``2**depth``.

    Args:
        tile: Tile side in pixels (``--tile``).
        overlap: Overlap of neighbouring tiles in pixels (``--overlap``).
        depth: Levels of the U-Net the tiles are for.
        depth_from: Where ``depth`` comes from, for the message.

    Raises:
        ValueError: Naming the options and the values that do not fit.
    """
    if overlap >= tile:
        raise ValueError(f"--overlap ({overlap}) must be smaller than --tile ({tile})")
    if tile % 2**depth:
        raise ValueError(
            f"--tile ({tile}) must be divisible by 2**depth = {2**depth} ({depth_from} {depth})"
        )


@dataclass(frozen=True)
class SegmenterConfig:
    """What a segmenter run trains, and how.

    Attributes:
        train: The loop's options (:class:`~sciml.training.TrainConfig`): epochs, tiles per
            step and seed on the command line; no TensorBoard files.
        lr: Adam learning rate.
        tile: Side of the training tiles in pixels (divisible by ``2**depth``).
        overlap: Overlap of neighbouring training tiles in pixels (< ``tile``).
        base_channels: Channels of the first U-Net level.
        depth: U-Net levels.
        loss: One of :data:`LOSS_KINDS`.
        unmasked: The baseline: no mask input, unlabelled pixels count as background.
        mask_image: A masked model also zeroes the image off the mask.
    """

    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(epochs=10, batch_size=8, tensorboard=False),
        metadata=nested(
            epochs=option("passes over the tiles", type=positive_int),
            batch_size=option("tiles per step", type=positive_int),
            seed=option("random seed", type=non_negative_int),
        ),
    )
    lr: float = field(default=1e-3, metadata=option("Adam learning rate", type=positive_float))
    tile: int = field(default=128, metadata=option("tile side in pixels", type=positive_int))
    overlap: int = field(
        default=32, metadata=option("overlap of tiles in pixels", type=non_negative_int)
    )
    base_channels: int = field(
        default=16, metadata=option("channels of the first U-Net level", type=positive_int)
    )
    depth: int = field(default=3, metadata=option("U-Net levels", type=positive_int))
    loss: LossKind = field(default="bce", metadata=option("loss", choices=LOSS_KINDS))
    unmasked: bool = field(
        default=False, metadata=option("baseline: no mask, unlabelled = background")
    )
    mask_image: bool = field(default=True, metadata=not_an_option())

    def __post_init__(self) -> None:
        """Reject mistyped or out-of-range options and tiles the U-Net cannot take, by name."""
        if not isinstance(self.train, TrainConfig):
            raise ValueError(f"SegmenterConfig.train must be a TrainConfig, got {self.train!r}")
        if not is_rate(self.lr):
            raise ValueError(f"SegmenterConfig.lr must be a finite number > 0, got {self.lr!r}")
        for name, minimum in (("tile", 1), ("overlap", 0), ("base_channels", 1), ("depth", 1)):
            if not is_count(getattr(self, name), minimum):
                raise ValueError(
                    f"SegmenterConfig.{name} must be an integer >= {minimum}, "
                    f"got {getattr(self, name)!r}"
                )
        if self.loss not in LOSS_KINDS:
            raise ValueError(f"SegmenterConfig.loss must be one of {LOSS_KINDS}, got {self.loss!r}")
        for name in ("unmasked", "mask_image"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"SegmenterConfig.{name} must be True or False, got {getattr(self, name)!r}"
                )
        check_tiles(self.tile, self.overlap, self.depth)

    @property
    def masked(self) -> bool:
        """Whether the model sees the mask and the loss counts labelled pixels only."""
        return not self.unmasked

    def with_loop(self, **changes: Any) -> SegmenterConfig:
        """A checked copy whose :attr:`train` has ``changes`` (e.g. ``epochs=2``)."""
        return dataclasses.replace(self, train=dataclasses.replace(self.train, **changes))
