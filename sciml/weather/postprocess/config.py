"""The options of a post-processing run (``sciml weather train``), checked when made.

The command line is generated from :class:`PostprocessConfig`'s fields
(:mod:`sciml.cli_args`); :func:`sciml.weather.postprocess.train.train_postprocessor` takes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sciml.cli_args import not_an_option, option, positive_float, positive_int
from sciml.training.checks import is_count, is_fraction, is_names, is_rate, require
from sciml.training.config import TrainConfig, train_field
from sciml.weather.options import LOSS_SCALES, MISSING
from sciml.weather.postprocess.registry import MODELS

__all__ = ["DEFAULT_EPOCHS", "PostprocessConfig"]

#: Epochs of a deep model by default (``train``). The defaults (model ``pooled``, 30 epochs,
#: learning rate 3e-3) were chosen on the validation dates of an independent draw of the
#: evaluation preset (``benchmarks/weather_defaults.py --stage select``).
DEFAULT_EPOCHS = 30


@dataclass(frozen=True)
class PostprocessConfig:
    """What a post-processing run trains, and how.

    Attributes:
        model: A model of :data:`~sciml.weather.postprocess.registry.MODELS`: ``"emos"``,
            ``"mlp"``, ``"unet"``, ``"mixed"`` or ``"pooled"`` (the default).
        members: Members the model sees (the first ones for a closed-form fit such as
            EMOS; >= 2, at most the ensemble's size).
        variables: Forecast variables (``None``: every one with a truth).
        choice: ``"first"`` or ``"random"`` members per training sample (deep models;
            ``None``: ``"random"`` for ``pooled``, which is meant for any members, else
            ``"first"``).
        validation: Fraction of the last start dates that validates a deep model (the
            checkpoint kept is the best on them); EMOS fits on every date (its run records 0).
        train: The loop's options (:class:`~sciml.training.TrainConfig`; deep models;
            by default :data:`DEFAULT_EPOCHS` epochs, no TensorBoard files).
        lr: Adam learning rate (deep models).
        loss_scale: ``"raw-crps"`` (the deep models' CRPS of each channel and lead time
            divided by the raw full ensemble's on the training dates, so every row counts
            alike: :mod:`sciml.weather.postprocess.loss_scale`) or ``"none"`` (the plain mean
            CRPS). EMOS fits every row on its own, where a row's constant scale moves nothing.
        missing: Points missing (NaN) in a forecast, its truth or a static field:
            ``"refuse"`` the data before anything is written, or ``"mask"`` them: left out
            of the loss (the deep models see the channel's mean there) and of the EMOS
            fit, predicted as missing wherever a member is missing.
        static: Static fields for the deep models (``None``: every field without sample
            dims; EMOS uses none).
        channel_dims: Dims folded into channels.
        grid: The (lat, lon) sizes, from the data (deep models; a run records them).
        periodic: Whether the longitudes close the circle, from the data (deep models).
    """

    model: str = field(default="pooled", metadata=option("model to train", choices=tuple(MODELS)))
    members: int = field(default=5, metadata=option("members the model sees", type=positive_int))
    variables: tuple[str, ...] | None = field(
        default=None,
        metadata=option("forecast variables; unset: every one with a truth", nargs="+"),
    )
    choice: str | None = field(
        default=None,
        metadata=option(
            "first k members, or k drawn per training sample (unset: random for pooled, "
            "first for the others)",
            choices=("first", "random"),
        ),
    )
    validation: float = field(
        default=0.2,
        metadata=option(
            "fraction of the last dates that validates a deep model (EMOS fits on all)",
            type=positive_float,
        ),
    )
    train: TrainConfig = train_field("samples per step on each rank", epochs=DEFAULT_EPOCHS)
    lr: float = field(default=3e-3, metadata=option("Adam learning rate", type=positive_float))
    loss_scale: str = field(
        default="raw-crps",
        metadata=option(
            "deep models: divide each channel's and lead time's CRPS by the raw ensemble's "
            "(every row counts alike), or not",
            choices=LOSS_SCALES,
        ),
    )
    missing: str = field(
        default="refuse",
        metadata=option(
            "points missing (NaN) in a forecast, truth or static field: refuse the data "
            "before anything is written, or mask them (left out of the loss and the scores)",
            choices=MISSING,
        ),
    )
    static: tuple[str, ...] | None = field(default=None, metadata=not_an_option())
    channel_dims: tuple[str, ...] = field(default=("level",), metadata=not_an_option())
    grid: tuple[int, ...] = field(default=(), metadata=not_an_option())
    periodic: bool = field(default=False, metadata=not_an_option())

    def __post_init__(self) -> None:
        """Reject an unknown model, choice or loss scale and out-of-range numbers, by name."""
        require(self, "model", self.model in MODELS, f"one of {tuple(MODELS)}")
        require(self, "members", is_count(self.members, 2), "an integer >= 2")
        require(
            self,
            "variables",
            self.variables is None or is_names(self.variables),
            "None or a non-empty tuple of variable names",
        )
        require(
            self, "choice", self.choice in (None, "first", "random"), "None, 'first' or 'random'"
        )
        closed_form = not MODELS[self.model].deep
        require(
            self,
            "validation",
            is_fraction(self.validation, zero=closed_form),
            "a fraction in (0, 1)" + (" or 0" if closed_form else ""),
        )
        require(self, "train", isinstance(self.train, TrainConfig), "a TrainConfig")
        require(self, "lr", is_rate(self.lr), "a finite number > 0")
        require(self, "loss_scale", self.loss_scale in LOSS_SCALES, f"one of {LOSS_SCALES}")
        require(self, "missing", self.missing in MISSING, f"one of {MISSING}")
        require(
            self,
            "static",
            self.static is None or isinstance(self.static, tuple),
            "None or a tuple of variable names",
        )
        require(
            self, "channel_dims", isinstance(self.channel_dims, tuple), "a tuple of dimension names"
        )
        require(self, "grid", isinstance(self.grid, tuple), "a tuple of sizes")
