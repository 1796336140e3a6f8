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
"""

from __future__ import annotations

import csv
import dataclasses
import fcntl
import math
import os
import random
import socket
from collections.abc import Callable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from sciml.checkpoint import model_signature, read_checkpoint, restore_checkpoint, save_checkpoint
from sciml.distributed import PreemptionFlag, all_reduce_cpu, check_replica, world

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

#: :class:`TrainConfig` fields that may differ when a run is resumed: they
#: change how long it runs and what it shows, never what it computes.
RESUMABLE_FIELDS = ("epochs", "checkpoint_every", "progress", "tensorboard", "handle_signals")

LossOutput = torch.Tensor | dict[str, torch.Tensor]
LossFn = Callable[[nn.Module, Any], LossOutput]
METRIC_COLUMNS = ("epoch", "step", "split", "metric", "value")
LOCK_NAME = "run.lock"


class RunDirError(RuntimeError):
    """A run folder is in use by another process, or holds a run with another configuration."""


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


@dataclass
class TrainConfig:
    """Options of :func:`fit`, checked when the config is made.

    Attributes:
        epochs: Number of passes over the training set (>= 1).
        batch_size: Samples per optimiser step (per data-parallel replica, >= 1).
        seed: Seed of every generator and of the shuffling (0 <= seed < 2**32).
        shuffle: Shuffle the training set each epoch.
        drop_last: Drop the last incomplete batch of an epoch.
        num_workers: ``DataLoader`` worker processes (>= 0).
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
        progress: Show a tqdm progress bar on rank 0.
        tensorboard: Also log to TensorBoard when it is installed.
        handle_signals: Checkpoint and return on SIGTERM/SIGUSR1.
    """

    epochs: int = 10
    batch_size: int = 8
    seed: int = 0
    shuffle: bool = True
    drop_last: bool = False
    num_workers: int = 0
    checkpoint_every: int | None = None
    patience: int | None = None
    monitor: str | None = None
    mode: Literal["min", "max"] = "min"
    min_delta: float = 0.0
    grad_clip: float | None = None
    scheduler_interval: Literal["epoch", "step"] = "epoch"
    progress: bool = True
    tensorboard: bool = True
    handle_signals: bool = True

    def __post_init__(self) -> None:
        _require_int("epochs", self.epochs, 1)
        _require_int("batch_size", self.batch_size, 1)
        _require_int("seed", self.seed, 0)
        if self.seed >= 2**32:
            raise ValueError(f"TrainConfig.seed must be < 2**32, got {self.seed}")
        _require_int("num_workers", self.num_workers, 0)
        _require_int("checkpoint_every", self.checkpoint_every, 1, optional=True)
        _require_int("patience", self.patience, 1, optional=True)
        for name in ("shuffle", "drop_last", "progress", "tensorboard", "handle_signals"):
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


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - user code draws from the global state
    torch.manual_seed(seed)


def epoch_batches(
    n: int,
    batch_size: int,
    *,
    epoch: int,
    seed: int,
    shuffle: bool = True,
    drop_last: bool = False,
    replica: tuple[int, int] = (0, 1),
) -> list[list[int]]:
    """Sample indices of one epoch, split into batches, for one data-parallel replica.

    The order depends only on ``(seed, epoch)``. As with ``DistributedSampler``,
    the permutation is padded by repeating its start so that every replica
    gets the same number of samples, and replica ``r`` of ``R`` takes every
    ``R``-th index starting at ``r``.

    Raises:
        ValueError: If ``n`` is 0, ``batch_size`` < 1, or ``replica`` is not a
            valid ``(index, count)``.
    """
    if n == 0:
        raise ValueError("the training dataset is empty")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    index, replicas = check_replica(replica)
    if shuffle:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = torch.randperm(n, generator=generator).tolist()
    else:
        order = list(range(n))
    per_replica = math.ceil(n / replicas)
    order = (order * math.ceil(per_replica * replicas / n))[: per_replica * replicas]
    mine = order[index::replicas]
    batches = [mine[i : i + batch_size] for i in range(0, len(mine), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


def _length(name: str, dataset: object) -> int:
    """The length of a map-style dataset, which must not be empty."""
    if not isinstance(dataset, Sized):
        raise TypeError(f"{name} must be a map-style dataset with a length, got {type(dataset)}")
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty")
    return len(dataset)


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: _to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_to_device(value, device) for value in batch)
    return batch


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


def _all_reduce_sums(sums: dict[str, float], count: int) -> tuple[dict[str, float], int]:
    """Sum per-rank metric sums and sample counts over every rank."""
    names = sorted(sums)
    packed = torch.tensor([sums[name] for name in names] + [count], dtype=torch.float64)
    values = all_reduce_cpu(packed).tolist()
    return dict(zip(names, values[:-1], strict=True)), int(values[-1])


def _plain(value: Any) -> Any:
    """``value`` as plain Python data that compares by value and loads with ``weights_only``."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _run_record(
    config: TrainConfig,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    sizes: tuple[int, int | None],
    replicas: int,
) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote the checkpoint."""
    groups = [
        {k: _plain(v) for k, v in group.items() if k != "params"}
        | {"parameters": len(group["params"])}
        for group in optimizer.param_groups
    ]
    return {
        "config": {
            f.name: getattr(config, f.name)
            for f in dataclasses.fields(config)
            if f.name not in RESUMABLE_FIELDS
        },
        "model": type(model).__qualname__,
        "parameters": model_signature(model),
        "optimizer": type(optimizer).__qualname__,
        "param_groups": groups,
        "scheduler": None if scheduler is None else type(scheduler).__qualname__,
        "train_samples": sizes[0],
        "val_samples": sizes[1],
        "replicas": replicas,
    }


def _differences(saved: Any, current: Any, where: str = "") -> list[str]:
    """``where: saved -> current`` for every leaf that differs."""
    if isinstance(saved, dict) and isinstance(current, dict):
        return [
            line
            for key in sorted(set(saved) | set(current), key=str)
            for line in _differences(saved.get(key), current.get(key), f"{where}.{key}".strip("."))
        ]
    groups = isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current)
    if groups and all(isinstance(v, dict) for v in saved + current):
        return [
            line
            for i, (a, b) in enumerate(zip(saved, current, strict=True))
            for line in _differences(a, b, f"{where}[{i}]")
        ]
    return [] if saved == current else [f"{where}: {saved!r} in the run, {current!r} now"]


class _RunLock:
    """An exclusive ``flock`` on ``run_dir/run.lock`` that names its holder's pid."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirError(
                f"{self.path.parent} is in use by another training run ({holder}); wait for it "
                "to finish, or give this run another run_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _lock_run_dir(run_dir: Path, rank: int) -> _RunLock:
    """Rank 0 locks the run folder; every rank learns whether it could."""
    lock = _RunLock(run_dir)
    error: RunDirError | None = None
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire()
        except RunDirError as err:
            error = err
    if all_reduce_cpu(torch.tensor([int(error is not None)])).item():
        raise error or RunDirError(f"rank 0 could not lock {run_dir / LOCK_NAME}; see its error")
    return lock


