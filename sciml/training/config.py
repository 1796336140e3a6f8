"""The options of :func:`sciml.training.fit`, checked when they are made."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from sciml.cli_args import nested, non_negative_int, option, positive_int
from sciml.progress import ALWAYS, Progress

__all__ = ["TrainConfig", "train_field"]


def _require_int(name: str, value: object, minimum: int, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        expected = f"an integer >= {minimum}" + (" or None" if optional else "")
        raise ValueError(f"TrainConfig.{name} must be {expected}, got {value!r}")


def _require_float(name: str, value: object, *, positive: bool, optional: bool = False) -> None:
    if optional and value is None:
        return
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):  # type: ignore[operator, arg-type]
        expected = "a finite number " + ("> 0" if positive else ">= 0")
        expected += " or None" if optional else ""
        raise ValueError(f"TrainConfig.{name} must be {expected}, got {value!r}")


def _require_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"TrainConfig.{name} must be one of {choices}, got {value!r}")


@dataclass(frozen=True)
class TrainConfig:
    """Options of :func:`fit`, checked when they are made, then frozen.

    ``dataclasses.replace(config, epochs=20)`` makes a checked copy.

    Attributes:
        epochs: Number of passes over the training set (>= 1).
        batch_size: Samples per optimiser step (per data-parallel replica, >= 1);
            larger than a replica's share of the dataset, an epoch is one
            smaller batch (and an error with ``drop_last``).
        seed: Seed of every generator and of the shuffling (0 <= seed < 2**32).
        shuffle: Shuffle the training set each epoch.
        drop_last: Drop the last incomplete batch of an epoch.
        num_workers: ``DataLoader`` worker processes (>= 0); they persist
            across epochs, and each batch's random state in a worker follows
            from ``seed``, the epoch and the batch's position (exact resume).
        micro_batches: Gradient accumulation: each batch is read and
            back-propagated in this many parts (as equal as possible, >= 1,
            at most ``batch_size``), each part's loss weighted by its share of
            the batch, then one optimiser step. Equals one pass over the whole
            batch for losses that are means over the samples (BatchNorm sees
            the parts, not the batch).
        precision: ``"fp32"``, or ``"bf16"`` to run the forward pass and the
            loss under ``torch.autocast`` in bfloat16 (parameters, gradients
            and the optimiser stay in their own dtype).
        checkpoint_every: Also checkpoint every this many optimiser steps
            (a checkpoint is always written at the end of every epoch).
        patience: Stop after this many epochs (>= 1) without improvement of
            ``monitor`` (``None``: never stop early).
        monitor: Epoch metric that decides the best checkpoint and early stop.
            ``fit`` logs ``train_<name>`` and ``val_<name>`` for every value
            ``loss_fn`` returns (``train_loss``, ``val_loss``, ...) and ``lr``;
            any other name is an error. ``None``: ``val_loss`` when there is a
            validation set, else ``train_loss``.
        mode: ``"min"`` or ``"max"``: which direction of ``monitor`` is better.
        min_delta: Smallest change of ``monitor`` that counts as an improvement (>= 0).
        grad_clip: Clip the gradient norm to this value (> 0).
        scheduler_interval: Step the scheduler after every ``"epoch"`` or ``"step"``.
        progress: Show a tqdm bar of each epoch's steps on rank 0: ``True`` where
            it is seen (stderr is a terminal, or in a notebook), ``"always"`` also
            in a batch job's log, ``False`` never. The status lines of
            :mod:`sciml.training.report` do not depend on it.
        tensorboard: Also log to TensorBoard when it is installed.
        handle_signals: Checkpoint and return on SIGTERM/SIGUSR1.
    """

    epochs: int = 10
    batch_size: int = 8
    seed: int = 0
    shuffle: bool = True
    drop_last: bool = False
    num_workers: int = 0
    micro_batches: int = 1
    precision: Literal["fp32", "bf16"] = "fp32"
    checkpoint_every: int | None = None
    patience: int | None = None
    monitor: str | None = None
    mode: Literal["min", "max"] = "min"
    min_delta: float = 0.0
    grad_clip: float | None = None
    scheduler_interval: Literal["epoch", "step"] = "epoch"
    progress: Progress = True
    tensorboard: bool = True
    handle_signals: bool = True

    def __post_init__(self) -> None:
        """Reject out-of-range or mistyped options, naming the field."""
        _require_int("epochs", self.epochs, 1)
        _require_int("batch_size", self.batch_size, 1)
        _require_int("seed", self.seed, 0)
        if self.seed >= 2**32:
            raise ValueError(f"TrainConfig.seed must be < 2**32, got {self.seed}")
        _require_int("num_workers", self.num_workers, 0)
        _require_int("micro_batches", self.micro_batches, 1)
        if self.micro_batches > self.batch_size:
            raise ValueError(
                f"TrainConfig.micro_batches={self.micro_batches} is more than "
                f"batch_size={self.batch_size}: a micro-batch needs at least one sample"
            )
        _require_choice("precision", self.precision, ("fp32", "bf16"))
        _require_int("checkpoint_every", self.checkpoint_every, 1, optional=True)
        _require_int("patience", self.patience, 1, optional=True)
        if not (isinstance(self.progress, bool) or self.progress == ALWAYS):
            raise ValueError(
                f"TrainConfig.progress must be True, False or {ALWAYS!r}, got {self.progress!r}"
            )
        for name in ("shuffle", "drop_last", "tensorboard", "handle_signals"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"TrainConfig.{name} must be True or False, got {getattr(self, name)!r}"
                )
        if self.monitor is not None and (not isinstance(self.monitor, str) or not self.monitor):
            raise ValueError(
                f"TrainConfig.monitor must be a metric name or None, got {self.monitor!r}"
            )
        _require_choice("mode", self.mode, ("min", "max"))
        _require_float("min_delta", self.min_delta, positive=False)
        _require_float("grad_clip", self.grad_clip, positive=True, optional=True)
        _require_choice("scheduler_interval", self.scheduler_interval, ("epoch", "step"))

    def is_better(self, value: float, best: float | None) -> bool:
        """True if ``value`` of the monitored metric beats ``best`` by more than ``min_delta``."""
        if best is None:
            return True
        if self.mode == "min":
            return value < best - self.min_delta
        return value > best + self.min_delta


def train_field(batch_help: str, **defaults: Any) -> Any:
    """The ``train`` field of a workflow's configuration: epochs, batch size and seed as options.

    The default loop logs no TensorBoard files; its other options are ``defaults`` (e.g.
    ``epochs=30``), else :class:`~sciml.training.TrainConfig`'s.
    """
    return dataclasses.field(
        default_factory=lambda: TrainConfig(tensorboard=False, **defaults),
        metadata=nested(
            epochs=option("training epochs", type=positive_int),
            batch_size=option(batch_help, type=positive_int),
            seed=option("seed of the run", type=non_negative_int),
        ),
    )
