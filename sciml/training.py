"""The training loop that every workflow uses.

:func:`fit` trains a model on a map-style dataset with deterministic
shuffling, shows tqdm progress on rank 0, logs metrics to CSV (and
TensorBoard when installed), writes atomic checkpoints, resumes exactly where
a run stopped, stops early on a validation metric, and turns SIGTERM/SIGUSR1
(Slurm preemption or time limit) into a checkpoint and a clean return::

    def loss_fn(model, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(model(x), y)

    result = fit(model, optimizer, train_set, loss_fn, run_dir="runs/exp1",
                 config=TrainConfig(epochs=20, batch_size=16), val_dataset=val_set)
    if result.status == "interrupted":
        sys.exit(EXIT_REQUEUE)  # the batch script requeues the job

Exact resume: the order of samples in an epoch depends only on the seed and
the epoch, checkpoints hold every generator's state, the position inside the
epoch and the running metric sums of every data-parallel replica, so an
interrupted and resumed run computes the same losses and ends with the same
weights as an uninterrupted one (bit for bit on CPU).

A run folder belongs to one run: ``fit`` holds ``run_dir/run.lock`` while it
trains (a second process gets :class:`RunDirError` naming the first one's
pid), and refuses to resume a checkpoint written with another configuration
(:class:`TrainConfig` fields other than :data:`RESUMABLE_FIELDS`, the model's
parameters, the optimiser and its hyperparameters, the scheduler, the dataset
sizes, the number of replicas). Every input is checked before anything is written.

The options are in :mod:`sciml.train_config`, the run folder's lock and
record in :mod:`sciml.run_dir`, the metrics log in :mod:`sciml.run_log`; this
module keeps the loop with the checks of its inputs, one concern, which is why
it is longer than the others.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from sciml.checkpoint import read_checkpoint, restore_checkpoint, save_checkpoint
from sciml.distributed import PreemptionFlag, all_reduce_sums, check_replica, to_device, world
from sciml.run_dir import RunDirError, differences, lock_run_dir, run_record
from sciml.run_log import MetricsLog
from sciml.sampling import epoch_batches, epoch_seed, seed_everything
from sciml.train_config import RESUMABLE_FIELDS, TrainConfig

__all__ = [
    "EXIT_REQUEUE",
    "RESUMABLE_FIELDS",
    "RunDirError",
    "TrainConfig",
    "TrainResult",
    "epoch_batches",
    "fit",
    "seed_everything",
]

#: Exit code a script returns after checkpointing on a signal, so that a
#: Slurm batch script knows to requeue the job.
EXIT_REQUEUE = 3

LossOutput = torch.Tensor | dict[str, torch.Tensor]
LossFn = Callable[[nn.Module, Any], LossOutput]


@dataclass
class TrainResult:
    """What :func:`fit` did.

    Attributes:
        status: ``"completed"``, ``"early_stopped"`` or ``"interrupted"`` (by a signal).
        epoch: Epochs completed.
        global_step: Optimiser steps taken.
        history: One dict of epoch metrics per completed epoch (empty if
            interrupted in the first epoch).
        best: Best value of the monitored metric (``None`` if never logged).
        checkpoint: Path of the last checkpoint.
        run_dir: The run folder (``metrics.csv``, ``checkpoints/``).
    """

    status: Literal["completed", "early_stopped", "interrupted"]
    epoch: int
    global_step: int
    history: list[dict[str, float]]
    best: float | None
    checkpoint: Path
    run_dir: Path


@dataclass
class _LoopState:
    """Counters saved in every checkpoint.

    ``sums`` and ``count`` are the running sums of the epoch's metrics; in a
    checkpoint they are summed over every rank (and restored on rank 0 only).
    ``run`` describes the run (:func:`_run_record`), to refuse resuming with another one.
    """

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    rows_written: int = 0
    best: float | None = None
    bad_epochs: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    run: dict[str, Any] | None = None


def _length(name: str, dataset: object) -> int:
    """The length of a map-style dataset, which must not be empty."""
    if not isinstance(dataset, Sized):
        raise TypeError(f"{name} must be a map-style dataset with a length, got {type(dataset)}")
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty")
    return len(dataset)


def _split_loss(output: LossOutput) -> tuple[torch.Tensor, dict[str, float]]:
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


def _is_better(value: float, best: float | None, config: TrainConfig) -> bool:
    if best is None:
        return True
    if config.mode == "min":
        return value < best - config.min_delta
    return value > best + config.min_delta


def _loader(
    dataset: Dataset[Any],
    batches: Sequence[list[int]],
    config: TrainConfig,
    collate_fn: Callable[[list[Any]], Any] | None,
    epoch: int,
) -> DataLoader[Any]:
    # The loader's own generator seeds its workers, so resuming does not draw
    # from (and shift) the global generator.
    generator = torch.Generator().manual_seed(epoch_seed(config.seed, epoch, stream="workers"))
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=config.num_workers,
        collate_fn=collate_fn,
        generator=generator,
        persistent_workers=False,
    )


def _iterate(
    loader: DataLoader[Any], *, total: int, initial: int, desc: str, show: bool
) -> Iterator[Any]:
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


def _resolve_monitor(monitor: str | None, has_val: bool) -> str:
    """The metric to monitor, or a ``ValueError`` if ``fit`` would never log it."""
    name = monitor or ("val_loss" if has_val else "train_loss")
    if name == "lr" or name.startswith("train_") or (name.startswith("val_") and has_val):
        return name
    logged = "'train_<name>' and 'val_<name>'" if has_val else "'train_<name>' (no val_dataset)"
    raise ValueError(
        f"TrainConfig.monitor={name!r} is never logged: fit logs {logged} for every value "
        f"loss_fn returns (e.g. {'val_loss' if has_val else 'train_loss'!r}), and 'lr'"
    )


def _check_model(model: nn.Module, optimizer: torch.optim.Optimizer) -> torch.device:
    """The model's device, after checking that the optimiser updates this model."""
    params = list(model.parameters())
    if not params:
        raise ValueError(f"the model ({type(model).__qualname__}) has no parameters to train")
    own = {id(p) for p in params}
    foreign = sum(id(p) not in own for group in optimizer.param_groups for p in group["params"])
    if foreign:
        raise ValueError(
            f"the optimiser holds {foreign} parameter(s) that are not the model's; "
            "build it from model.parameters()"
        )
    return params[0].device


