"""Train a post-processing model on an ensemble dataset, in its run folder.

``sciml weather train`` calls :func:`train_postprocessor` with a
:class:`~sciml.weather.postprocess.config.PostprocessConfig`; the model's entry in
:data:`~sciml.weather.postprocess.registry.MODELS` says how it is built or fitted. For the
deep models the last ``validation`` fraction of the start dates validates
(:func:`sciml.weather.split.split_start_dates` without a test part: test on another file) and
the rest trains; a closed-form model such as EMOS, which has nothing to choose on validation
dates, fits on every start date it is given (its run records ``validation`` 0). The run
folder holds ``weather_run.json`` (its one record, :mod:`sciml.training.runs.record`: the
model and data configuration, the data's grid, :func:`sciml.weather.grid.data_record`, and
the forecasts' channel statistics from the training dates) and either a
closed-form model's parameters, ``<model>.nc`` (``emos.nc``: EMOS coefficients, one fit per
variable, level and lead time over all dates and grid points, on the first ``members``
members: per-point fits need many more dates than a toy set has, see
:func:`sciml.weather.postprocess.emos.fit_emos` for them) or :func:`sciml.training.fit`'s
checkpoints and metrics (the deep models: progress, exact resume, preemption; a rerun with
another configuration is refused). The deep models (``mlp``, ``unet``, ``mixed``,
``pooled``) read the lead time and, by default, train on the CRPS relative to the raw
ensemble's per channel and lead time (:mod:`sciml.weather.postprocess.loss_scale`; the
scale is kept as ``crps_scale.nc``); their convolutions wrap around in longitude when the
grid closes the circle (:func:`~sciml.weather.periodic.is_periodic_lon`). The record and
its format are :mod:`sciml.weather.postprocess.record`'s; :mod:`~sciml.weather.postprocess.predict`
rebuilds a trained run.

Every check happens before the first byte is written: a rerun in a folder that holds
another configuration, or was trained on other data (another grid, other levels, lead
times, start dates or ensemble size), is refused and leaves the folder as it was; a
resumed run reads the folder's statistics and loss scale instead of writing them again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import xarray as xr
from torch.utils.data import Dataset

from sciml.datasets.channels import NormStats, compute_stats
from sciml.distributed.collectives import on_rank0
from sciml.io_utils import atomic_path
from sciml.training.loop import fit_runs
from sciml.training.runs.folder import claim_run_dirs
from sciml.training.runs.record import run_records
from sciml.training.sweeps import check_sweep
from sciml.weather.data import refuse_missing
from sciml.weather.grid import (
    SAMPLE_DIMS,
    data_record,
    forecast_variables,
    spatial_dims,
    static_variables,
)
from sciml.weather.periodic import is_periodic_lon
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.loss_scale import raw_crps_scale
from sciml.weather.postprocess.models import build_postprocessor
from sciml.weather.postprocess.record import RUN_RECORD, read_run
from sciml.weather.postprocess.registry import MODELS
from sciml.weather.reads import IN_MEMORY_BYTES, in_memory, read_path, record_reads
from sciml.weather.split import split_start_dates
from sciml.weather.stats_record import STATS, STATS_FILE

__all__ = [
    "train_postprocessor",
    "train_postprocessors",
]

#: Says which path the data take (in memory or streamed) and why (``INFO``).
logger = logging.getLogger(__name__)


def train_postprocessor(
    ds: xr.Dataset,
    config: PostprocessConfig,
    run_dir: Path | str,
    *,
    device: torch.device | str | None = None,
    memory_limit: int = IN_MEMORY_BYTES,
) -> str:
    """Train ``config.model`` (one of :data:`MODELS`) on ``ds``; return the run's status.

    Under an initialised ``torch.distributed`` group (``sciml weather train`` under
    torchrun or srun) a deep model trains data-parallel: each rank reads its share of
    every epoch's samples and the gradients are averaged over ranks
    (``DistributedDataParallel``); rank 0 alone writes the run folder and fits EMOS.

    Args:
        ds: Ensemble with ``<variable>_truth`` (e.g. a toy preset), Dask-backed or not.
        config: What to train and how; the run records it with what the data decide
            (variables, static fields, member choice, grid, periodic longitudes).
        run_dir: The run folder.
        device: Where a deep model trains (default: the CPU).
        memory_limit: Bytes of training (or validation) dates a deep model reads into
            memory; larger ones are streamed, a chunk of the file at a time in an order
            that follows the chunks (:class:`~sciml.weather.streamed.StreamedEnsemble`);
            0: always stream. Data read into memory are read in the order streaming
            would take (:func:`~sciml.weather.streamed.chunk_layout`: the file's chunks),
            so the limit changes no result, and a resumed run may change it. The run says
            which path it took, and why, and keeps it in ``reads.json``.

    Returns:
        ``"completed"``, ``"early_stopped"`` or ``"interrupted"``.

    Raises:
        ValueError: ``config.members`` above the ensemble size, a dataset without truth,
            ``config.grid`` or ``config.periodic`` set by hand (the data decide them), or
            a run folder that holds another configuration.
    """
    return train_postprocessors(ds, [config], [run_dir], device=device, memory_limit=memory_limit)[
        0
    ]


def train_postprocessors(
    ds: xr.Dataset,
    configs: Sequence[PostprocessConfig],
    run_dirs: Sequence[Path | str],
    *,
    device: torch.device | str | None = None,
    memory_limit: int = IN_MEMORY_BYTES,
) -> list[str]:
    """Train one run per configuration at once (a seed or learning-rate sweep); their statuses.

    The configurations differ in ``train.seed`` and ``lr`` only. Several deep runs train
    fused (:func:`sciml.training.fit_fused`: one batched step for all, in one process),
    each writing in its own folder what :func:`train_postprocessor` writes, with the same
    weights and losses as that separate run (to the float rounding of a batched
    convolution). Arguments, returns and errors: as :func:`train_postprocessor`, one per run.

    Raises:
        ValueError: As :func:`train_postprocessor`; configurations that differ in more than
            seed and learning rate, a sweep of EMOS (it has neither), or not one run folder
            per configuration.
    """
    check_sweep(configs, run_dirs, label="configuration {}")
    configs = [_resolved(ds, config) for config in configs]
    first = configs[0]
    chosen = list(first.variables or ())
    if first.missing == "refuse":
        refuse_missing(
            ds,
            [*chosen, *(f"{var}_truth" for var in chosen), *(first.static or ())],
            advice="give --missing mask (PostprocessConfig.missing='mask') to leave missing "
            "points out of the loss and the scores, or fill them first",
        )
    entry = MODELS[first.model]
    closed_form = not entry.deep
    if len(configs) > 1 and closed_form:
        raise ValueError(
            f"{entry.called} has no seed or learning rate to sweep: fit it once (a closed-form fit)"
        )
    run_paths = [Path(run_dir) for run_dir in run_dirs]
    if closed_form:
        train, val = ds, None  # no checkpoint to choose: a closed-form model fits every date
    else:
        train, val, _ = split_start_dates(ds, validation=first.validation, test=0)
    channel_dims = first.channel_dims
    data = data_record(ds, chosen, channel_dims=channel_dims, static=first.static or ())
    records = run_records(configs, data, run_paths, RUN_RECORD)
    wants_scale = not closed_form and first.loss_scale != "none"

    def prepare() -> tuple[NormStats, xr.DataArray | None]:
        """Check the folders, compute what they lack, then write them (rank 0; closed-form fits)."""
        with claim_run_dirs(run_paths, RUN_RECORD, records) as claims:
            resumed = [claim.resumed and not closed_form for claim in claims]  # a fit is redone
            scale_paths = [run_dir / "crps_scale.nc" for run_dir in run_paths]
            keep_scale = [
                wants_scale and r and p.exists() for r, p in zip(resumed, scale_paths, strict=True)
            ]
            recorded = [read_run(d)[1] for d, r in zip(run_paths, resumed, strict=True) if r]
            stats = (
                recorded[0] if recorded else compute_stats(train, chosen, channel_dims=channel_dims)
            )
            scale = None
            if any(keep_scale):
                with xr.open_dataarray(scale_paths[keep_scale.index(True)]) as stored:
                    scale = stored.load()
            elif wants_scale:
                scale = raw_crps_scale(train, chosen, stats=stats, channel_dims=channel_dims)
            params = entry.function("fit")(train, first) if closed_form else None
            # every check and computation is done: only now are the folders written
            for k, (run_dir, claim) in enumerate(zip(run_paths, claims, strict=True)):
                claim.write({STATS: stats.record()})
                (run_dir / STATS_FILE).unlink(missing_ok=True)  # the format before held them
                if scale is not None and not keep_scale[k]:
                    with atomic_path(scale_paths[k], suffix=".nc") as tmp:
                        scale.to_netcdf(tmp)
                if params is not None:
                    with atomic_path(run_dir / entry.params, suffix=".nc") as tmp:
                        params.to_netcdf(tmp)
        return stats, scale

    stats, scale = on_rank0(prepare)
    if val is None:
        return ["completed"]
    return _train_deep(
        train, val, configs, stats, scale, run_paths, torch.device(device or "cpu"), memory_limit
    )


def _resolved(ds: xr.Dataset, config: PostprocessConfig) -> PostprocessConfig:
    """``config`` with what the data decide: variables, static fields, choice, grid, periodic.

    Raises:
        ValueError: As :func:`train_postprocessor`.
    """
    if (config.grid, config.periodic) != ((), False):
        raise ValueError(
            f"PostprocessConfig.grid and periodic come from the data; leave them unset, got "
            f"grid={config.grid!r}, periodic={config.periodic!r}"
        )
    size = ds.sizes.get("member", 0)
    if config.members > size:
        raise ValueError(
            f"PostprocessConfig.members must be at most the ensemble's {size} members, "
            f"got {config.members}"
        )
    closed_form = not MODELS[config.model].deep
    chosen = list(config.variables or forecast_variables(ds))
    if not chosen:
        raise ValueError(
            f"no forecast variable with a truth (v and v_truth) in {sorted(map(str, ds.data_vars))}"
        )
    static = config.static if config.static is not None else static_variables(ds)
    return replace(
        config,
        variables=tuple(chosen),
        static=() if closed_form else tuple(static),
        choice=config.choice or MODELS[config.model].choice,
        validation=0.0 if closed_form else config.validation,
        grid=() if closed_form else _grid(ds, chosen, config.channel_dims),
        periodic=not closed_form and is_periodic_lon(ds, dim=str(ds[chosen[0]].dims[-1])),
    )


def _grid(ds: xr.Dataset, variables: list[str], channel_dims: Sequence[str]) -> tuple[int, ...]:
    """The (lat, lon) sizes of the forecasts: the dims beside members, samples and channels."""
    spatial = spatial_dims(ds[variables[0]], channel_dims)
    if len(spatial) != 2:
        raise ValueError(
            f"the deep models need 2 spatial dims (lat, lon) besides member, {SAMPLE_DIMS} "
            f"and channel_dims {tuple(channel_dims)}; {variables[0]!r} has {spatial}"
        )
    return tuple(ds.sizes[d] for d in spatial)


def _train_deep(
    train: xr.Dataset,
    val: xr.Dataset,
    configs: Sequence[PostprocessConfig],
    stats: NormStats,
    scale: xr.DataArray | None,
    run_dirs: Sequence[Path],
    device: torch.device,
    memory_limit: int,
) -> list[str]:
    from sciml.datasets.sampling import seed_everything
    from sciml.weather.postprocess.models import gaussian_crps_loss

    config = configs[0]
    options = {
        "members": config.members,
        "stats": stats,
        "channel_dims": config.channel_dims,
        "static": config.static or (),
        "crps_scale": scale,
        "missing": config.missing,
        "choice": config.choice,
    }

    models: list[torch.nn.Module] = []
    for run in configs:  # each run's weights from its own seed, as a separate run's
        seed_everything(run.train.seed)
        models.append(build_postprocessor(run, len(stats.channels)).to(device))
    variables = list(config.variables or ())
    train_set, train_path = _samples(
        train, variables, what="the training dates", limit=memory_limit, **options
    )
    val_set, val_path = _samples(
        val,
        variables,
        what="the validation dates",
        limit=memory_limit,
        **options | {"choice": "first"},
    )
    on_rank0(lambda: record_reads(run_dirs, memory_limit, [train_path, val_path]))
    return fit_runs(models, configs, train_set, val_set, gaussian_crps_loss, run_dirs, device)


def _samples(
    part: xr.Dataset, variables: list[str], *, what: str, limit: int, **options: Any
) -> tuple[Dataset[Any], dict[str, str]]:
    """The samples of ``part``, in memory or streamed (:func:`~sciml.weather.reads.read_path`).

    Returns:
        The dataset, and the path it takes and why (as ``reads.json`` keeps them).
    """
    from sciml.weather.dataset import EnsembleDataset
    from sciml.weather.streamed import StreamedEnsemble, chunk_layout

    options["choice"] = options["choice"] or "first"
    stream, why = read_path(part, what=what, limit=limit)
    if not stream:
        logger.info(why)
        lazy = any(var.chunks for var in part.variables.values())
        layout = chunk_layout(part, variables) if lazy else None
        data = EnsembleDataset(in_memory(part, what=what, limit=limit), variables, **options)
        data.chunk_layout = layout  # the order streaming would take: the limit changes no result
        return data, {"path": "memory", "why": why}
    streamed = StreamedEnsemble(part, variables, **options)
    why = f"{why}: {streamed.describe()}"
    logger.info(why)
    return streamed, {"path": "stream", "why": why}
