"""Dispersion diagnostics of an ensemble: ensemble-mean RMSE, spread, their ratio, ranks.

Same conventions as :mod:`.metrics` (``dim``, ``weights``, labelled outputs, Dask) and the
same input contract (:mod:`.alignment`); every function here is importable from
:mod:`.metrics` too. Moments are accumulated in float64.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import xarray as xr

from sciml.weather.metrics.alignment import (
    Dim,
    XArray,
    align_to,
    check_member_dim,
    check_pair,
    label,
    reduce_over,
    reduced_dims,
    single_member_chunk,
)

__all__ = ["ensemble_mean_rmse", "ensemble_spread", "rank_histogram", "spread_skill_ratio"]


def _float64(values: XArray) -> XArray:
    """Accumulate moments in float64 whatever the input precision (lazy under Dask)."""
    return values.astype(np.float64)


def _squared_mean_error(observations: XArray, forecasts: XArray, member_dim: str) -> XArray:
    forecasts = check_pair(observations, forecasts, member_dim)
    return (_float64(forecasts).mean(member_dim) - _float64(observations)) ** 2


def ensemble_mean_rmse(
    observations: XArray,
    forecasts: XArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Root-mean-square error of the ensemble mean, ``sqrt(mean_dim((xbar - y)^2))``, float64.

    With ``dim=[]`` this is the absolute error of the ensemble mean at each point.

    Examples:
        Two start dates whose ensemble means (1 and 2) miss by one each way:

        >>> import xarray as xr
        >>> forecasts = xr.DataArray([[0.0, 2.0], [1.0, 3.0]], dims=("time", "member"))
        >>> observations = xr.DataArray([2.0, 1.0], dims="time")
        >>> float(ensemble_mean_rmse(observations, forecasts))
        1.0
    """
    squared = _squared_mean_error(observations, forecasts, member_dim)
    rmse = reduce_over(squared, dim, weights) ** 0.5
    return label(
        rmse, forecasts, observations, name="rmse", what="RMSE of the ensemble mean", units=None
    )


def ensemble_spread(
    forecasts: XArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Ensemble spread ``sqrt(mean_dim(var_member(x)))``, unbiased (ddof=1) variance, float64.

    Needs at least two members.

    Examples:
        Members 0 and 2 (and 1 and 3): an unbiased variance of 2 at each date.

        >>> import xarray as xr
        >>> forecasts = xr.DataArray([[0.0, 2.0], [1.0, 3.0]], dims=("time", "member"))
        >>> round(float(ensemble_spread(forecasts)) ** 2, 12)
        2.0
    """
    check_member_dim(forecasts, member_dim, at_least=2)
    variance = _float64(forecasts).var(member_dim, ddof=1)
    spread = reduce_over(variance, dim, weights) ** 0.5
    return label(spread, forecasts, name="spread", what="ensemble spread", units=None)


def spread_skill_ratio(
    observations: XArray,
    forecasts: XArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
    corrected: bool = True,
) -> XArray:
    """Spread-skill ratio: ensemble spread over ensemble-mean RMSE (1 for a reliable ensemble).

    Both are averaged over the same points (those with a valid observation). With
    ``corrected=True`` the spread is multiplied by ``sqrt((M + 1) / M)`` (Fortin et al. 2014),
    which makes the ratio 1 for a finite ``M``-member ensemble that is statistically
    indistinguishable from the truth. Needs at least two members.

    Examples:
        A spread of ``sqrt(2)`` against an RMSE of 1; corrected by ``sqrt(3 / 2)`` for two
        members:

        >>> import xarray as xr
        >>> forecasts = xr.DataArray([[0.0, 2.0], [1.0, 3.0]], dims=("time", "member"))
        >>> observations = xr.DataArray([2.0, 1.0], dims="time")
        >>> round(float(spread_skill_ratio(observations, forecasts, corrected=False)) ** 2, 12)
        2.0
        >>> round(float(spread_skill_ratio(observations, forecasts)) ** 2, 12)
        3.0
    """
    check_member_dim(forecasts, member_dim, at_least=2)
    error2 = _squared_mean_error(observations, forecasts, member_dim)
    forecasts = align_to(observations, forecasts, ("observations", "forecasts"), skip=member_dim)
    variance = _float64(forecasts).var(member_dim, ddof=1).where(error2.notnull())
    ratio = (reduce_over(variance, dim, weights) / reduce_over(error2, dim, weights)) ** 0.5
    if corrected:
        members = forecasts.sizes[member_dim]
        ratio = ratio * np.sqrt((members + 1) / members)
    what = "spread-skill ratio" + (" ((M+1)/M corrected)" if corrected else "")
    return label(ratio, forecasts, observations, name="spread_skill", what=what, units="1")


def _obs_rank(observations: np.ndarray, forecasts: np.ndarray, *, seed: int) -> np.ndarray:
    below = (forecasts < observations[..., None]).sum(-1)
    ties = (forecasts == observations[..., None]).sum(-1)
    rng = np.random.default_rng(seed)
    rank = 1.0 + below + np.floor(rng.random(below.shape) * (ties + 1))
    invalid = np.isnan(observations) | np.isnan(forecasts).any(-1)
    return np.where(invalid, np.nan, rank)


def rank_histogram(
    observations: XArray,
    forecasts: XArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    seed: int = 0,
) -> XArray:
    """Rank histogram (Talagrand diagram): counts of the observation's rank among the members.

    The rank is ``1 + #(members < y)``, with ties between the observation and members broken
    uniformly at random (``seed``), as xskillscore does; ranks run from 1 to M + 1 along a new
    ``rank`` dimension. Points with a NaN observation or a NaN member are left out.

    Args:
        observations: Verifying values, with the forecasts' dimensions but ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        member_dim: Name of the member dimension.
        dim: Dimensions to count over (None: all).
        seed: Seed for breaking ties.

    Examples:
        Three members; the observations fall between the first two, between the last
        two and above all three (no ties):

        >>> import xarray as xr
        >>> forecasts = xr.DataArray([[0.0, 1, 2], [0, 1, 2], [5, 6, 7]], dims=("time", "member"))
        >>> observations = xr.DataArray([0.5, 1.5, 9.0], dims="time")
        >>> rank_histogram(observations, forecasts).values.tolist()
        [0, 1, 1, 1]
    """
    forecasts = check_pair(observations, forecasts, member_dim)
    ranks = xr.apply_ufunc(
        partial(_obs_rank, seed=seed),
        observations,
        single_member_chunk(forecasts, member_dim),
        input_core_dims=[[], [member_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
    )
    dims = reduced_dims(ranks, dim)
    members = forecasts.sizes[member_dim]
    bins = xr.DataArray(np.arange(1, members + 2), dims="rank", name="rank")
    bins = bins.assign_coords(rank=bins.values)
    bins["rank"].attrs = {"long_name": "rank of the observation among the members"}
    counts: XArray = (ranks == bins).sum(dims)
    return label(counts, observations, name="rank_histogram", what="rank histogram", units="count")
