"""Train K runs of one small model as one: :func:`fit_fused`, the fused form of ``fit``.

Each run is what :func:`sciml.training.fit` would make of its model, optimiser, scheduler,
seed, data and run folder: the same batches in the same order (its own seed; one shared
training set or one per run, of one length), the same checkpoints, metrics, status lines
and exact resume, in a folder of its own. Only the forward and backward passes are shared:
each step stacks the K runs' batches and runs every copy's loss in one call
(:class:`~sciml.training.fused.FusedModels`: batched on a GPU, one copy after another on
the CPU) and one backward pass; each run then applies its own optimiser step (its own
learning rate and schedule, gradient clipping, Adam state). Each run keeps its own random
state (Python's, NumPy's, torch's), swapped in around everything it does, so that a
dataset's random draws (e.g. random members) are those of the separate run. A run that
stops early leaves the others training; a signal stops every run after the same step.
"""

from __future__ import annotations

import dataclasses
import math
import signal
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from sciml.distributed import PreemptionFlag, world
from sciml.distributed.cpu_allocator import keep_freed_memory
from sciml.training.checkpoint import get_rng_state, set_rng_state
from sciml.training.config import TrainConfig
from sciml.training.fused import FusedModels
from sciml.training.loop import _Trainer
from sciml.training.runs.folder import lock_run_dir
from sciml.training.setup import (
    LossFn,
    Status,
    TrainResult,
    check_inputs,
    claim_training_record,
    dataset_length,
)

__all__ = ["fit_fused"]


class _SharedStop:
    """The runs' view of the signal flag: read once per step, so that all stop together."""

    def __init__(self, flag: PreemptionFlag) -> None:
        self.flag, self.stop = flag, False

    def refresh(self) -> None:
        """Read the flag (collective) before the runs apply a step."""
        self.stop = self.flag.any_rank()

    def request(self, signum: int = signal.SIGUSR1) -> None:
        """Stop every run after this step (a run's ``preempt_after``)."""
        self.flag.request(signum)
        self.stop = True

    def any_rank(self) -> bool:
        """Whether the runs stop after this step."""
        return self.stop


class _Run:
    """One run of a fused fit: its trainer and its own random state."""

    def __init__(self, trainer: _Trainer) -> None:
        self.trainer = trainer
        self.rng = get_rng_state()  # as the trainer left it: seeded, or restored on resume
        self.status: Status | None = None

    @contextmanager
    def own_rng(self) -> Iterator[None]:
        """Run the block with this run's random state, and keep what it leaves."""
        set_rng_state(self.rng)
        try:
            yield
        finally:
            self.rng = get_rng_state()


def _stack(batches: Sequence[Any]) -> Any:
    """The runs' batches with a leading run dim (dicts, lists and tuples of tensors)."""
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(list(batches))
    if isinstance(first, dict):
        return {key: _stack([batch[key] for batch in batches]) for key in first}
    if isinstance(first, list | tuple):
        return type(first)(_stack(items) for items in zip(*batches, strict=True))
    raise TypeError(
        f"fused runs stack their batches, which must hold tensors (in dicts, lists, "
        f"tuples); got a {type(first).__name__}"
    )


def _fused_backward(
    models: FusedModels, loss_fn: LossFn, runs: Sequence[_Run], steps: Sequence[Any]
) -> list[dict[str, float]]:
    """Back-propagate every run's batch at once; each run's values, as ``StepRunner`` gives."""
    parts = [step[0] for step in steps]
    sizes = steps[0][1]
    total = sum(sizes)
    values: list[dict[str, float]] = [{} for _ in runs]
    bf16 = runs[0].trainer.s.config.precision == "bf16"
    device = runs[0].trainer.s.device
    for index, size in enumerate(sizes):
        batch = _stack([run_parts[index] for run_parts in parts])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            output = models.apply_each(loss_fn, batch)
        named = {"loss": output} if isinstance(output, torch.Tensor) else dict(output)
        if "loss" not in named or any(
            not isinstance(v, torch.Tensor) or tuple(v.shape) != (len(runs),)
            for v in named.values()
        ):
            raise TypeError(
                "loss_fn must return a scalar tensor, or a dict with a 'loss' entry of "
                "scalar tensors, for each run"
            )
        listed = {name: tensor.detach().tolist() for name, tensor in named.items()}  # one read
        for run, loss in zip(runs, listed["loss"], strict=True):
            if not math.isfinite(loss):
                raise FloatingPointError(
                    f"loss is {loss} {run.trainer.where()}; lower the learning rate or check "
                    "the inputs"
                )
        losses = named["loss"]
        (losses.sum() * (size / total) if len(sizes) > 1 else losses.sum()).backward()
        for name, per_run in listed.items():
            for k, value in enumerate(per_run):
                values[k][name] = values[k].get(name, 0.0) + value * size / total
    return values