def _check_batches(n: int, config: TrainConfig, replicas: int) -> None:
    per_replica = math.ceil(n / replicas)
    if config.drop_last and per_replica < config.batch_size:
        raise ValueError(
            f"batch_size={config.batch_size} with drop_last=True leaves no batch: each of "
            f"{replicas} replica(s) gets {per_replica} of the {n} training samples"
        )


@dataclass
class _Setup:
    """Everything :func:`fit` checked, ready to train."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    train_dataset: Dataset[Any]
    val_dataset: Dataset[Any] | None
    loss_fn: LossFn
    scheduler: Any | None
    collate_fn: Callable[[list[Any]], Any] | None
    config: TrainConfig
    run_dir: Path
    device: torch.device
    replica: tuple[int, int]
    rank: int
    monitor: str
    record: dict[str, Any]

    @property
    def last(self) -> Path:
        return self.run_dir / "checkpoints" / "last.pt"


def _resume(setup: _Setup) -> _LoopState:
    """The loop state of ``last.pt``, after checking it belongs to this run."""
    last = setup.last
    payload = read_checkpoint(last, map_location=setup.device)
    known = {f.name for f in dataclasses.fields(_LoopState)}
    if not isinstance(payload["state"], dict) or set(payload["state"]) - known:
        raise RunDirError(
            f"{last} was not written by sciml.training.fit (its loop state has other fields); "
            "give this run another run_dir, or pass resume=False to overwrite it"
        )
    state = _LoopState(**payload["state"])
    problems = [] if state.run is None else differences(state.run, setup.record)
    if problems:
        more = f" and {len(problems) - 6} more" if len(problems) > 6 else ""
        raise RunDirError(
            f"{last} was written by a run with another configuration "
            f"({'; '.join(problems[:6])}{more}). "
            "To start a new run, give it another run_dir, or pass resume=False to overwrite "
            "this one"
        )
    if state.epoch > setup.config.epochs:
        raise RunDirError(
            f"{last} has already trained {state.epoch} epochs, more than "
            f"TrainConfig.epochs={setup.config.epochs}; ask for at least {state.epoch} epochs, "
            "or start a new run (another run_dir, or resume=False)"
        )
    restore_checkpoint(
        last, payload, setup.model, optimizer=setup.optimizer, scheduler=setup.scheduler
    )
    if setup.rank != 0:  # the saved sums are every rank's: count them once
        state.sums, state.count = {}, 0
    return state


class _Trainer:
    """The loop of :func:`fit` as named steps: train epoch, train step, end of epoch."""

    def __init__(self, setup: _Setup, state: _LoopState, log: MetricsLog) -> None:
        self.s, self.state, self.log = setup, state, log
        self.signals = PreemptionFlag(False)

    def run(self) -> TrainResult:
        status: Literal["completed", "early_stopped", "interrupted"] = "completed"
        with PreemptionFlag(self.s.config.handle_signals) as self.signals:
            while self.state.epoch < self.s.config.epochs:
                if not self.train_epoch():
                    status = "interrupted"
                    break
                if self.end_of_epoch():
                    status = "early_stopped"
                    break
        return self.result(status)

    def train_epoch(self) -> bool:
        """Train the rest of the current epoch; false if stopped by a signal."""
        s, state = self.s, self.state
        batches = epoch_batches(
            _length("train_dataset", s.train_dataset),
            s.config.batch_size,
            epoch=state.epoch,
            seed=s.config.seed,
            shuffle=s.config.shuffle,
            drop_last=s.config.drop_last,
            replica=s.replica,
        )
        todo = batches[state.step_in_epoch :]
        s.model.train()
        loader = _loader(s.train_dataset, todo, s.config, s.collate_fn, state.epoch)
        shown = _iterate(
            loader,
            total=len(batches),
            initial=state.step_in_epoch,
            desc=f"epoch {state.epoch + 1}/{s.config.epochs}",
            show=s.rank == 0 and s.config.progress,
        )
        for indices, batch in zip(todo, shown, strict=True):
            self.train_step(batch, len(indices))
            if self.signals.any_rank():
                self.checkpoint(s.last)
                return False
            every = s.config.checkpoint_every
            if every and state.global_step % every == 0:
                self.checkpoint(s.last)
        return True

    def train_step(self, batch: Any, size: int) -> None:
        """One optimiser step; adds the batch's values to the epoch's sums."""
        s, state = self.s, self.state
        s.optimizer.zero_grad(set_to_none=True)
        loss, values = _split_loss(s.loss_fn(s.model, to_device(batch, s.device)))
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"loss is {float(loss.detach())} at epoch {state.epoch}, step "
                f"{state.global_step}; lower the learning rate or check the inputs"
            )
        if state.count and set(values) != set(state.sums):
            raise ValueError(
                f"loss_fn returned {sorted(values)} at step {state.global_step} but "
                f"{sorted(state.sums)} before; it must return the same names at every step"
            )
        loss.backward()
        if s.config.grad_clip is not None:
            nn.utils.clip_grad_norm_(s.model.parameters(), s.config.grad_clip)
        s.optimizer.step()
        if s.scheduler is not None and s.config.scheduler_interval == "step":
            s.scheduler.step()
        state.step_in_epoch += 1
        state.global_step += 1
        for name, value in values.items():
            state.sums[name] = state.sums.get(name, 0.0) + value * size
        state.count += size
        self.log.log(state.epoch, state.global_step, "train_step", values)

    def end_of_epoch(self) -> bool:
        """Validate, log, checkpoint; true if early stopping ends the run."""
        s, state = self.s, self.state
        sums, count = all_reduce_sums(state.sums, state.count)
        metrics = {f"train_{k}": v / count for k, v in sums.items()}
        if s.val_dataset is not None:
            metrics |= _evaluate(
                s.model, s.val_dataset, s.loss_fn, s.config, s.collate_fn, s.device, s.replica
            )
        metrics["lr"] = s.optimizer.param_groups[0]["lr"]
        if s.monitor not in metrics:
            raise ValueError(
                f"TrainConfig.monitor={s.monitor!r} is not among the epoch metrics that fit "
                f"logs for this loss_fn: {sorted(metrics)}"
            )
        self.log.log(state.epoch, state.global_step, "epoch", metrics)
        if s.scheduler is not None and s.config.scheduler_interval == "epoch":
            s.scheduler.step()
        state.history.append({"epoch": state.epoch + 1, **metrics})
        state.epoch += 1
        state.step_in_epoch, state.sums, state.count = 0, {}, 0
        improved = _is_better(metrics[s.monitor], state.best, s.config)
        if improved:
            state.best, state.bad_epochs = metrics[s.monitor], 0
        else:
            state.bad_epochs += 1
        self.checkpoint(s.last)
        if improved:
            self.checkpoint(s.run_dir / "checkpoints" / "best.pt")
        return s.config.patience is not None and state.bad_epochs >= s.config.patience

    def checkpoint(self, path: Path) -> None:
        """Save the run on rank 0 (collective: every rank calls it)."""
        s, state = self.s, self.state
        sums, count = all_reduce_sums(state.sums, state.count)
        saved = dataclasses.replace(state, sums=sums, count=count, rows_written=self.log.rows)
        if s.rank == 0:
            save_checkpoint(
                path, s.model, optimizer=s.optimizer, scheduler=s.scheduler, state=vars(saved)
            )
        if world()[1] > 1:
            dist.barrier()

    def result(self, status: Literal["completed", "early_stopped", "interrupted"]) -> TrainResult:
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


def _setup(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_dataset: Dataset[Any],
    loss_fn: LossFn,
    *,
    run_dir: Path,
    config: TrainConfig,
    val_dataset: Dataset[Any] | None,
    scheduler: Any | None,
    collate_fn: Callable[[list[Any]], Any] | None,
    replica: tuple[int, int] | None,
) -> _Setup:
    """Check every input of :func:`fit` (nothing is written yet)."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable as loss_fn(model, batch), got {loss_fn!r}")
    n_train = _length("train_dataset", train_dataset)
    n_val = None if val_dataset is None else _length("val_dataset", val_dataset)
    rank, world_size = world()
    replica = check_replica(replica or (rank, world_size))
    if world_size % replica[1]:
        raise ValueError(
            f"replica={replica}: the {replica[1]} replicas must divide the {world_size} ranks"
        )
    _check_batches(n_train, config, replica[1])
    device = _check_model(model, optimizer)
    if scheduler is not None and getattr(scheduler, "optimizer", optimizer) is not optimizer:
        raise ValueError("the scheduler was built for another optimiser than the one given")
    monitor = _resolve_monitor(config.monitor, val_dataset is not None)
    kept = {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if f.name not in RESUMABLE_FIELDS
    }
    record = run_record(
        kept | {"monitor": monitor}, model, optimizer, scheduler, (n_train, n_val), replica[1]
    )
    return _Setup(
        model,
        optimizer,
        train_dataset,
        val_dataset,
        loss_fn,
        scheduler,
        collate_fn,
        config,
        run_dir,
        device,
        replica,
        rank,
        monitor,
        record,
    )


