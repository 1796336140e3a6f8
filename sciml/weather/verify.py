"""Score summaries of an ensemble: against a truth, or each member against the others.

Real ensemble samples (like the bundled ERA5 file) ship without a separate truth, so
:func:`leave_one_out_scores` verifies each member in turn against the ensemble of the
remaining members: for an ensemble whose members are exchangeable this is what a reliable
(M - 1)-member forecast would score.

Two leave-one-out statistics are identities and carry no information, so they are not
reported: pooled over the verifying members the spread-skill ratio is exactly 1
(``x_k - mean_{-k} = M/(M-1) (x_k - mean)``), and the pooled rank histogram is flat up
to ties broken at random (the members' ranks among each other are a permutation). Per
verifying member the rank histogram does say something (e.g. whether a control member
sits in the middle).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import partial
from typing import Literal

import numpy as np
import pandas as pd
import xarray as xr

from sciml.datasets.cf import valid_times
from sciml.weather import metrics
from sciml.weather.blocks import auto_block_dates, date_blocks
from sciml.weather.data import refuse_missing
from sciml.weather.metrics.alignment import Dim, _check_weights

__all__ = [
    "at_valid_time",
    "leave_one_out_scores",
    "score_ensemble",
    "score_summary",
    "scores_table",
]


def at_valid_time(
    observations: xr.DataArray,
    forecasts: xr.DataArray,
    *,
    time_dim: str = "time",
    lead_dim: str = "lead_time",
) -> xr.DataArray:
    """Observations indexed by valid time, put on the forecasts' start times and lead times.

    Forecasts are labelled by start date (``time_dim``) and ``lead_dim``; observations (an
    analysis, a reanalysis) by the time they are valid at. This returns, for every start
    date and lead time, the observation at ``start + lead``, with the forecasts' dimensions
    (without the members) and a ``valid_time`` coordinate, ready for :mod:`.metrics`.

    Raises:
        ValueError: If a dimension is missing, or an observation is missing at a valid time
            of the forecasts (nothing is filled in).
    """
    for name, value, wanted in (
        ("observations", observations, (time_dim,)),
        ("forecasts", forecasts, (time_dim, lead_dim)),
    ):
        missing = [dim for dim in wanted if dim not in value.dims]
        if missing:
            raise ValueError(f"{name} have no {missing} dimension; dimensions {value.dims}")
    if lead_dim in observations.dims:
        raise ValueError(
            f"observations already have {lead_dim!r}: they are on the forecasts' start times"
        )
    valid = valid_times(forecasts[time_dim], forecasts[lead_dim])
    known = np.isin(valid.values, observations[time_dim].values)
    if not known.all():
        absent = np.unique(valid.values[~known])
        raise ValueError(
            f"observations have no value at {absent.size} valid time(s) of the forecasts, "
            f"e.g. {absent[:3].tolist()}; observations cover "
            f"{observations[time_dim].values.min()} .. {observations[time_dim].values.max()}"
        )
    picked = observations.rename({time_dim: "_valid"}).sel(_valid=valid)
    picked = picked.drop_vars("_valid").assign_coords(valid_time=valid)
    return picked.transpose(*[d for d in forecasts.dims if d in picked.dims])


def score_summary(
    observations: xr.DataArray,
    forecasts: xr.DataArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    """CRPS (standard and fair), spread, RMSE of the mean and spread-skill ratios.

    Args:
        observations: Verifying values, without ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        member_dim: Name of the member dimension.
        dim: Dimensions to average over (None: all).
        weights: Weights for the averages (e.g. :func:`metrics.latitude_weights`).

    Returns:
        Dataset with ``crps``, ``crps_fair``, ``spread``, ``rmse``, ``spread_skill`` (with the
        (M+1)/M correction) and ``spread_skill_raw``.
    """
    valid = observations.notnull()
    crps = partial(
        metrics.crps_ensemble,
        observations,
        forecasts,
        member_dim=member_dim,
        dim=dim,
        weights=weights,
    )
    ratio = partial(
        metrics.spread_skill_ratio,
        observations,
        forecasts,
        member_dim=member_dim,
        dim=dim,
        weights=weights,
    )
    spread = metrics.ensemble_spread(
        forecasts.where(valid), member_dim=member_dim, dim=dim, weights=weights
    )
    return xr.Dataset(
        {
            "crps": crps(),
            "crps_fair": crps(fair=True),
            "spread": spread,
            "rmse": metrics.ensemble_mean_rmse(
                observations, forecasts, member_dim=member_dim, dim=dim, weights=weights
            ),
            "spread_skill": ratio(),
            "spread_skill_raw": ratio(corrected=False),
        }
    )


def leave_one_out_scores(
    forecasts: xr.DataArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    """Scores of each member against the ensemble of the others, pooled over the members.

    Returns:
        Dataset with ``crps`` and ``crps_fair`` (averaged over the verifying members), and
        ``spread`` and ``rmse`` (pooled as root-mean-squares; their corrected ratio is 1 by
        construction, see the module docstring).
    """
    if member_dim not in forecasts.dims:
        raise ValueError(
            f"forecasts have no member dimension {member_dim!r}; their dimensions are "
            f"{tuple(forecasts.dims)} (pass member_dim=...)"
        )
    members = forecasts.sizes[member_dim]
    if members < 3:
        raise ValueError(f"leave-one-out scoring needs at least 3 members, got {members}")
    parts = [
        score_summary(
            forecasts.isel({member_dim: k}, drop=True),
            forecasts.drop_isel({member_dim: k}),
            member_dim=member_dim,
            dim=dim,
            weights=weights,
        )
        for k in range(members)
    ]
    stacked = xr.concat(parts, dim="_verifying_member")
    pooled = stacked[["crps", "crps_fair"]].mean("_verifying_member")
    pooled["spread"] = np.sqrt((stacked["spread"] ** 2).mean("_verifying_member"))
    pooled["rmse"] = np.sqrt((stacked["rmse"] ** 2).mean("_verifying_member"))
    return pooled


def score_ensemble(
    forecasts: xr.Dataset,
    variable: str,
    *,
    observations: xr.Dataset | None = None,
    by: Sequence[Hashable] | None = None,
    member_dim: str = "member",
    lat_weights: bool = False,
    block_dates: int | None = None,
    missing: Literal["refuse", "mask"] = "refuse",
) -> xr.Dataset:
    """Score one variable of an ensemble dataset (what ``sciml weather score`` prints).

    The verifying values are ``observations[variable]`` when given (observations without
    ``lead_dim`` are taken at the forecasts' valid times, :func:`at_valid_time`), else the
    dataset's ``<variable>_truth``, else each member is verified against the others
    (:func:`leave_one_out_scores`).

    Args:
        forecasts: Dataset holding ``variable`` with ``member_dim``.
        variable: Variable to score.
        observations: Dataset holding the verifying ``variable``.
        by: Dimensions to keep (None: ``lead_time`` when present); scores are averaged
            over the others.
        member_dim: Name of the member dimension.
        lat_weights: Weight the averages by cos(latitude).
        block_dates: Start dates (``time``) read and scored at a time: each score keeps its
            weighted sums and weights over the blocks, so memory is set by the block (the
            same scores, to the rounding of sums in another order); None: about
            :data:`~sciml.weather.blocks.BLOCK_BYTES` of ensemble per block; 0: the whole
            data at once (also when they have no ``time``).
        missing: ``"refuse"`` missing (NaN) forecasts or verifying values, as they are
            read (nothing is written before the end); ``"mask"``: leave them out: a point
            without a verifying value is left out of every score, and a point's missing
            members out of its ensemble (as properscoring scores them).

    Returns:
        :func:`score_summary`'s (or :func:`leave_one_out_scores`') variables, computed,
        with attributes ``verified_against`` and ``averaged_over``.

    Raises:
        ValueError: Missing values when ``missing="refuse"``, naming the variable, its
            file, how many points and the first of them.
    """
    if missing not in ("refuse", "mask"):
        raise ValueError(f"missing must be 'refuse' or 'mask', got {missing!r}")
    if variable not in forecasts.data_vars:
        raise ValueError(f"no variable {variable!r} in the forecasts: {list(forecasts.data_vars)}")
    ensemble = forecasts[variable]
    if member_dim not in ensemble.dims:
        raise ValueError(
            f"{variable} has no member dimension {member_dim!r}; its dimensions are "
            f"{ensemble.dims} (pass --member-dim / member_dim=...)"
        )
    keep = [d for d in ("lead_time",) if d in ensemble.dims] if by is None else list(by)
    wrong = [d for d in keep if d not in ensemble.dims or d == member_dim]
    if wrong:
        raise ValueError(
            f"--by {wrong}: not dimensions of {variable} to keep; choose among "
            f"{[d for d in ensemble.dims if d != member_dim]}"
        )
    dims = [d for d in ensemble.dims if d not in (*keep, member_dim)]
    weights = metrics.latitude_weights(ensemble) if lat_weights else None
    truth, against = _verifying_values(forecasts, variable, observations)
    if block_dates is None:
        block_dates = auto_block_dates(forecasts, [variable])
    if block_dates < 0:
        raise ValueError(f"block_dates must be >= 0 (0: the whole data), got {block_dates}")
    refuse = missing == "refuse"
    if block_dates and "time" in ensemble.dims:
        scores = _score_blocks(
            ensemble,
            truth,
            member_dim=member_dim,
            dims=dims,
            weights=weights,
            block=block_dates,
            refuse=refuse,
        )
    else:
        if truth is not None and "lead_time" in ensemble.dims and "lead_time" not in truth.dims:
            truth = at_valid_time(truth, ensemble)
        if refuse:
            _refuse_missing(ensemble, truth)
        if truth is None:
            scores = leave_one_out_scores(
                ensemble, member_dim=member_dim, dim=dims, weights=weights
            )
        else:
            scores = score_summary(
                truth, ensemble, member_dim=member_dim, dim=dims, weights=weights
            )
    scores = scores.compute()
    scores.attrs = {"verified_against": against, "averaged_over": [str(d) for d in dims]}
    return scores


def _sums(values: xr.DataArray, dims: list[Hashable], weights: xr.DataArray | None) -> xr.Dataset:
    """The weighted sum of ``values`` over ``dims`` and the sum of the weights of its valid points.

    Their ratio is :func:`~sciml.weather.metrics.alignment.reduce_over`'s mean (xarray's
    ``mean`` or ``weighted().mean``).
    """
    if weights is None:
        return xr.Dataset({"sum": values.sum(dims), "weight": values.count(dims)}).load()
    weights = _check_weights(values, dims, weights)  # as reduce_over checks them
    total = (values.fillna(0) * weights).sum(dims)
    return xr.Dataset({"sum": total, "weight": (values.notnull() * weights).sum(dims)}).load()


def _summary_sums(
    observations: xr.DataArray,
    forecasts: xr.DataArray,
    member_dim: str,
    dims: list[Hashable],
    weights: xr.DataArray | None,
) -> dict[str, xr.Dataset]:
    """Sums of the per-point fields whose means make :func:`score_summary`'s scores."""
    from sciml.weather.metrics.dispersion import _squared_mean_error

    valid = observations.notnull()
    error2 = _squared_mean_error(observations, forecasts, member_dim)
    variance = forecasts.astype(np.float64).var(member_dim, ddof=1)
    fields = {
        "crps": metrics.crps_ensemble(observations, forecasts, member_dim=member_dim, dim=[]),
        "crps_fair": metrics.crps_ensemble(
            observations, forecasts, member_dim=member_dim, dim=[], fair=True
        ),
        "spread": forecasts.where(valid).astype(np.float64).var(member_dim, ddof=1),
        "error2": error2,
        "variance": variance.where(error2.notnull()),
    }
    return {name: _sums(field, dims, weights) for name, field in fields.items()}


