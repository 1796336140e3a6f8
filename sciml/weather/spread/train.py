"""Train a spread predictor, in its run folder.

``sciml weather spread train`` calls :func:`train_spread`: as for the post-processing
models (:mod:`sciml.weather.postprocess.train`), the last ``validation`` fraction of the start dates
validates and the rest trains, through :func:`sciml.training.fit` (progress, metrics,
checkpoints, exact resume, preemption), data-parallel under an initialised
``torch.distributed`` group (``sciml weather spread train`` under torchrun or srun) as
:func:`~sciml.weather.postprocess.train.train_postprocessor` does. The run folder holds
``spread_run.json`` (its one record: the configuration, the training data's grid and the
forecasts' channel statistics from the training dates, :mod:`sciml.weather.spread.record`:
a rerun with another configuration, or on other data, is refused before anything is
written; a resumed run reads the statistics back) and ``fit``'s checkpoints and metrics;
:mod:`sciml.weather.spread.predict` rebuilds a trained run and forecasts with it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch
import xarray as xr

from sciml.datasets.channels import NormStats, compute_stats
from sciml.distributed.collectives import on_rank0
from sciml.training.loop import fit_runs
from sciml.training.runs.folder import claim_run_dirs
from sciml.training.runs.record import run_records
from sciml.training.sweeps import check_sweep
from sciml.weather.data import refuse_missing
from sciml.weather.grid import data_record, forecast_variables
from sciml.weather.periodic import is_periodic_lon
from sciml.weather.reads import IN_MEMORY_BYTES, in_memory, read_path, record_reads
from sciml.weather.split import split_start_dates
from sciml.weather.spread.config import SpreadConfig
from sciml.weather.spread.data import SpreadDataset, check_spread_data, lead_days
from sciml.weather.spread.model import spread_loss
from sciml.weather.spread.record import SPREAD_RECORD, read_spread_run
from sciml.weather.stats_record import STATS, STATS_FILE
from sciml.weather.streamed import StreamedEnsemble, chunk_layout

__all__ = ["train_spread", "train_spreads"]

#: Says whether the data are read into memory, and why (``INFO``).
logger = logging.getLogger(__name__)


def train_spread(
    ds: xr.Dataset,
    config: SpreadConfig,
    run_dir: Path | str,
    *,
    device: torch.device | str | None = None,
    memory_limit: int = IN_MEMORY_BYTES,
) -> str:
    """Train a :class:`~sciml.weather.spread.model.SpreadPredictor` on ``ds``; return the status.

    Under an initialised ``torch.distributed`` group the model trains data-parallel: each
    rank reads its share of every epoch's samples (``config.train.batch_size`` per rank) and
    the gradients are averaged over ranks (``DistributedDataParallel``); rank 0 alone writes
    the run folder's configuration and statistics, and its checkpoints hold the plain
    model's weights.

    Args:
        ds: Ensemble with ``<variable>_truth`` and dims ``member``, ``time``, ``lead_time``,
            ``level``, ``lat``, ``lon`` (e.g. a toy preset).
        config: What to train and how; the run records it with what the data decide
            (variables, periodic dims, ensemble size, lead times, levels).
        run_dir: The run folder.
        device: Where the model trains (default: the CPU).
        memory_limit: Bytes of training (or validation) dates read into memory; larger
            ones (or all, with 0) are streamed, a chunk of the file at a time in an order
            that follows the chunks (a runtime option; the run says which path it took, in
            its log and ``reads.json``). Data read into memory are read in the order
            streaming would take: the limit changes no result.

    Returns:
        ``"completed"``, ``"early_stopped"`` or ``"interrupted"``.

    Raises:
        ValueError: Bad data (see :class:`~sciml.weather.spread.data.SpreadDataset`), the
            data's sizes set by hand in ``config`` (``ensemble``, ``lead_days``, ``levels``),
            or a run folder that holds another configuration; raised before anything is
            written.
    """
    return train_spreads(ds, [config], [run_dir], device=device, memory_limit=memory_limit)[0]


def train_spreads(
    ds: xr.Dataset,
    configs: Sequence[SpreadConfig],
    run_dirs: Sequence[Path | str],
    *,
    device: torch.device | str | None = None,
    memory_limit: int = IN_MEMORY_BYTES,
) -> list[str]:
    """Train one spread run per configuration at once (a seed or learning-rate sweep).

    The configurations differ in ``train.seed`` and ``lr`` only; several runs train fused
    (:func:`sciml.training.fit_fused`), each writing in its own folder what
    :func:`train_spread` writes. Arguments, returns and errors: as :func:`train_spread`,
    one per run.

    Raises:
        ValueError: As :func:`train_spread`; configurations that differ in more than seed
            and learning rate, or not one run folder per configuration.
    """
    check_sweep(configs, run_dirs, label="configuration {}")
    target = torch.device(device or "cpu")  # a bad device string fails here, before writing
    configs = [_resolved(ds, config) for config in configs]
    first = configs[0]
    chosen = list(first.variables or ())
    refuse_missing(
        ds,
        [*chosen, *(f"{var}_truth" for var in chosen)],
        advice="a spread run does not mask missing values: fill them first",
    )
    train, val, _ = split_start_dates(ds, validation=first.validation, test=0)
    run_paths = [Path(run_dir) for run_dir in run_dirs]
    data = data_record(ds, chosen, channel_dims=("level",))
    records = run_records(configs, data, run_paths, SPREAD_RECORD)

    def prepare() -> NormStats:
        """Check the folders, then write what they lack (rank 0): nothing before the checks."""
        with claim_run_dirs(run_paths, SPREAD_RECORD, records) as claims:
            # a resumed run keeps its statistics
            recorded = [read_spread_run(c.run_dir)[1] for c in claims if c.resumed]
            stats = (
                recorded[0] if recorded else compute_stats(train, chosen, channel_dims=("level",))
            )
            for claim in claims:
                claim.write({STATS: stats.record()})
                (claim.run_dir / STATS_FILE).unlink(missing_ok=True)  # the format before held them
            return stats

    stats = on_rank0(prepare)
    return _fit(train, val, configs, stats, run_paths, device=target, memory_limit=memory_limit)


def _resolved(ds: xr.Dataset, config: SpreadConfig) -> SpreadConfig:
    """``config`` with what the data decide, after checking both.

    Raises:
        ValueError: As :func:`train_spread`.
    """
    derived = {"ensemble": config.ensemble, "lead_days": config.lead_days, "levels": config.levels}
    if derived != {"ensemble": 0, "lead_days": (), "levels": 0}:
        raise ValueError(
            f"SpreadConfig's ensemble, lead_days and levels come from the data; leave them "
            f"unset, got {derived}"
        )
    chosen = list(config.variables or forecast_variables(ds))
    if not chosen:
        raise ValueError(
            f"no forecast variable with a truth (v and v_truth) in {sorted(map(str, ds.data_vars))}"
        )
    check_spread_data(ds, chosen, members=config.members, history=config.history)
    closed = is_periodic_lon(ds)
    periodic = config.periodic
    if periodic is None:
        periodic = ("lon",) if closed else ()
    elif "lon" in periodic and not closed:
        raise ValueError(
            "periodic 'lon' needs a lon coordinate of evenly spaced longitudes closing 360 "
            f"degrees; the data's lon ({ds.sizes.get('lon', 0)} points) does not: leave lon "
            "out of periodic"
        )
    config = replace(
        config,
        variables=tuple(chosen),
        periodic=tuple(periodic),
        ensemble=ds.sizes["member"],
        lead_days=lead_days(ds),
        levels=ds.sizes["level"],
    )
    config.build()  # the model's own checks, before anything is written
    multiple = 2**config.depth
    odd = {d: ds.sizes[d] for d in ("lat", "lon") if ds.sizes.get(d, 0) % multiple}
    if odd:
        raise ValueError(f"lat and lon must divide by 2**depth = {multiple}, got {odd}")
    return config


def _fit(
    train: xr.Dataset,
    val: xr.Dataset,
    configs: Sequence[SpreadConfig],
    stats: NormStats,
    run_dirs: Sequence[Path],
    *,
    device: torch.device,
    memory_limit: int,
) -> list[str]:
    from sciml.datasets.sampling import seed_everything

    config = configs[0]

    def dataset(part: xr.Dataset, choice: str, what: str) -> tuple[SpreadDataset, dict[str, str]]:
        """The samples of ``part``, in memory or streamed, and the path they take and why."""
        stream, why = read_path(part, what=what, limit=memory_limit)
        variables = config.variables or ()
        data = SpreadDataset(
            part if stream else in_memory(part, what=what, limit=memory_limit),
            variables,
            members=config.members,
            history=config.history,
            choice=choice,  # type: ignore[arg-type]
            stats=stats,
            stream=stream,
        )
        if isinstance(data.base, StreamedEnsemble):
            why = f"{why}: {data.base.describe()}"
        elif any(var.chunks for var in part.variables.values()):  # the order streaming takes
            data.chunk_layout = chunk_layout(part, variables)
        logger.info(why)
        return data, {"path": "stream" if stream else "memory", "why": why}

    models: list[torch.nn.Module] = []
    for run in configs:  # each run's weights from its own seed, as a separate run's
        seed_everything(run.train.seed)
        models.append(run.build().to(device))
    loss = partial(spread_loss, loss=config.loss)  # type: ignore[arg-type]
    train_set, train_path = dataset(train, config.choice, "the training dates")
    val_set, val_path = dataset(val, "first", "the validation dates")
    on_rank0(lambda: record_reads(run_dirs, memory_limit, [train_path, val_path]))
    return fit_runs(models, configs, train_set, val_set, loss, run_dirs, device)