def _train_epoch(runs: list[_Run], loss_fn: LossFn, stop: _SharedStop) -> bool:
    """The active runs' current epoch in lockstep; false if a signal stopped them."""
    steps: dict[int, Any] = {}
    pending = {}
    for k, run in enumerate(runs):
        with run.own_rng():
            pending[k] = run.trainer.epoch_steps()
            steps[k] = next(pending[k])
    models = FusedModels([run.trainer.s.model for run in runs])
    finished: dict[int, bool] = {}
    while steps:
        if len({tuple(step[1]) for step in steps.values()}) != 1:
            raise RuntimeError("fused runs reached steps of different sizes")
        values = _fused_backward(models, loss_fn, runs, [steps[k] for k in range(len(runs))])
        stop.refresh()
        for k, run in enumerate(runs):
            with run.own_rng():
                try:
                    steps[k] = pending[k].send(values[k])
                except StopIteration as done:
                    finished[k] = bool(done.value)
                    del steps[k]
        if steps and finished:
            raise RuntimeError("fused runs ended an epoch at different steps")
    return all(finished.values())


def _run(runs: list[_Run], loss_fn: LossFn, stop: _SharedStop) -> None:
    """Epochs of the runs still training until each completes, stops early or is stopped."""
    epochs = runs[0].trainer.s.config.epochs
    while True:
        active = [run for run in runs if run.status is None]
        if not active:
            return
        if active[0].trainer.state.epoch >= epochs:
            for run in active:
                run.status = "completed"
            return
        if not _train_epoch(active, loss_fn, stop):
            for run in active:
                run.status = "interrupted"
            return
        for run in active:
            with run.own_rng():
                if run.trainer.end_of_epoch():
                    run.status = "early_stopped"


def _check_runs(
    models: Sequence[nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    run_dirs: Sequence[Path | str],
    configs: Sequence[TrainConfig],
) -> None:
    counts = {len(models), len(optimizers), len(run_dirs), len(configs)}
    if len(counts) != 1 or not models:
        raise ValueError(
            f"fit_fused needs one model, optimiser, run_dir and config per run, got "
            f"{len(models)}, {len(optimizers)}, {len(run_dirs)} and {len(configs)}"
        )
    if len({Path(d).resolve() for d in run_dirs}) != len(run_dirs):
        raise ValueError(f"each run needs a run_dir of its own, got {list(map(str, run_dirs))}")
    base = dataclasses.replace(configs[0], seed=0, progress=False)
    for k, config in enumerate(configs):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"configs[{k}] must be a TrainConfig, got {type(config).__name__}")
        if dataclasses.replace(config, seed=0, progress=False) != base:
            raise ValueError(
                f"configs[{k}] differs from configs[0] in more than its seed: fused runs take "
                "the same steps (epochs, batches, precision ...) and differ in seed only"
            )
    if world()[1] > 1:
        raise ValueError(
            "fit_fused trains its runs in one process; under torch.distributed train each "
            "run with fit"
        )


def _per_run(name: str, value: Any, count: int) -> list[Any]:
    """``value`` (a list or tuple of one per run) as a list; refused unless it holds ``count``."""
    if len(value) != count:
        raise ValueError(
            f"{name} must be one for all runs or {count} (one per run), got {len(value)}"
        )
    return list(value)


def _datasets_per_run(name: str, value: Any, count: int) -> list[Any]:
    """A dataset for each of ``count`` runs: one shared, or a list or tuple of one per run.

    A list of datasets (or ``None``) is one per run; any other list is itself one dataset
    (a plain list of samples), shared.
    """
    if isinstance(value, list | tuple) and all(v is None or isinstance(v, Dataset) for v in value):
        return _per_run(name, value, count)
    return [value] * count


def _check_steps(datasets: Sequence[Dataset[Any]]) -> None:
    """Refuse training sets of different lengths: fused runs take the same steps."""
    lengths = [dataset_length(f"train_dataset[{k}]", d) for k, d in enumerate(datasets)]
    if len(set(lengths)) > 1:
        raise ValueError(
            f"the runs' training sets hold {lengths} samples: fused runs take the same steps, "
            "so each run's set needs as many samples"
        )