class _MetricsLog:
    """``metrics.csv`` in long form (epoch, step, split, metric, value), plus TensorBoard."""

    def __init__(self, run_dir: Path, *, rows: int, tensorboard: bool, enabled: bool) -> None:
        self.enabled = enabled
        self.path = run_dir / "metrics.csv"
        self.rows = rows
        self.writer: Any = None
        if not enabled:
            return
        self._truncate(rows)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                pass
            else:
                self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=None)

    def _truncate(self, rows: int) -> None:
        """Keep the header and the first ``rows`` rows (those a checkpoint has seen)."""
        kept: list[list[str]] = []
        if self.path.exists():
            with open(self.path, newline="") as handle:
                kept = list(csv.reader(handle))[1 : rows + 1]
        with open(self.path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(METRIC_COLUMNS)
            writer.writerows(kept)

    def log(self, epoch: int, step: int, split: str, values: dict[str, float]) -> None:
        self.rows += len(values)
        if not self.enabled:
            return
        with open(self.path, "a", newline="") as handle:
            writer = csv.writer(handle)
            for name, value in values.items():
                writer.writerow((epoch, step, split, name, repr(float(value))))
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(f"{split}/{name}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


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
    generator = torch.Generator().manual_seed(config.seed * 7919 + epoch)
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
    state = _LoopState(**payload["state"])
    problems = [] if state.run is None else _differences(state.run, setup.record)
    if problems:
        raise RunDirError(
            f"{last} was written by a run with another configuration ({'; '.join(problems[:6])}). "
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

    def __init__(self, setup: _Setup, state: _LoopState, log: _MetricsLog) -> None:
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
        loss, values = _split_loss(s.loss_fn(s.model, _to_device(batch, s.device)))
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
        sums, count = _all_reduce_sums(state.sums, state.count)
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
        sums, count = _all_reduce_sums(state.sums, state.count)
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
    monitor = _resolve_monitor(config.monitor, val_dataset is not None)
    record = _run_record(config, model, optimizer, scheduler, (n_train, n_val), replica[1])
    record["config"]["monitor"] = monitor
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
    lock = _lock_run_dir(setup.run_dir, setup.rank)
    try:
        seed_everything(setup.config.seed)
        state = _resume(setup) if resume and setup.last.exists() else _LoopState()
        state.run = setup.record
        if setup.rank == 0:
            setup.last.parent.mkdir(parents=True, exist_ok=True)
            if state.global_step == 0:  # a new run: a best.pt left by an old one is not its
                (setup.run_dir / "checkpoints" / "best.pt").unlink(missing_ok=True)
        log = _MetricsLog(
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
        _, values = _split_loss(loss_fn(model, _to_device(batch, device)))
        if count and set(values) != set(sums):
            raise ValueError(
                f"loss_fn returned {sorted(values)} on a validation batch but {sorted(sums)} "
                "before; it must return the same names for every batch"
            )
        for name, value in values.items():
            sums[name] = sums.get(name, 0.0) + value * len(indices)
        count += len(indices)
    model.train()
    sums, count = _all_reduce_sums(sums, count)
    return {f"val_{name}": value / count for name, value in sums.items()}
