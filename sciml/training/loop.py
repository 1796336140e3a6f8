"""The training loop that every workflow uses, for one run or K runs trained as one.

:func:`fit` trains a model on a map-style dataset with deterministic
shuffling, shows a tqdm bar with the running loss on rank 0 (on a terminal or
in a notebook), says what it does in status lines (:mod:`sciml.training.report`:
one per epoch and a closing summary), logs metrics to CSV (and
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

Parallel models log global values, resumes are exact (bit for bit on CPU) and a run
folder belongs to one run: ``docs/training_loop.md``.

:func:`fit_fused` trains K runs of one small model (a sweep, :mod:`sciml.training.sweeps`)
as one: each is what ``fit`` makes of its model, optimiser, scheduler, seed, data and run
folder (the same batches in the same order, checkpoints, metrics, status lines and exact
resume, in a folder of its own), and only the forward and backward passes are shared, one
batched step for all (:func:`~sciml.training.fused.fused_backward`); each run then applies
its own optimiser step. Each run keeps its own random state (Python's, NumPy's, torch's),
swapped in around everything it does, so that a dataset's random draws are those of the
separate run. A run that stops early leaves the others training; a signal stops every run
after the same step.

Both are one driver over K >= 1 runs (``fit`` is K = 1, :mod:`sciml.training.driver`), the
step a seam: the run's own :class:`~sciml.training.step.StepRunner`, or one batched step for
all. :func:`fit_runs` trains a workflow's sweep (:mod:`sciml.training.sweeps`): one run with
``fit``, several fused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset

from sciml.distributed import world
from sciml.distributed.cpu_allocator import keep_freed_memory
from sciml.training.config import TrainConfig
from sciml.training.driver import Run, Step, drive, own_step
from sciml.training.fused import FusedModels, fused_backward
from sciml.training.runs.folder import lock_run_dir
from sciml.training.runs.record import RunDirError
from sciml.training.setup import (
    LossFn,
    TrainResult,
    check_inputs,
    claim_training_record,
)
from sciml.training.sweeps import check_steps, check_sweep, datasets_per_run, per_run
from sciml.training.trainer import RunTrainer

__all__ = ["EXIT_REQUEUE", "fit", "fit_fused", "fit_runs"]

#: Exit code a script returns after checkpointing on a signal, so that a
#: Slurm batch script knows to requeue the job.
EXIT_REQUEUE = 3


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
    preempt_after: int | None = None,
    record: bool = True,
) -> TrainResult:
    """Train ``model`` and return what happened.

    On the CPU the process keeps the memory tensors free from then on
    (:func:`sciml.distributed.cpu_allocator.keep_freed_memory`), as a GPU's caching
    allocator does: a step reuses what the last one freed instead of faulting
    it in again.

    Args:
        model: The model; batches are moved to the device of its first parameter.
        optimizer: Optimiser over the model's parameters.
        train_dataset: Map-style dataset of training samples.
        loss_fn: ``loss_fn(model, batch)`` returns the loss (a one-element
            tensor), or a dict with ``"loss"`` and other one-element tensors to
            log, with the same names at every step.
        run_dir: Folder for the run record ``training_run.json`` (see ``record``), ``metrics.csv``,
            ``checkpoints/last.pt``, ``checkpoints/best.pt`` and the lock file ``run.lock``.
        config: Loop options (default :class:`TrainConfig`).
        val_dataset: Dataset evaluated with ``loss_fn`` after every epoch;
            its metrics are logged with a ``val_`` prefix.
        scheduler: Learning-rate scheduler stepped per ``config.scheduler_interval``.
        collate_fn: Batch collation (default: torch's).
        resume: Continue from ``run_dir/checkpoints/last.pt`` when it exists
            (``False``: start over, overwriting the run in ``run_dir``).
        replica: ``(index, count)`` of this data-parallel replica; default
            ``(rank, world_size)``, or for a model made by
            :func:`sciml.spatial_parallel.parallelize` the data coordinate of
            its mesh (the ranks of one sample read the same batch); another
            value for such a model is an error.
        preempt_after: This rank acts as if it received SIGUSR1 once optimiser
            step ``preempt_after`` (counted from the run's start) is done: every
            rank checkpoints and ``fit`` returns ``"interrupted"``, as on a real
            signal, also with ``handle_signals=False`` (the request is explicit;
            for tests and benchmarks of resume; ``None``: signals only).
        record: Write the run record ``training_run.json`` (``False``: the folder holds
            the caller's one record of the run, a workflow's; a checkpoint of another
            run is refused all the same, by the record every checkpoint keeps).

    Returns:
        A :class:`TrainResult`. Only rank 0 writes files; every rank returns.

    Raises:
        ValueError, TypeError: For a bad input (named), before anything is written.
        RunDirError: If another process trains in ``run_dir``, or its checkpoint
            was written by a run with another configuration (see the module docstring).
        sciml.training.checkpoint.CheckpointError: If ``last.pt`` cannot be read.
        FloatingPointError: If a training loss, the validation loss or the monitored
            metric is not finite (naming the epoch and ``run_dir``); that epoch's end is
            neither logged nor checkpointed, so ``best.pt`` never holds a non-finite one.

    Examples:
        >>> import tempfile
        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> from sciml.training import TrainConfig
        >>> _ = torch.manual_seed(0)
        >>> data = TensorDataset(torch.randn(32, 3), torch.randn(32, 1))
        >>> model = torch.nn.Linear(3, 1)
        >>> def loss_fn(model, batch):
        ...     x, y = batch
        ...     return torch.nn.functional.mse_loss(model(x), y)
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ...     config = TrainConfig(epochs=2, batch_size=8, progress=False)
        ...     result = fit(model, optimizer, data, loss_fn, run_dir=run_dir, config=config)
        >>> result.status
        'completed'
    """
    if preempt_after is not None and (
        isinstance(preempt_after, bool) or not isinstance(preempt_after, int) or preempt_after < 1
    ):
        raise ValueError(f"preempt_after must be an integer >= 1 or None, got {preempt_after!r}")
    setup = check_inputs(
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
    if setup.device.type == "cpu":
        keep_freed_memory()  # steps reuse the memory the last one freed: next to no page faults
    lock = lock_run_dir(setup.run_dir, setup.rank)
    try:
        if record:
            claim_training_record(setup, resume=resume)
        run = Run(RunTrainer(setup, resume=resume, preempt_after=preempt_after), swap=False)
        return drive([run], own_step, handle_signals=setup.config.handle_signals)[0]
    finally:
        lock.release()


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
    record: bool = True,
) -> list[TrainResult]:
    """Train K runs at once, each as :func:`fit` would; their results (module docstring).

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
        record: Write each run's ``training_run.json``, as ``fit`` does.

    Returns:
        One :class:`TrainResult` per run.

    Raises:
        ValueError, TypeError: Runs that cannot be fused (named), before anything is
            written; and every error of ``fit``.
    """
    _check_runs(models, optimizers, run_dirs, configs)
    count = len(models)
    trains = datasets_per_run("train_dataset", train_dataset, count)
    check_steps(trains)
    vals = datasets_per_run("val_dataset", val_dataset, count)
    scheds = (
        [None] * count if schedulers is None else per_run("schedulers", list(schedulers), count)
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
        for setup in setups if record else ():
            claim_training_record(setup, resume=resume)
        runs = [  # each run's random state as its trainer left it: seeded, or resumed
            Run(RunTrainer(setup, resume=resume, preempt_after=preempt_after), swap=True)
            for setup in setups
        ]

        def fused(active: list[RunTrainer]) -> Step:
            return functools.partial(
                fused_backward, FusedModels([t.s.model for t in active]), loss_fn
            )

        return drive(runs, fused, handle_signals=setups[0].config.handle_signals)


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
    for k, config in enumerate(configs):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"configs[{k}] must be a TrainConfig, got {type(config).__name__}")
    check_sweep(configs, run_dirs)
    if world()[1] > 1:
        raise ValueError(
            "fit_fused trains its runs in one process; under torch.distributed train each "
            "run with fit"
        )


@contextlib.contextmanager
def run_dir_advice() -> Iterator[None]:
    """A run folder's refusal by :func:`sciml.training.fit`, advising the ``--run-dir`` option."""
    try:
        yield
    except RunDirError as err:
        raise err.with_advice("give this run another --run-dir") from None


def fit_runs(
    models: Sequence[torch.nn.Module],
    configs: Sequence[Any],
    train_set: Dataset[Any],
    val_set: Dataset[Any],
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
    run_dirs: Sequence[Path],
    device: torch.device,
) -> list[str]:
    """Train one model per run (Adam at its ``config.lr``, the loop of its ``config.train``).

    One run goes through :func:`sciml.training.fit` (data-parallel under an initialised
    ``torch.distributed`` group), several through :func:`sciml.training.fit_fused`; each
    run folder holds the workflow's record, so ``fit`` writes none of its own.
    Returns each run's status.
    """
    optimizers = [
        torch.optim.Adam(m.parameters(), lr=c.lr) for m, c in zip(models, configs, strict=True)
    ]
    with run_dir_advice():
        if len(models) > 1:
            results = fit_fused(
                models,
                optimizers,
                train_set,
                loss_fn,
                run_dirs=run_dirs,
                configs=[c.train for c in configs],
                val_dataset=val_set,
                record=False,
            )
            return [result.status for result in results]
        model = models[0]
        if world()[1] > 1:
            model = DistributedDataParallel(
                model, device_ids=[device] if device.type == "cuda" else None
            )
        result = fit(
            model,
            optimizers[0],
            train_set,
            loss_fn,
            run_dir=run_dirs[0],
            config=configs[0].train,
            val_dataset=val_set,
            record=False,
        )
    return [result.status]
