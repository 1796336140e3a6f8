"""Post-processing scores on data with few start dates and no separate truth (a real sample).

A real ensemble sample such as the bundled ERA5 file (10 members, 4 analysis times) has no
verifying truth beside its members and too few start dates for a training / validation /
test split. Two tools make the library's own training and evaluation
(:func:`sciml.weather.postprocess.train.train_postprocessor`,
:func:`sciml.weather.postprocess.evaluate.evaluate_runs`)
apply to it:

* :func:`members_as_truth`: each member in turn is the truth and the others are the
  ensemble (the perfect-model verification of :func:`sciml.weather.verify.leave_one_out_scores`),
  stacked along a ``truth_member`` dimension that training pools and evaluation averages;
* :func:`leave_one_date_out`: each start date is held out in turn, a model is trained on
  the others and scored on it, so that no date is scored by a model fitted on it; the
  per-date rows show the sampling error of a mean over so few dates.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.evaluate import evaluate_runs
from sciml.weather.postprocess.train import train_postprocessor

__all__ = ["leave_one_date_out", "members_as_truth"]


def members_as_truth(
    ds: xr.Dataset,
    *,
    variables: Sequence[str] | None = None,
    member_dim: str = "member",
    truth_dim: str = "truth_member",
) -> xr.Dataset:
    """Each member as the truth (``<variable>_truth``) of the ensemble of the other members.

    The ``M - 1`` other members keep their order and are relabelled ``0 .. M - 2`` along
    ``member_dim``; the truth's own label is the ``truth_dim`` coordinate. An ensemble
    without ``lead_time`` (analyses) gets a lead time of 0, which training and evaluation
    read.

    Args:
        ds: Ensemble dataset with ``member_dim`` and a ``time`` (start date) dimension.
        variables: Variables to verify (default: every one with ``member_dim``); the
            others are dropped.
        member_dim: Name of the member dimension.
        truth_dim: Name of the new dimension along which the truth member varies.

    Returns:
        ``<variable>`` with ``M - 1`` members and ``<variable>_truth`` for each variable,
        both with ``truth_dim`` of size ``M``.

    Raises:
        ValueError: A variable without ``member_dim`` or ``time``, or with a ``_truth``
            already, fewer than 3 members, or ``truth_dim`` already a dimension.
    """
    chosen = (
        [str(v) for v, var in ds.data_vars.items() if member_dim in var.dims]
        if variables is None
        else list(variables)
    )
    if not chosen:
        raise ValueError(f"no variable with a member dimension {member_dim!r} in {dict(ds.sizes)}")
    for var in chosen:
        _check_variable(ds, var, member_dim, truth_dim)
    size = ds.sizes[member_dim]
    if size < 3:
        raise ValueError(
            f"one member as the truth needs at least 3 members (an ensemble of 2), got {size}"
        )
    truths = pd.Index(ds[member_dim].values, name=truth_dim)
    out = xr.Dataset(attrs=ds.attrs)
    for var in chosen:
        field = ds[var]
        others = [
            field.drop_isel({member_dim: k}).assign_coords({member_dim: np.arange(size - 1)})
            for k in range(size)
        ]
        out[var] = xr.concat(others, truths).assign_attrs(field.attrs)
        out[f"{var}_truth"] = xr.concat(
            [field.isel({member_dim: k}, drop=True) for k in range(size)], truths
        ).assign_attrs(field.attrs)
    if "lead_time" not in out.dims:
        out = out.expand_dims(lead_time=[np.timedelta64(0, "ns")])
    first = [member_dim, "time", "lead_time", truth_dim]
    return out.transpose(*first, ...)


def _check_variable(ds: xr.Dataset, var: str, member_dim: str, truth_dim: str) -> None:
    if var not in ds.data_vars:
        raise ValueError(f"no variable {var!r} in the data: {sorted(map(str, ds.data_vars))}")
    dims: tuple[Hashable, ...] = ds[var].dims
    missing = [d for d in (member_dim, "time") if d not in dims]
    if missing:
        raise ValueError(f"{var!r} has no {missing} dimension(s); its dimensions are {dims}")
    if truth_dim in dims:
        raise ValueError(f"{var!r} already has a {truth_dim!r} dimension; pass another truth_dim")
    if f"{var}_truth" in ds.data_vars:
        raise ValueError(f"{var!r} already has a truth ({var}_truth): score against it instead")


def leave_one_date_out(
    ds: xr.Dataset, config: PostprocessConfig, run_dir: Path | str
) -> pd.DataFrame:
    """Hold out each start date in turn: train on the others, score the held-out date.

    Each fold trains ``config`` on the other dates with
    :func:`~sciml.weather.postprocess.train.train_postprocessor` (a deep model validates on the last
    ``config.validation`` share of those dates, EMOS fits on all of them) into
    ``run_dir/date<i>``,
    and scores it with
    :func:`~sciml.weather.postprocess.evaluate.evaluate_runs` on the held-out date, the other dates
    defining the extreme-event climates.

    Args:
        ds: Ensemble with ``<variable>_truth`` and at least 3 distinct start dates (``time``).
        config: The model each fold trains, and how.
        run_dir: Folder of the folds' run folders.

    Returns:
        The evaluation table of every fold, with a ``held_out`` column (the date scored).

    Raises:
        ValueError: No ``time`` dimension, repeated start dates or fewer than 3 of them.
    """
    if "time" not in ds.dims:
        raise ValueError(f"the data have no start-date dimension 'time': {dict(ds.sizes)}")
    dates = ds.indexes["time"]
    if not dates.is_unique:
        raise ValueError(f"start dates repeat: {dates[dates.duplicated()].tolist()}")
    if dates.size < 3:
        raise ValueError(
            f"leave-one-date-out needs at least 3 start dates (2 to train and validate on, 1 "
            f"to score), got {dates.size}"
        )
    tables = []
    for i, held in enumerate(dates):
        seen, test = ds.drop_sel(time=[held]), ds.sel(time=[held])
        run = Path(run_dir) / f"date{i}"
        train_postprocessor(seen, config, run)
        tables.append(evaluate_runs([run], test, climate=seen).assign(held_out=held))
    return pd.concat(tables, ignore_index=True)
