"""One run of the training loop as named steps: epoch, step, end of epoch, evaluate, checkpoint.

A :class:`RunTrainer` holds one run's checked inputs (:class:`~sciml.training.setup.TrainSetup`),
its counters (:class:`~sciml.training.setup.LoopState`), metrics log, loaders, clock and
status lines, as torchtitan's trainer does; the driver of :mod:`sciml.training.loop` trains
one of them (:func:`~sciml.training.loop.fit`) or several in lockstep
(:func:`~sciml.training.loop.fit_fused`), the other modules of :mod:`sciml.training` each
hold one of its jobs. The driver does each step's forward and backward pass (the run's own
:class:`~sciml.training.step.StepRunner`, or one batched pass for several runs) between the
steps :meth:`RunTrainer.epoch_steps` yields and applies.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from sciml.datasets.sampling import epoch_batches, seed_everything
from sciml.distributed import PreemptionFlag, all_reduce_sums, gather_objects, world
from sciml.progress import bar_visible
from sciml.training.batches import EpochLoader, accumulate, micro_batches, progress, tagged
from sciml.training.checkpoint import save_checkpoint
from sciml.training.perf import EpochClock, log_perf
from sciml.training.report import TrainReport, epoch_line
from sciml.training.run_log import open_metrics_log
from sciml.training.setup import (
    LoopState,
    Status,
    TrainResult,
    TrainSetup,
    dataset_length,
    resume_state,
)
from sciml.training.step import StepRunner, global_values

__all__ = ["RunTrainer", "SharedStop"]


class SharedStop:
    """The signal flag as the runs trained together read it: once a step, so all stop together.

    The first run to ask after a step (:meth:`any_rank`) reads the flag on every rank
    (collective); the others that step get the same answer. A request (a run's
    ``preempt_after``, the same step for every run) raises the flag before it is read.
    """

    def __init__(self, flag: PreemptionFlag) -> None:
        """``flag`` as the runs read it; not read yet."""
        self.flag, self.stop, self.read = flag, False, False

    def next_step(self) -> None:
        """A new step: the flag is read again by the first run that asks."""
        self.read = False

    def request(self, signum: int = signal.SIGUSR1) -> None:
        """Raise the flag as ``signum`` would: stop after this step."""
        self.flag.request(signum)

    def any_rank(self) -> bool:
        """Whether the runs stop after this step (collective on its first call)."""
        if not self.read:
            self.stop, self.read = self.flag.any_rank(), True
        return self.stop


class RunTrainer:
    """One run of :func:`~sciml.training.loop.fit` as named steps (module docstring)."""

    def __init__(
        self, setup: TrainSetup, *, resume: bool, preempt_after: int | None = None
    ) -> None:
        """Seed every generator, take the state of ``last.pt`` (when resuming) or a new one.

        Args:
            setup: The run's checked inputs.
            resume: Continue from ``last.pt`` when it exists.
            preempt_after: Stop after this optimiser step, as on a signal.
        """
        self.s = setup
        self.preempt_after = preempt_after
        seed_everything(setup.config.seed)
        self.state = resume_state(setup) if resume and setup.last.exists() else LoopState()
        self.state.run = setup.record
        if setup.rank == 0:
            setup.last.parent.mkdir(parents=True, exist_ok=True)
            if self.state.global_step == 0:  # a new run: a best.pt left by an old one is not its
                self.best_path.unlink(missing_ok=True)
        self.log = open_metrics_log(
            setup.run_dir,
            rows=self.state.rows_written,
            tensorboard=setup.config.tensorboard,
            enabled=setup.rank == 0,
            epoch=lambda: self.state.epoch,
        )
        self.runner = StepRunner(setup.model, setup.loss_fn, setup.config, setup.device, setup.mesh)
        pin = setup.device.type == "cuda"
        self.loaders = {
            name: EpochLoader(data, setup.config, setup.collate_fn, pin_memory=pin)
            for name, data in (("train", setup.train_dataset), ("val", setup.val_dataset))
            if data is not None
        }
        self.clock = EpochClock()
        self.report = TrainReport(
            setup.run_dir, setup.config, setup.monitor, enabled=setup.rank == 0
        )
        self.steps = len(self.epoch_parts(self.state.epoch))  # of the epoch being trained
        self.epoch_start = time.perf_counter()

    @property
    def best_path(self) -> Path:
        """The checkpoint of the best epoch so far."""
        return self.s.run_dir / "checkpoints" / "best.pt"

    def started(self) -> None:
        """Say what the run is about to do (its first status line)."""
        s = self.s
        val_samples = (
            None if s.val_dataset is None else dataset_length("val_dataset", s.val_dataset)
        )
        self.report.started(
            self.state,
            steps=self.steps,
            samples=dataset_length("train_dataset", s.train_dataset),
            val_samples=val_samples,
        )

    def close(self) -> None:
        """Close the metrics log and stop the loader workers."""
        self.log.close()
        for loader in self.loaders.values():
            loader.close()

    def finished(self, status: Status) -> TrainResult:
        """Say how the run ended (its closing status line); what it did."""
        self.report.finished(
            status, self.state, steps=self.steps, best_path=self.best_path, last_path=self.s.last
        )
        return self.result(status)

    def where(self) -> str:
        """The step being trained, for an error's message."""
        state = self.state
        return f"at epoch {state.epoch}, step {state.global_step} of the run in {self.s.run_dir}"

    def ended(self) -> Status | None:
        """How the run ended before this resume (its last epoch done, or stopped early), if so."""
        state, config = self.state, self.s.config
        if state.epoch >= config.epochs:
            return "completed"
        if config.patience is not None and state.epoch and state.bad_epochs >= config.patience:
            return "early_stopped"
        return None

    def epoch_steps(
        self, stop: SharedStop
    ) -> Generator[tuple[list[Any], list[int]], dict[str, float], bool]:
        """The rest of the current epoch as steps; returns false if ``stop`` stopped it.

        Yields each step's batch parts and their sizes with the gradients zeroed; the
        driver back-propagates them (:meth:`StepRunner.backward`, or a fused step of
        several runs) and sends back the step's values, then the step is applied.

        The bar (on rank 0, where :func:`sciml.progress.bar_visible` says it is seen)
        counts the epoch's optimiser steps and shows the running mean of the steps'
        training loss since it started.
        """
        s, state = self.s, self.state
        parts = self.epoch_parts(state.epoch)
        self.steps, self.epoch_start = len(parts), time.perf_counter()
        s.model.train()
        first = sum(len(batch) for batch in parts[: state.step_in_epoch])
        todo = parts[state.step_in_epoch :]
        flat = [part for batch in todo for part in batch]
        following = state.epoch + 1 < s.config.epochs
        then = (
            [p for batch in self.epoch_parts(state.epoch + 1) for p in batch] if following else None
        )
        loader = self.loaders["train"].epoch(flat, epoch=state.epoch, first=first, then=then)
        batches = self.clock.batches(loader)
        bar = progress(
            total=len(parts),
            initial=state.step_in_epoch,
            desc=f"epoch {state.epoch + 1}/{s.config.epochs}",
            show=s.rank == 0 and bar_visible(s.config.progress),
        )
        loss_sum, samples = 0.0, 0
        with bar:
            for batch_parts in todo:
                sizes = [len(p) for p in batch_parts]
                parts = [next(batches) for _ in batch_parts]
                s.optimizer.zero_grad(set_to_none=True)
                values = self.apply_step((yield parts, sizes), sizes)
                loss_sum, samples = loss_sum + values["loss"] * sum(sizes), samples + sum(sizes)
                bar.set_postfix(loss=f"{loss_sum / samples:.4g}", refresh=False)
                bar.update()
                if state.global_step == self.preempt_after:
                    stop.request()
                if stop.any_rank():
                    self.checkpoint(s.last)
                    return False
                every = s.config.checkpoint_every
                if every and state.global_step % every == 0:
                    self.checkpoint(s.last)
        return True

    def epoch_parts(self, epoch: int) -> list[list[list[int]]]:
        """The index batches of ``epoch`` for this replica, each split into micro-batches."""
        s = self.s
        # a dataset stored in chunks (sciml.datasets.chunked) is read in an order that follows them
        layout = getattr(s.train_dataset, "chunk_layout", None)
        batches = epoch_batches(
            dataset_length("train_dataset", s.train_dataset),
            s.config.batch_size,
            epoch=epoch,
            seed=s.config.seed,
            shuffle=s.config.shuffle,
            drop_last=s.config.drop_last,
            replica=s.replica,
            chunks=None if layout is None else layout.bounds,
            buffer=1 if layout is None else layout.buffer,
        )
        return [micro_batches(batch, s.config.micro_batches) for batch in batches]

    def apply_step(self, values: dict[str, float], sizes: list[int]) -> dict[str, float]:
        """The optimiser step after a batch's backward; adds its values to the epoch's sums.

        Returns:
            The step's global values, as the metrics log records them.
        """
        s, state = self.s, self.state
        where = f"at step {state.global_step}"
        scale = self.runner.scale()
        scaled = {name: value * scale for name, value in values.items()}
        state.count = accumulate(state.sums, state.count, scaled, sum(sizes), where=where)
        if s.config.grad_clip is not None:
            nn.utils.clip_grad_norm_(s.model.parameters(), s.config.grad_clip)
        s.optimizer.step()
        if s.scheduler is not None and s.config.scheduler_interval == "step":
            s.scheduler.step()
        state.step_in_epoch += 1
        state.global_step += 1
        self.clock.step_done(sum(sizes))
        logged = global_values(values, scale)
        self.log.log(tagged("train_step", logged), state.global_step)
        return logged

    def end_of_epoch(self) -> bool:
        """Validate, log, checkpoint; true if early stopping ends the run."""
        s, state = self.s, self.state
        sums, count = all_reduce_sums(state.sums, state.count)
        metrics = {f"train_{k}": v / count for k, v in sums.items()}
        if s.val_dataset is not None:
            metrics |= self.evaluate(s.val_dataset)
        metrics["lr"] = s.optimizer.param_groups[0]["lr"]
        if s.monitor not in metrics:
            raise ValueError(
                f"TrainConfig.monitor={s.monitor!r} is not among the epoch metrics that fit "
                f"logs for this loss_fn: {sorted(metrics)}"
            )
        self.check_finite(metrics)
        self.log.log(tagged("epoch", metrics), state.global_step)
        bytes_read = getattr(s.train_dataset, "bytes_read", None)
        figures = self.clock.figures(s.device, bytes_read)
        log_perf(s.run_dir / "perf.csv", figures, epoch=state.epoch, step=state.global_step)
        # every rank of a replica counts its samples: the sum over ranks counts each that often
        _, samples = all_reduce_sums({}, self.clock.samples)
        samples //= world()[1] // s.replica[1]
        self.clock = EpochClock()
        if s.scheduler is not None and s.config.scheduler_interval == "epoch":
            s.scheduler.step()
        state.history.append({"epoch": state.epoch + 1, **metrics})
        state.epoch += 1
        state.step_in_epoch, state.sums, state.count = 0, {}, 0
        improved = s.config.is_better(metrics[s.monitor], state.best)
        if improved:
            state.best, state.bad_epochs = metrics[s.monitor], 0
        else:
            state.bad_epochs += 1
        self.report.epoch(
            epoch_line(
                state.epoch,
                s.config.epochs,
                metrics,
                monitor=s.monitor,
                improved=improved,
                seconds=time.perf_counter() - self.epoch_start,
                samples=samples,
            )
        )
        self.checkpoint(s.last)
        if improved:
            self.checkpoint(self.best_path)
        return s.config.patience is not None and state.bad_epochs >= s.config.patience

    def check_finite(self, metrics: dict[str, float]) -> None:
        """Refuse a non-finite validation loss or monitored metric before it is logged or kept.

        ``nan`` compares false with everything: a run that went on would keep ``best.pt``
        at the last finite epoch and never stop early.

        Raises:
            FloatingPointError: Naming the metric, the epoch (counted from 0, as the
                training loss's error counts it) and the run folder.
        """
        s = self.s
        for name in dict.fromkeys(["val_loss", s.monitor]):
            value = metrics.get(name)
            if value is not None and not math.isfinite(value):
                raise FloatingPointError(
                    f"{name} is {value} at epoch {self.state.epoch} of the run in {s.run_dir}; "
                    "lower the learning rate or check the validation data"
                )

    def checkpoint(self, path: Path) -> None:
        """Save the run on rank 0 (collective: every rank calls it)."""
        s, state = self.s, self.state
        gathered = gather_objects((state.sums, state.count))
        saved = dataclasses.replace(
            state,
            sums={},
            count=0,
            rank_sums=[sums for sums, _ in gathered],
            rank_counts=[count for _, count in gathered],
            rows_written=self.log.rows,
        )
        if s.rank == 0:
            save_checkpoint(
                path, s.model, optimizer=s.optimizer, scheduler=s.scheduler, state=vars(saved)
            )
        if world()[1] > 1:
            dist.barrier()

    @torch.no_grad()
    def evaluate(self, dataset: Dataset[Any]) -> dict[str, float]:
        """Mean of ``loss_fn``'s values over ``dataset`` (samples weighted equally)."""
        s = self.s
        s.model.eval()
        batches = epoch_batches(
            dataset_length("val_dataset", dataset),
            s.config.batch_size,
            epoch=0,
            seed=s.config.seed,
            shuffle=False,
            replica=s.replica,
        )
        sums: dict[str, float] = {}
        count = 0
        loader = self.loaders["val"].epoch(batches, epoch=0)
        for indices, batch in zip(batches, loader, strict=True):
            _, values = self.runner.loss(batch)
            scaled = {name: value * self.runner.scale() for name, value in values.items()}
            count = accumulate(sums, count, scaled, len(indices), where="on a validation batch")
        s.model.train()
        sums, count = all_reduce_sums(sums, count)
        return {f"val_{name}": value / count for name, value in sums.items()}

    def result(self, status: Status) -> TrainResult:
        """What the run did, for :func:`fit` to return."""
        state = self.state
        return TrainResult(
            status,
            state.epoch,
            state.global_step,
            list(state.history),
            state.best,
            self.s.last,
            self.s.run_dir,
        )