def fit_fused(
    models: Sequence[nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    train_dataset: Dataset[Any] | Sequence[Dataset[Any]],
    loss_fn: LossFn,
    *,
    run_dirs: Sequence[Path | str],
    configs: Sequence[TrainConfig],
    val_dataset: Dataset[Any] | Sequence[Dataset[Any] | None] | None = None,
    schedulers: Sequence[Any | None] | None = None,
    resume: bool = True,
    preempt_after: int | None = None,
) -> list[TrainResult]:
    """Train K runs at once, each as :func:`sciml.training.fit` would; their results.

    Args:
        models: One model per run, one architecture (each built after its own seed).
        optimizers: One optimiser per run, over its model's parameters (its own rates).
        train_dataset: The training samples every run reads (in the order of its seed), or
            a list of one ``Dataset`` per run, all of one length (e.g. each seed's own data);
            a plain list of samples is one dataset, shared.
        loss_fn: ``loss_fn(model, batch)``, as for ``fit``: run under ``torch.func.vmap``,
            so it may not let a value decide (``if loss > 0``) nor draw random numbers.
        run_dirs: One run folder per run, each written as ``fit`` writes it.
        configs: One :class:`TrainConfig` per run, equal but for ``seed`` (and
            ``progress``: only the first run's bar is drawn).
        val_dataset: Evaluated by each run after every epoch, as ``fit`` does; or a list
            of one ``Dataset`` (or ``None``) per run.
        schedulers: One learning-rate scheduler (or ``None``) per run, over its optimiser,
            stepped as ``fit`` steps its scheduler.
        resume: Continue each run from its ``last.pt`` (``False``: start over).
        preempt_after: Stop every run after this optimiser step, as on a signal.

    Returns:
        One :class:`TrainResult` per run.

    Raises:
        ValueError, TypeError: Runs that cannot be fused (named), before anything is
            written; and every error of ``fit``.
    """
    _check_runs(models, optimizers, run_dirs, configs)
    count = len(models)
    trains = _datasets_per_run("train_dataset", train_dataset, count)
    _check_steps(trains)
    vals = _datasets_per_run("val_dataset", val_dataset, count)
    scheds = (
        [None] * count if schedulers is None else _per_run("schedulers", list(schedulers), count)
    )
    setups = [
        check_inputs(
            model,
            optimizer,
            train,
            loss_fn,
            run_dir=Path(run_dir),
            config=config if k == 0 else dataclasses.replace(config, progress=False),
            val_dataset=val,
            scheduler=scheduler,
            collate_fn=None,
            replica=None,
        )
        for k, (model, optimizer, train, val, scheduler, run_dir, config) in enumerate(
            zip(models, optimizers, trains, vals, scheds, run_dirs, configs, strict=True)
        )
    ]
    FusedModels(models)  # one architecture, or refused before anything is written
    if setups[0].device.type == "cpu":
        keep_freed_memory()
    with ExitStack() as stack:
        for setup in setups:
            stack.callback(lock_run_dir(setup.run_dir, setup.rank).release)
        for setup in setups:
            claim_training_record(setup, resume=resume)
        runs = [
            _Run(_Trainer(setup, resume=resume, preempt_after=preempt_after)) for setup in setups
        ]
        return _fit_runs(runs, loss_fn, setups[0].config.handle_signals)


def _fit_runs(runs: list[_Run], loss_fn: LossFn, handle_signals: bool) -> list[TrainResult]:
    """What ``_Trainer.fit`` does for one run, for every run at once."""
    for run in runs:  # a run that ended before this resume stays ended
        state, config = run.trainer.state, run.trainer.s.config
        if state.epoch >= config.epochs:
            run.status = "completed"
        elif config.patience is not None and state.epoch and state.bad_epochs >= config.patience:
            run.status = "early_stopped"
    places = {(r.trainer.state.epoch, r.trainer.state.step_in_epoch) for r in runs if not r.status}
    if len(places) > 1:
        raise ValueError(
            f"the runs' checkpoints are at different steps ({sorted(places)} as (epoch, step)): "
            "fused runs resume together; resume each with fit"
        )
    for run in runs:
        with run.own_rng():
            run.trainer.started()
    try:
        with PreemptionFlag(handle_signals) as flag:
            stop = _SharedStop(flag)
            for run in runs:
                run.trainer.signals = stop  # type: ignore[assignment]
            _run(runs, loss_fn, stop)
    finally:
        for run in runs:
            run.trainer.close()
    return [run.trainer.finished(run.status or "interrupted") for run in runs]
