"""The checked inputs of :func:`sciml.training.fit` and the state it starts from.

:func:`check_inputs` checks every input of ``fit`` before anything is
written and gathers them in a :class:`TrainSetup`; :func:`claim_training_record`
refuses a run folder that recorded another run (``training_run.json``, the
:mod:`~sciml.training.runs.record` of :data:`TRAINING_RECORD`) and writes this
run's; :class:`LoopState` holds the counters every checkpoint saves, and
:func:`resume_state` reads them back from ``last.pt`` after checking that it
belongs to this run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn
from torch.utils.data import Dataset

from sciml.distributed import check_replica, world
from sciml.io_utils import atomic_write_text
from sciml.spatial_parallel.context import parallel_context
from sciml.training.checkpoint import read_checkpoint, restore_checkpoint, training_record
from sciml.training.config import TrainConfig
from sciml.training.runs.record import (
    LAST_CHECKPOINT,
    RESUMABLE_FIELDS,
    RecordKind,
    RunDirError,
    check_run_record,
    differences,
    record_text,
)

if TYPE_CHECKING:
    from sciml.spatial_parallel.mesh import SpatialMesh

__all__ = [
    "TRAINING_RECORD",
    "LoopState",
    "LossFn",
    "LossOutput",
    "Status",
    "TrainResult",
    "TrainSetup",
    "check_inputs",
    "claim_training_record",
    "dataset_length",
    "resume_state",
]

#: The record :func:`sciml.training.fit` keeps in its run folder: the options a resumed
#: run must share (``TrainSetup.record``: loop options, model, optimiser, data sizes).
TRAINING_RECORD = RecordKind(
    name="training",
    version=1,
    file="training_run.json",
    what="a training run",
    advice="give this run another run_dir, or pass resume=False to overwrite it",
    sole=False,
    option="run_dir",
    loop="config",
)

LossOutput = torch.Tensor | dict[str, torch.Tensor]
LossFn = Callable[[nn.Module, Any], LossOutput]
Status = Literal["completed", "early_stopped", "interrupted"]


@dataclass
class TrainResult:
    """What :func:`sciml.training.fit` did.

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

    status: Status
    epoch: int
    global_step: int
    history: list[dict[str, float]]
    best: float | None
    checkpoint: Path
    run_dir: Path


@dataclass
class LoopState:
    """Counters saved in every checkpoint.

    ``sums`` and ``count`` are this rank's running sums of the epoch's metrics.
    A checkpoint holds every rank's in ``rank_sums``/``rank_counts`` (indexed by
    rank), so that each rank resumes its own sums and the epoch's reduction adds
    the same numbers in the same order as an uninterrupted run (bit for bit).
    ``run`` describes the run (:func:`sciml.training.checkpoint.training_record`), to refuse
    resuming with another one.
    """

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    rows_written: int = 0
    best: float | None = None
    bad_epochs: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0
    rank_sums: list[dict[str, float]] = field(default_factory=list)
    rank_counts: list[int] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)
    run: dict[str, Any] | None = None


def dataset_length(name: str, dataset: object) -> int:
    """The length of a map-style dataset, which must not be empty."""
    if not isinstance(dataset, Sized):
        raise TypeError(f"{name} must be a map-style dataset with a length, got {type(dataset)}")
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty")
    return len(dataset)


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


def _resolve_replica(replica: object, mesh: SpatialMesh | None, world_size: int) -> tuple[int, int]:
    """This rank's ``(index, count)``: from the mesh of a parallel model, else from the world.

    Raises:
        ValueError: If ``replica`` is malformed, its count does not divide the
            world size, or it is not the mesh's data coordinate.
    """
    rank = world()[0]
    if mesh is None:
        resolved = check_replica(replica or (rank, world_size))
        if world_size % resolved[1]:
            raise ValueError(
                f"replica={resolved}: the {resolved[1]} replicas must divide the {world_size} ranks"
            )
        return resolved
    expected = (mesh.data_index, mesh.data)
    if replica is not None and check_replica(replica) != expected:
        raise ValueError(
            f"replica={replica} contradicts the model's mesh {mesh}: its ranks share each "
            f"sample, so this rank is replica {expected} (leave replica=None)"
        )
    return expected


