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
the epoch, checkpoints hold every generator's state and the position inside
the epoch, so an interrupted and resumed run computes the same losses and
ends with the same weights as an uninterrupted one (bit for bit on CPU).
"""

from __future__ import annotations

import csv
import math
import random
import signal
from collections.abc import Callable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from sciml.checkpoint import load_checkpoint, save_checkpoint

__all__ = [
    "EXIT_REQUEUE",
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
METRIC_COLUMNS = ("epoch", "step", "split", "metric", "value")


@dataclass
class TrainConfig:
    """Options of :func:`fit`.

    Attributes:
        epochs: Number of passes over the training set.
        batch_size: Samples per optimiser step (per data-parallel replica).
        seed: Seed of every generator and of the shuffling.
        shuffle: Shuffle the training set each epoch.
        drop_last: Drop the last incomplete batch of an epoch.
        num_workers: ``DataLoader`` worker processes.
        checkpoint_every: Also checkpoint every this many optimiser steps
            (a checkpoint is always written at the end of every epoch).
        patience: Stop after this many epochs without improvement of
            ``monitor`` (``None``: never stop early).
        monitor: Logged epoch metric that decides the best checkpoint and early stop.
        mode: ``"min"`` or ``"max"``: which direction of ``monitor`` is better.
        min_delta: Smallest change of ``monitor`` that counts as an improvement.
        grad_clip: Clip the gradient norm to this value.
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
    monitor: str = "val_loss"
    mode: Literal["min", "max"] = "min"
    min_delta: float = 0.0
    grad_clip: float | None = None
    scheduler_interval: Literal["epoch", "step"] = "epoch"
    progress: bool = True
    tensorboard: bool = True
    handle_signals: bool = True

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(
                f"epochs and batch_size must be >= 1, got {self.epochs}, {self.batch_size}"
            )
        if self.mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {self.mode!r}")


@dataclass
class TrainResult:
    """What :func:`fit` did.

    Attributes:
        status: ``"completed"``, ``"early_stopped"`` or ``"interrupted"`` (by a signal).
        epoch: Epochs completed.
        global_step: Optimiser steps taken.
        history: One dict of epoch metrics per completed epoch.
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
    """Counters saved in every checkpoint."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    rows_written: int = 0
    best: float | None = None
    bad_epochs: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0
    history: list[dict[str, float]] = field(default_factory=list)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - user code draws from the global state
    torch.manual_seed(seed)