def fit(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_dataset: Dataset[Any],
    loss_fn: LossFn,
    *,
    run_dir: Path | str,
    config: TrainConfig | None = None,
    val_dataset: Dataset[Any] | None = None,
    scheduler: Any | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    resume: bool = True,
    replica: tuple[int, int] | None = None,
) -> TrainResult:
    """Train ``model`` and return what happened.

    Args:
        model: The model; batches are moved to the device of its first parameter.
        optimizer: Optimiser over the model's parameters.
        train_dataset: Map-style dataset of training samples.
        loss_fn: ``loss_fn(model, batch)`` returns the loss (a one-element
            tensor), or a dict with ``"loss"`` and other one-element tensors to
            log, with the same names at every step.
        run_dir: Folder for ``metrics.csv``, ``checkpoints/last.pt``,
            ``checkpoints/best.pt`` and the lock file ``run.lock``.
        config: Loop options (default :class:`TrainConfig`).
        val_dataset: Dataset evaluated with ``loss_fn`` after every epoch;
            its metrics are logged with a ``val_`` prefix.
        scheduler: Learning-rate scheduler stepped per ``config.scheduler_interval``.
        collate_fn: Batch collation (default: torch's).
        resume: Continue from ``run_dir/checkpoints/last.pt`` when it exists
            (``False``: start over, overwriting the run in ``run_dir``).
        replica: ``(index, count)`` of this data-parallel replica; default
            ``(rank, world_size)``. Spatially parallel runs pass the data-parallel
            coordinate so that the ranks of one sample read the same batch.

    Returns:
        A :class:`TrainResult`. Only rank 0 writes files; every rank returns.

    Raises:
        ValueError, TypeError: For a bad input (named), before anything is written.
        RunDirError: If another process trains in ``run_dir``, or its checkpoint
            was written by a run with another configuration (see the module docstring).
        sciml.checkpoint.CheckpointError: If ``last.pt`` cannot be read.
    """
    setup = _setup(
        model,
        optimizer,
        train_dataset,
        loss_fn,
        run_dir=Path(run_dir),
        config=config or TrainConfig(),
        val_dataset=val_dataset,
        scheduler=scheduler,
        collate_fn=collate_fn,
        replica=replica,
    )
    lock = lock_run_dir(setup.run_dir, setup.rank)
    try:
        seed_everything(setup.config.seed)
        state = _resume(setup) if resume and setup.last.exists() else _LoopState()
        state.run = setup.record
        if setup.rank == 0:
            setup.last.parent.mkdir(parents=True, exist_ok=True)
            if state.global_step == 0:  # a new run: a best.pt left by an old one is not its
                (setup.run_dir / "checkpoints" / "best.pt").unlink(missing_ok=True)
        log = MetricsLog(
            setup.run_dir,
            rows=state.rows_written,
            tensorboard=setup.config.tensorboard,
            enabled=setup.rank == 0,
        )
        try:
            return _Trainer(setup, state, log).run()
        finally:
            log.close()
    finally:
        lock.release()