def _check_batches(n: int, config: TrainConfig, replicas: int) -> None:
    per_replica = math.ceil(n / replicas)
    if config.drop_last and per_replica < config.batch_size:
        raise ValueError(
            f"batch_size={config.batch_size} with drop_last=True leaves no batch: each of "
            f"{replicas} replica(s) gets {per_replica} of the {n} training samples"
        )


@dataclass
class TrainSetup:
    """Everything :func:`sciml.training.fit` checked, ready to train."""

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
    mesh: SpatialMesh | None
    rank: int
    monitor: str
    record: dict[str, Any]

    @property
    def last(self) -> Path:
        """The run's latest checkpoint, ``checkpoints/last.pt``."""
        return self.run_dir / LAST_CHECKPOINT


def claim_training_record(setup: TrainSetup, *, resume: bool) -> None:
    """Refuse a folder that recorded another run (when resuming), then write this run's.

    Every rank checks; rank 0 writes (atomically). With ``resume=False`` the folder's
    record is overwritten, as the rest of the run is.

    Raises:
        sciml.training.runs.record.RunRecordError: ``resume`` and the folder's
            ``training_run.json`` records another run (each difference named).
    """
    if resume:
        check_run_record(setup.run_dir, TRAINING_RECORD, setup.record)
    if setup.rank == 0:
        setup.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            setup.run_dir / TRAINING_RECORD.file, record_text(TRAINING_RECORD, setup.record)
        )


def resume_state(setup: TrainSetup) -> LoopState:
    """The loop state of ``last.pt``, after checking it belongs to this run."""
    last = setup.last
    payload = read_checkpoint(last, map_location=setup.device)
    known = {f.name for f in dataclasses.fields(LoopState)}
    if not isinstance(payload["state"], dict) or set(payload["state"]) - known:
        raise RunDirError(
            f"{last} was not written by sciml.training.fit (its loop state has other fields)",
            "give this run another run_dir, or pass resume=False to overwrite it",
        )
    state = LoopState(**payload["state"])
    problems = [] if state.run is None else differences(state.run, setup.record)
    if problems:
        more = f" and {len(problems) - 6} more" if len(problems) > 6 else ""
        raise RunDirError(
            f"{last} was written by a run with another configuration "
            f"({'; '.join(problems[:6])}{more})",
            "to start a new run, give it another run_dir, or pass resume=False to overwrite "
            "this one",
        )
    if state.epoch > setup.config.epochs:
        raise RunDirError(
            f"{last} has already trained {state.epoch} epochs, more than "
            f"TrainConfig.epochs={setup.config.epochs}",
            f"ask for at least {state.epoch} epochs, or start a new run (another run_dir, or "
            "resume=False)",
        )
    restore_checkpoint(
        last, payload, setup.model, optimizer=setup.optimizer, scheduler=setup.scheduler
    )
    return _own_sums(state, setup.rank, world()[1])


def _own_sums(state: LoopState, rank: int, size: int) -> LoopState:
    """This rank's running sums from a checkpoint's per-rank ones.

    Sums saved by another number of ranks (or in the older summed form) go to
    rank 0 whole: the epoch's values stay right, only their rounding may differ.
    """
    if len(state.rank_sums) == size:
        sums, count = state.rank_sums[rank], state.rank_counts[rank]
    elif rank == 0:
        sums, count = dict(state.sums), state.count
        for other, other_count in zip(state.rank_sums, state.rank_counts, strict=True):
            sums = {k: sums.get(k, 0.0) + v for k, v in other.items()}
            count += other_count
    else:
        sums, count = {}, 0
    return dataclasses.replace(state, sums=sums, count=count, rank_sums=[], rank_counts=[])


def check_inputs(
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
) -> TrainSetup:
    """Check every input of :func:`sciml.training.fit` (nothing is written yet)."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable as loss_fn(model, batch), got {loss_fn!r}")
    n_train = dataset_length("train_dataset", train_dataset)
    n_val = None if val_dataset is None else dataset_length("val_dataset", val_dataset)
    rank, world_size = world()
    context = parallel_context(model)
    mesh = None if context is None else context.mesh
    replica = _resolve_replica(replica, mesh, world_size)
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
    record = training_record(
        kept | {"monitor": monitor}, model, optimizer, scheduler, (n_train, n_val), replica[1]
    )
    return TrainSetup(
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
        mesh,
        rank,
        monitor,
        record,
    )