def _add(
    total: dict[str, xr.Dataset] | None, part: dict[str, xr.Dataset], dims: list[Hashable]
) -> dict[str, xr.Dataset]:
    """Sums of the blocks so far and of one more (joined along ``time`` when it is kept)."""
    if total is None:
        return part
    if "time" in dims:
        return {name: total[name] + part[name] for name in total}
    return {name: xr.concat([total[name], part[name]], "time") for name in total}


def _mean(sums: xr.Dataset) -> xr.DataArray:
    valid = sums["weight"] != 0
    return sums["sum"].where(valid) / sums["weight"].where(valid)


def _summary(sums: dict[str, xr.Dataset], members: int) -> xr.Dataset:
    """:func:`score_summary`'s scores from the sums of its fields."""
    error2 = _mean(sums["error2"])
    raw = (_mean(sums["variance"]) / error2) ** 0.5
    return xr.Dataset(
        {
            "crps": _mean(sums["crps"]),
            "crps_fair": _mean(sums["crps_fair"]),
            "spread": _mean(sums["spread"]) ** 0.5,
            "rmse": error2**0.5,
            "spread_skill": raw * np.sqrt((members + 1) / members),
            "spread_skill_raw": raw,
        }
    )


def _score_blocks(
    ensemble: xr.DataArray,
    truth: xr.DataArray | None,
    *,
    member_dim: str,
    dims: list[Hashable],
    weights: xr.DataArray | None,
    block: int,
    refuse: bool,
) -> xr.Dataset:
    """:func:`score_summary` (or :func:`leave_one_out_scores`) a block of start dates at a time.

    With ``refuse``, a block with missing values is refused as it is read.
    """
    members = ensemble.sizes[member_dim]
    if truth is None and members < 3:
        raise ValueError(f"leave-one-out scoring needs at least 3 members, got {members}")
    verifying = [None] if truth is not None else list(range(members))
    totals: list[dict[str, xr.Dataset] | None] = [None] * len(verifying)
    for part in date_blocks(ensemble.sizes["time"], block):
        chunk = ensemble.isel(time=part).load()
        if truth is not None:
            observed = truth
            if "lead_time" in chunk.dims and "lead_time" not in observed.dims:
                observed = at_valid_time(observed, chunk)
            elif "time" in observed.dims:
                observed = observed.sel(time=chunk["time"])
            pairs = [(observed.load(), chunk)]
            if refuse:
                _refuse_missing(chunk, pairs[0][0])
        else:
            if refuse:
                _refuse_missing(chunk, None)
            pairs = [
                (chunk.isel({member_dim: k}, drop=True), chunk.drop_isel({member_dim: k}))
                for k in verifying
            ]
        for index, (obs, ens) in enumerate(pairs):
            sums = _summary_sums(obs, ens, member_dim, dims, weights)
            totals[index] = _add(totals[index], sums, dims)
        del chunk, pairs
    if truth is not None:
        assert totals[0] is not None
        return _summary(totals[0], members)
    parts = [_summary(t, members - 1) for t in totals if t is not None]
    stacked = xr.concat(parts, dim="_verifying_member")
    pooled = stacked[["crps", "crps_fair"]].mean("_verifying_member")
    pooled["spread"] = np.sqrt((stacked["spread"] ** 2).mean("_verifying_member"))
    pooled["rmse"] = np.sqrt((stacked["rmse"] ** 2).mean("_verifying_member"))
    return pooled


def _refuse_missing(ensemble: xr.DataArray, truth: xr.DataArray | None) -> None:
    """Refuse missing (NaN) forecasts or verifying values, each named (:func:`refuse_missing`)."""
    arrays = {"forecasts": ensemble} | ({} if truth is None else {"verifying values": truth})
    for what, array in arrays.items():
        name = f"{array.name} ({what})"
        refuse_missing(
            array.to_dataset(name=name),
            [name],
            advice="fill them, or score the points present with --missing mask",
        )


def _verifying_values(
    forecasts: xr.Dataset, variable: str, observations: xr.Dataset | None
) -> tuple[xr.DataArray | None, str]:
    if observations is not None:
        if variable not in observations.data_vars:
            raise ValueError(
                f"no variable {variable!r} in the observations: {list(observations.data_vars)}"
            )
        return observations[variable], "the observations"
    if f"{variable}_truth" in forecasts.data_vars:
        return forecasts[f"{variable}_truth"], f"{variable}_truth"
    return None, "each member against the others"


def scores_table(scores: xr.Dataset) -> pd.DataFrame:
    """One row per combination of the kept dimensions (one row when none is kept)."""
    if scores.dims:
        return scores.to_dataframe().reset_index()
    return scores.to_pandas().to_frame().T