@torch.no_grad()
def _evaluate(
    model: nn.Module,
    dataset: Dataset[Any],
    loss_fn: LossFn,
    config: TrainConfig,
    collate_fn: Callable[[list[Any]], Any] | None,
    device: torch.device,
    replica: tuple[int, int],
) -> dict[str, float]:
    """Mean of ``loss_fn``'s values over ``dataset`` (samples weighted equally)."""
    model.eval()
    batches = epoch_batches(
        _length("val_dataset", dataset),
        config.batch_size,
        epoch=0,
        seed=config.seed,
        shuffle=False,
        replica=replica,
    )
    sums: dict[str, float] = {}
    count = 0
    loader = _loader(dataset, batches, config, collate_fn, 0)
    for indices, batch in zip(batches, loader, strict=True):
        _, values = _split_loss(loss_fn(model, to_device(batch, device)))
        if count and set(values) != set(sums):
            raise ValueError(
                f"loss_fn returned {sorted(values)} on a validation batch but {sorted(sums)} "
                "before; it must return the same names for every batch"
            )
        for name, value in values.items():
            sums[name] = sums.get(name, 0.0) + value * len(indices)
        count += len(indices)
    model.train()
    sums, count = all_reduce_sums(sums, count)
    return {f"val_{name}": value / count for name, value in sums.items()}