def _replica() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


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
    """
    if n == 0:
        raise ValueError("the training dataset is empty")
    if shuffle:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = torch.randperm(n, generator=generator).tolist()
    else:
        order = list(range(n))
    index, replicas = replica
    per_replica = math.ceil(n / replicas)
    order = (order * math.ceil(per_replica * replicas / n))[: per_replica * replicas]
    mine = order[index::replicas]
    batches = [mine[i : i + batch_size] for i in range(0, len(mine), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


def _check_sized(name: str, dataset: object) -> None:
    if not isinstance(dataset, Sized):
        raise TypeError(f"{name} must be a map-style dataset with a length, got {type(dataset)}")


def _length(dataset: Dataset[Any]) -> int:
    return len(dataset)  # type: ignore[arg-type]  # checked by _check_sized


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: _to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_to_device(value, device) for value in batch)
    return batch


def _split_loss(output: LossOutput) -> tuple[torch.Tensor, dict[str, float]]:
    if isinstance(output, torch.Tensor):
        return output, {"loss": float(output.detach())}
    if "loss" not in output:
        raise KeyError(f"loss_fn returned a dict without a 'loss' entry: keys {sorted(output)}")
    return output["loss"], {k: float(v.detach()) for k, v in output.items()}


def _all_reduce_sums(sums: dict[str, float], count: int) -> tuple[dict[str, float], int]:
    """Sum per-replica metric sums and sample counts over every rank."""
    if _replica()[1] == 1:
        return sums, count
    names = sorted(sums)
    packed = torch.tensor([sums[name] for name in names] + [count], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        packed = packed.cuda()
    dist.all_reduce(packed)
    values = packed.cpu().tolist()
    return dict(zip(names, values[:-1], strict=True)), int(values[-1])


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


class _SignalFlag:
    """Records SIGTERM/SIGUSR1 while installed; restores the old handlers on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self, enabled: bool) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}
        self.enabled = enabled

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum

    def __enter__(self) -> _SignalFlag:
        import threading

        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def any_rank(self) -> bool:
        """True if this or any other rank received a signal (all ranks stop together)."""
        flag = self.received is not None
        if _replica()[1] == 1:
            return flag
        tensor = torch.tensor([int(flag)])
        if dist.get_backend() == "nccl":
            tensor = tensor.cuda()
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item())


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
    return iter(tqdm(loader, total=total, initial=initial, desc=desc, disable=not show,
                     leave=False, dynamic_ncols=True))  # fmt: skip


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
        loss_fn: ``loss_fn(model, batch)`` returns the loss tensor, or a dict
            with ``"loss"`` and other scalar tensors to log.
        run_dir: Folder for ``metrics.csv``, ``checkpoints/last.pt`` and
            ``checkpoints/best.pt``.
        config: Loop options (default :class:`TrainConfig`).
        val_dataset: Dataset evaluated with ``loss_fn`` after every epoch;
            its metrics are logged with a ``val_`` prefix.
        scheduler: Learning-rate scheduler stepped per ``config.scheduler_interval``.
        collate_fn: Batch collation (default: torch's).
        resume: Continue from ``run_dir/checkpoints/last.pt`` when it exists.
        replica: ``(index, count)`` of this data-parallel replica; default
            ``(rank, world_size)``. Spatially parallel runs pass the data-parallel
            coordinate so that the ranks of one sample read the same batch.

    Returns:
        A :class:`TrainResult`. Only rank 0 writes files; every rank returns.
    """
    config = config or TrainConfig()
    _check_sized("train_dataset", train_dataset)
    if val_dataset is not None:
        _check_sized("val_dataset", val_dataset)
    run_dir = Path(run_dir)
    rank, _ = _replica()
    replica = replica or _replica()
    is_main = rank == 0
    last, best_path = run_dir / "checkpoints" / "last.pt", run_dir / "checkpoints" / "best.pt"
    if is_main:
        last.parent.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device

    seed_everything(config.seed)
    state = _LoopState()
    if resume and last.exists():
        saved = load_checkpoint(last, model, optimizer=optimizer, scheduler=scheduler,
                                map_location=device)  # fmt: skip
        state = _LoopState(**saved)
    log = _MetricsLog(run_dir, rows=state.rows_written, tensorboard=config.tensorboard,
                      enabled=is_main)  # fmt: skip

    def checkpoint(path: Path = last) -> None:
        state.rows_written = log.rows
        if is_main:
            save_checkpoint(path, model, optimizer=optimizer, scheduler=scheduler,
                            state=vars(state))  # fmt: skip
        if _replica()[1] > 1:
            dist.barrier()

    status: Literal["completed", "early_stopped", "interrupted"] = "completed"
    try:
        with _SignalFlag(config.handle_signals) as signals:
            while state.epoch < config.epochs:
                batches = epoch_batches(
                    _length(train_dataset), config.batch_size, epoch=state.epoch, seed=config.seed,
                    shuffle=config.shuffle, drop_last=config.drop_last, replica=replica,
                )  # fmt: skip
                model.train()
                loader = _loader(train_dataset, batches[state.step_in_epoch :], config,
                                 collate_fn, state.epoch)  # fmt: skip
                for batch_indices, batch in zip(
                    batches[state.step_in_epoch :],
                    _iterate(loader, total=len(batches), initial=state.step_in_epoch,
                             desc=f"epoch {state.epoch + 1}/{config.epochs}",
                             show=is_main and config.progress),
                    strict=True,
                ):  # fmt: skip
                    optimizer.zero_grad(set_to_none=True)
                    loss, values = _split_loss(loss_fn(model, _to_device(batch, device)))
                    if not torch.isfinite(loss):
                        raise FloatingPointError(
                            f"loss is {float(loss.detach())} at epoch {state.epoch}, step "
                            f"{state.global_step}; lower the learning rate or check the inputs"
                        )
                    loss.backward()
                    if config.grad_clip is not None:
                        nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                    optimizer.step()
                    if scheduler is not None and config.scheduler_interval == "step":
                        scheduler.step()
                    state.step_in_epoch += 1
                    state.global_step += 1
                    size = len(batch_indices)
                    for name, value in values.items():
                        state.sums[name] = state.sums.get(name, 0.0) + value * size
                    state.count += size
                    log.log(state.epoch, state.global_step, "train_step", values)
                    if signals.any_rank():
                        checkpoint()
                        return _result("interrupted", state, run_dir, last)
                    if config.checkpoint_every and state.global_step % config.checkpoint_every == 0:
                        checkpoint()
                sums, count = _all_reduce_sums(state.sums, state.count)
                metrics = {f"train_{k}": v / count for k, v in sums.items()}
                if val_dataset is not None:
                    metrics |= _evaluate(model, val_dataset, loss_fn, config, collate_fn,
                                         device, replica)  # fmt: skip
                metrics["lr"] = optimizer.param_groups[0]["lr"]
                log.log(state.epoch, state.global_step, "epoch", metrics)
                if scheduler is not None and config.scheduler_interval == "epoch":
                    scheduler.step()
                state.history.append({"epoch": state.epoch + 1, **metrics})
                state.epoch += 1
                state.step_in_epoch, state.sums, state.count = 0, {}, 0
                improved = False
                if config.monitor in metrics:
                    improved = _is_better(metrics[config.monitor], state.best, config)
                    if improved:
                        state.best, state.bad_epochs = metrics[config.monitor], 0
                    else:
                        state.bad_epochs += 1
                checkpoint()
                if improved:
                    checkpoint(best_path)
                if config.patience is not None and state.bad_epochs >= config.patience:
                    status = "early_stopped"
                    break
    finally:
        log.close()
    return _result(status, state, run_dir, last)


def _result(
    status: Literal["completed", "early_stopped", "interrupted"],
    state: _LoopState,
    run_dir: Path,
    last: Path,
) -> TrainResult:
    return TrainResult(status, state.epoch, state.global_step, list(state.history), state.best,
                       last, run_dir)  # fmt: skip


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
    batches = epoch_batches(_length(dataset), config.batch_size, epoch=0, seed=config.seed,
                            shuffle=False, replica=replica)  # fmt: skip
    sums: dict[str, float] = {}
    count = 0
    for indices, batch in zip(batches, _loader(dataset, batches, config, collate_fn, 0),
                              strict=True):  # fmt: skip
        _, values = _split_loss(loss_fn(model, _to_device(batch, device)))
        for name, value in values.items():
            sums[name] = sums.get(name, 0.0) + value * len(indices)
        count += len(indices)
    model.train()
    sums, count = _all_reduce_sums(sums, count)
    return {f"val_{name}": value / count for name, value in sums.items()}
