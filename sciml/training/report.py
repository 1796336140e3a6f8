"""What :func:`sciml.training.fit` tells the person running it, as status lines.

On rank 0, through the ``sciml.training`` logger at level ``INFO``
(:mod:`sciml.progress` says where such lines show): a line when training starts (or
resumes), one per epoch (its training and validation values, its time and throughput),
and a closing summary (how the run ended, where it stopped and how to resume it, the best
epoch, its monitored value and checkpoint). Epochs are counted from 1, as the progress bar
and :attr:`sciml.training.setup.TrainResult.history` count them (``metrics.csv`` counts from 0).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from sciml.progress import duration
from sciml.training.config import TrainConfig
from sciml.training.setup import LoopState, Status

__all__ = ["TrainReport", "best_epoch", "epoch_line", "logger"]

#: The logger of the training loop's status lines.
logger = logging.getLogger("sciml.training")


def best_epoch(history: list[dict[str, float]], monitor: str, config: TrainConfig) -> int | None:
    """The epoch (from 1) whose ``monitor`` value ``fit`` kept as the best, as it chose it."""
    best, found = None, None
    for row in history:
        if config.is_better(row[monitor], best):
            best, found = row[monitor], int(row["epoch"])
    return found


def _count(number: int, noun: str) -> str:
    """``"1 epoch"``, ``"2 epochs"``."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _value(value: float) -> str:
    """A metric as the lines show it: five significant digits."""
    return f"{value:.5g}"


def epoch_line(
    epoch: int,
    epochs: int,
    metrics: dict[str, float],
    *,
    monitor: str,
    improved: bool,
    seconds: float,
    samples: int,
) -> str:
    """One epoch: ``epoch 2/10: train_loss 0.1, val_loss 0.2 (best), 1.5 s, 640 samples/s``.

    Args:
        epoch: The epoch, from 1.
        epochs: Epochs of the run.
        metrics: The epoch's metrics as ``fit`` logs them (``train_*``, ``val_*``, ``lr``).
        monitor: The monitored metric (marked ``(best)`` when ``improved``).
        improved: Whether the epoch improved the monitored metric.
        seconds: The epoch's time (training and validation).
        samples: Training samples of the epoch, over every replica.
    """
    names: list[str] = [n for n in ("train_loss", "val_loss") if n in metrics]
    names += [n for n in metrics if n.startswith(("train_", "val_")) and n not in names]
    names += [monitor] if monitor not in names else []
    parts = [
        f"{name} {_value(metrics[name])}" + (" (best)" if improved and name == monitor else "")
        for name in names
    ]
    rate = samples / seconds if seconds > 0 else float("nan")
    parts += [duration(seconds), f"{rate:.3g} samples/s"]
    return f"epoch {epoch}/{epochs}: " + ", ".join(parts)


class TrainReport:
    """The status lines of one call of ``fit`` (logged on rank 0 only).

    Args:
        run_dir: The run folder.
        config: The run's options.
        monitor: The monitored metric.
        enabled: Log anything (true on rank 0).
    """

    def __init__(self, run_dir: Path, config: TrainConfig, monitor: str, *, enabled: bool) -> None:
        """Start the clock of the call."""
        self.run_dir, self.config, self.monitor, self.enabled = run_dir, config, monitor, enabled
        self.start = time.perf_counter()

    def _info(self, line: str) -> None:
        if self.enabled:
            logger.info("%s", line)

    def started(
        self, state: LoopState, *, steps: int, samples: int, val_samples: int | None
    ) -> None:
        """Say what the call trains: a new run, or where a resumed one goes on.

        Args:
            state: The state training starts from.
            steps: Optimiser steps per epoch (of this replica).
            samples: Training samples.
            val_samples: Validation samples (``None``: no validation set).
        """
        epochs = self.config.epochs
        if state.global_step == 0:
            val = "no validation set" if val_samples is None else f"{val_samples} validation"
            self._info(
                f"training in {self.run_dir}: {_count(epochs, 'epoch')} of "
                f"{_count(steps, 'step')}, {samples} training samples, {val}"
            )
        elif state.epoch >= epochs and state.step_in_epoch == 0:  # trained to its end before
            self._info(
                f"the run in {self.run_dir} is complete: {_count(state.epoch, 'epoch')} "
                f"({_count(state.global_step, 'step')}) in checkpoints/last.pt, nothing left to "
                "train (more epochs train on)"
            )
        else:
            self._info(
                f"resuming the run in {self.run_dir} from checkpoints/last.pt: epoch "
                f"{state.epoch + 1}/{epochs} after step {state.step_in_epoch} of {steps} "
                f"(step {state.global_step} of the run)"
            )

    def epoch(self, line: str) -> None:
        """Log an :func:`epoch_line`."""
        self._info(line)

    def finished(
        self, status: Status, state: LoopState, *, steps: int, best_path: Path, last_path: Path
    ) -> None:
        """The closing summary: how the call ended, then the best epoch so far.

        Args:
            status: How the call ended.
            state: The final state.
            steps: Optimiser steps in the epoch it stopped in (of this replica).
            best_path: The best epoch's checkpoint.
            last_path: The latest checkpoint.
        """
        took = duration(time.perf_counter() - self.start)
        epochs = self.config.epochs
        if status == "interrupted":
            self._info(
                f"interrupted by a signal in epoch {state.epoch + 1}/{epochs} after step "
                f"{state.step_in_epoch} of {steps} (step {state.global_step} of the run), "
                f"after {took}; checkpoint {last_path}; run the same command again (fit with "
                f"the same run folder) to resume from there"
            )
        elif status == "early_stopped":
            self._info(
                f"stopped early after epoch {state.epoch}/{epochs}: {self.monitor} did not "
                f"improve for {_count(state.bad_epochs, 'epoch')}; "
                f"{_count(state.global_step, 'step')}, {took}"
            )
        else:
            self._info(
                f"completed {_count(state.epoch, 'epoch')} ({_count(state.global_step, 'step')}) "
                f"in {took}; "
                f"last checkpoint {last_path}"
            )
        best = best_epoch(state.history, self.monitor, self.config)
        if best is None:
            self._info("no epoch has ended yet, so there is no best checkpoint")
        else:
            value = state.history[best - 1][self.monitor]
            self._info(f"best epoch {best}: {self.monitor} {_value(value)}, checkpoint {best_path}")
