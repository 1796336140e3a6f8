"""The options of a spread run (``sciml weather spread train``), checked when made.

The command line is generated from :class:`SpreadConfig`'s fields (:mod:`sciml.cli_args`);
:func:`sciml.weather.spread.train.train_spread` takes it, and its run record
(:mod:`sciml.weather.spread.record`) keeps it with what the data decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sciml.cli_args import not_an_option, option, positive_float, positive_int
from sciml.training.checks import is_count, is_fraction, is_names, is_rate, require
from sciml.training.config import TrainConfig, train_field
from sciml.weather.options import SPREAD_LOSSES

if TYPE_CHECKING:
    from sciml.weather.spread.model import SpreadPredictor

__all__ = ["SpreadConfig"]

_SPATIAL = ("lat", "lon")


@dataclass(frozen=True)
class SpreadConfig:
    """What a spread run trains, and how.

    Attributes:
        members: ``k``, members the model sees (2 <= k <= the ensemble size).
        history: Lead times stacked (1: none before the current one).
        loss: One of :data:`~sciml.weather.spread.model.LOSSES`.
        variables: Forecast variables (``None``: every one with a truth).
        periodic: Spatial dims that wrap around (``"lat"``, ``"lon"``; ``None``: ``"lon"``
            when the longitudes close 360 degrees, else none). ``"lon"`` on longitudes
            that do not close the circle is refused.
        choice: ``"first"`` or ``"random"`` members per training sample.
        validation: Fraction of the last start dates used for validation.
        train: The loop's options (:class:`~sciml.training.TrainConfig`).
        lr: Adam learning rate.
        base_channels: Channels of the U-Net's first level.
        depth: Poolings of lat and lon.
        ensemble: The size of the ensemble whose spread the run predicts, from the data
            (the training data's member count; 0 until a run sets it).
        lead_days: The data's lead times in days (a run sets them).
        levels: The data's levels (0 until a run sets them).
    """

    members: int = field(default=5, metadata=option("members the model sees", type=positive_int))
    history: int = field(
        default=1,
        metadata=option(
            "lead times stacked: the current one and the N-1 before it (1: current only)",
            flag="--temporal",
            type=positive_int,
            metavar="N",
        ),
    )
    loss: str = field(
        default="l1", metadata=option("loss against the spread", choices=SPREAD_LOSSES)
    )
    variables: tuple[str, ...] | None = field(
        default=None,
        metadata=option("forecast variables; unset: every one with a truth", nargs="+"),
    )
    periodic: tuple[str, ...] | None = field(
        default=None,
        metadata=option(
            "spatial dims that wrap around (unset: lon when the longitudes close 360 "
            "degrees; the toy QG domain: lat lon)",
            nargs="*",
            choices=_SPATIAL,
        ),
    )
    choice: str = field(
        default="first",
        metadata=option(
            "first k members, or k drawn per training sample", choices=("first", "random")
        ),
    )
    validation: float = field(
        default=0.2, metadata=option("fraction of dates to validate on", type=positive_float)
    )
    train: TrainConfig = train_field("samples per step (per rank)")
    lr: float = field(default=1e-3, metadata=option("Adam learning rate", type=positive_float))
    base_channels: int = field(default=16, metadata=not_an_option())
    depth: int = field(default=2, metadata=not_an_option())
    ensemble: int = field(default=0, metadata=not_an_option())
    lead_days: tuple[float, ...] = field(default=(), metadata=not_an_option())
    levels: int = field(default=0, metadata=not_an_option())

    def __post_init__(self) -> None:
        """Reject an unknown loss, choice or dim and out-of-range numbers, by name."""
        require(self, "members", is_count(self.members, 2), "an integer >= 2")
        require(self, "history", is_count(self.history, 1), "an integer >= 1")
        require(self, "loss", self.loss in SPREAD_LOSSES, f"one of {SPREAD_LOSSES}")
        require(
            self,
            "variables",
            self.variables is None or is_names(self.variables),
            "None or a non-empty tuple of variable names",
        )
        periodic = self.periodic
        spatial = isinstance(periodic, tuple) and set(periodic) <= set(_SPATIAL)
        require(self, "periodic", periodic is None or spatial, f"None or a tuple of {_SPATIAL}")
        require(self, "choice", self.choice in ("first", "random"), "'first' or 'random'")
        require(self, "validation", is_fraction(self.validation), "a fraction in (0, 1)")
        require(self, "train", isinstance(self.train, TrainConfig), "a TrainConfig")
        require(self, "lr", is_rate(self.lr), "a finite number > 0")
        require(self, "base_channels", is_count(self.base_channels, 1), "an integer >= 1")
        require(self, "depth", is_count(self.depth, 0), "an integer >= 0")
        require(self, "ensemble", is_count(self.ensemble, 0), "an integer >= 0")
        require(self, "lead_days", isinstance(self.lead_days, tuple), "a tuple of days")
        require(self, "levels", is_count(self.levels, 0), "an integer >= 0")

    def build(self) -> SpreadPredictor:
        """A new model of this configuration (a run's, with the data's sizes set)."""
        from sciml.weather.spread.model import SpreadPredictor

        return SpreadPredictor(
            len(self.variables or ()),
            members=self.members,
            ensemble=self.ensemble,
            levels=self.levels,
            history=self.history,
            periodic=self.periodic or (),
            base_channels=self.base_channels,
            depth=self.depth,
        )
