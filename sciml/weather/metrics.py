"""Ensemble verification metrics: labelled arrays in, labelled arrays out, lazy under Dask.

Conventions (as in xskillscore):

* ``dim=None`` averages the per-point score over every dimension, ``dim=[]`` keeps every
  point, a name or list of names averages over those dimensions; ``weights`` (e.g.
  :func:`latitude_weights`) makes it ``score.weighted(weights).mean(dim)``.
* Attributes of the first argument are kept; nothing is computed until asked for when the
  inputs are Dask-backed (the member dimension is rechunked to a single chunk).

NaN policy: a NaN observation gives a NaN score at that point; NaN members are dropped at
that point (as properscoring does); a point without a valid member (or with fewer than two
for the fair CRPS) is NaN. Averages over ``dim`` skip NaN points (weighted averages
renormalise by the weights of the valid points). The rank histogram leaves out points with
a NaN observation or any NaN member.

References: Gneiting & Raftery (2007) for the CRPS; Ferro (2014) for the fair CRPS; Allen
et al. (2023) for the threshold-weighted CRPS; Lalaurette (2003) for the Extreme Forecast
Index and Ashkboos et al. (2022, ENS-10) for the EFI-weighted CRPS; Fortin et al. (2014)
for the (M+1)/M spread-skill correction.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import TypeVar

import dask
import numpy as np
import xarray as xr

from sciml.weather import kernels

XArray = TypeVar("XArray", xr.DataArray, xr.Dataset)
Dim = Hashable | Sequence[Hashable] | None

__all__ = [
    "crps_ensemble",
    "crps_ensemble_efi_weighted",
    "crps_gaussian",
    "crps_skill_score",
    "ensemble_mean_rmse",
    "ensemble_spread",
    "extreme_forecast_index",
    "latitude_weights",
    "rank_histogram",
    "spread_skill_ratio",
    "twcrps_ensemble",
]


def _is_lazy(*objs: object) -> bool:
    return any(dask.is_dask_collection(obj) for obj in objs)


def _check_member_dim(observations: object, forecasts: object, member_dim: str) -> None:
    for name, value in (("observations", observations), ("forecasts", forecasts)):
        if value is not None and not isinstance(value, xr.DataArray | xr.Dataset):
            raise TypeError(
                f"{name} must be an xarray DataArray or Dataset (labelled dimensions), "
                f"got {type(value).__name__}"
            )
    if member_dim not in forecasts.dims:  # type: ignore[attr-defined]
        raise ValueError(
            f"forecasts have no member dimension {member_dim!r}; their dimensions are "
            f"{tuple(forecasts.dims)} (pass member_dim=...)"  # type: ignore[attr-defined]
        )
    if observations is not None and member_dim in getattr(observations, "dims", ()):
        raise ValueError(
            f"observations must not have the member dimension {member_dim!r}; "
            f"their dimensions are {tuple(observations.dims)}"  # type: ignore[attr-defined]
        )


def _reduce(score: XArray, dim: Dim, weights: xr.DataArray | None) -> XArray:
    dims: list[Hashable] | None
    if dim is None:
        dims = None
    elif isinstance(dim, str) or not isinstance(dim, Sequence):
        dims = [dim]
    else:
        dims = list(dim)
        if not dims:
            return score
    if weights is None:
        return score.mean(dims, keep_attrs=True)
    return score.weighted(weights).mean(dims, keep_attrs=True)


def _single_member_chunk(forecasts: XArray, member_dim: str) -> XArray:
    return forecasts.chunk({member_dim: -1}) if _is_lazy(forecasts) else forecasts


def _per_point_crps(observations: XArray, forecasts: XArray, member_dim: str, fair: bool):
    _check_member_dim(observations, forecasts, member_dim)
    lazy = _is_lazy(observations, forecasts)
    return xr.apply_ufunc(
        partial(kernels.crps_ensemble_array, fair=fair, threads=1 if lazy else None),
        observations,
        _single_member_chunk(forecasts, member_dim),
        input_core_dims=[[], [member_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
        keep_attrs=True,
    )


def crps_ensemble(
    observations: XArray,
    forecasts: XArray,
    member_dim: str = "member",
    dim: Dim = None,
    fair: bool = False,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Continuous ranked probability score of an ensemble (empirical distribution).

    Standard: :math:`\\frac1M\\sum_i|x_i-y| - \\frac{1}{2M^2}\\sum_{i,j}|x_i-x_j|`
    (equals properscoring / xskillscore); fair (``fair=True``, Ferro 2014): the second
    term divided by :math:`M(M-1)` instead of :math:`M^2`. Computed by sorting each
    point's members, O(M log M), in float64.

    Args:
        observations: Verifying values, without ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        member_dim: Name of the member dimension.
        dim: Dimensions to average over (None: all, []: none).
        fair: Fair CRPS instead of the standard one.
        weights: Weights for the average over ``dim`` (e.g. :func:`latitude_weights`).

    Returns:
        The (averaged) CRPS, float64, in the units of the data.
    """
    return _reduce(_per_point_crps(observations, forecasts, member_dim, fair), dim, weights)


def crps_gaussian(
    observations: XArray,
    mu: XArray | float,
    sigma: XArray | float,
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Closed-form CRPS of a normal forecast N(mu, sigma^2) (Gneiting et al. 2005).

    ``sigma == 0`` gives ``|y - mu|``; a negative ``sigma`` gives NaN.

    Args:
        observations: Verifying values.
        mu: Forecast mean (broadcast against ``observations``).
        sigma: Forecast standard deviation.
        dim: Dimensions to average over (None: all, []: none).
        weights: Weights for the average over ``dim``.
    """
    score = xr.apply_ufunc(
        kernels.crps_gaussian_array,
        observations,
        mu,
        sigma,
        dask="parallelized",
        output_dtypes=[np.float64],
        keep_attrs=True,
    )
    return _reduce(score, dim, weights)


def twcrps_ensemble(
    observations: XArray,
    forecasts: XArray,
    member_dim: str = "member",
    dim: Dim = None,
    *,
    a: float = -np.inf,
    b: float = np.inf,
    v_func: Callable[[XArray], XArray] | None = None,
    fair: bool = False,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Threshold-weighted CRPS: the CRPS of chained values ``v(x)``, ``v(y)`` (Allen et al.).

    The default chaining function ``v(x) = min(max(x, a), b)`` restricts the score to
    outcomes in ``[a, b]`` (``a=t`` targets exceedances of the threshold ``t``), as in
    scoringrules' ``twcrps_ensemble``; any other ``v_func`` (non-decreasing, applied to
    labelled arrays) may be given instead.

    Args:
        observations: Verifying values, without ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        member_dim: Name of the member dimension.
        dim: Dimensions to average over (None: all, []: none).
        a: Lower bound of the default chaining function.
        b: Upper bound of the default chaining function.
        v_func: Chaining function, instead of clipping to ``[a, b]``.
        fair: Fair instead of standard estimator.
        weights: Weights for the average over ``dim``.
    """
    if v_func is None and not a < b:
        raise ValueError(f"twcrps_ensemble needs a < b, got a={a}, b={b}")

    def chain(values: XArray) -> XArray:
        return values.clip(min=a, max=b, keep_attrs=True) if v_func is None else v_func(values)

    return crps_ensemble(
        chain(observations), chain(forecasts), member_dim, dim, fair=fair, weights=weights
    )


def extreme_forecast_index(
    forecasts: XArray,
    climate: XArray,
    member_dim: str = "member",
    climate_dim: str = "climate",
) -> XArray:
    """Extreme Forecast Index of each point's ensemble against its model climate.

    :math:`\\mathrm{EFI} = \\frac{2}{\\pi}\\int_0^1 \\frac{p - F_f(p)}{\\sqrt{p(1-p)}}dp`
    (Lalaurette 2003), with :math:`F_f(p)` the fraction of members below the climate's
    p-quantile; evaluated exactly for the piecewise-linear climate quantile function (see
    :func:`sciml.weather.kernels.efi_array`). +1: all members above the whole climate; -1:
    all below; 0: forecast distributed as the climate.

    Args:
        forecasts: Ensemble with ``member_dim``.
        climate: Model-climate sample (e.g. reforecasts of many years for the same date and
            lead time) along ``climate_dim``; its other dimensions broadcast.
        member_dim: Name of the member dimension.
        climate_dim: Name of the climate-sample dimension.
    """
    _check_member_dim(None, forecasts, member_dim)
    if climate_dim not in climate.dims:
        raise ValueError(
            f"climate has no sample dimension {climate_dim!r}; its dimensions are "
            f"{tuple(climate.dims)} (pass climate_dim=...)"
        )
    return xr.apply_ufunc(
        kernels.efi_array,
        _single_member_chunk(forecasts, member_dim),
        _single_member_chunk(climate, climate_dim),
        input_core_dims=[[member_dim], [climate_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
        keep_attrs=True,
    )


def crps_ensemble_efi_weighted(
    observations: XArray,
    forecasts: XArray,
    efi: XArray,
    member_dim: str = "member",
    dim: Dim = None,
    fair: bool = False,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Extreme-event weighted CRPS of ENS-10 (Ashkboos et al. 2022): ``|EFI| * CRPS``.

    Each point's CRPS is weighted by the magnitude of its Extreme Forecast Index (see
    :func:`extreme_forecast_index`), so that forecasts of unusual weather count most.

    Args:
        observations: Verifying values, without ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        efi: EFI of each point (broadcast against the per-point CRPS).
        member_dim: Name of the member dimension.
        dim: Dimensions to average over (None: all, []: none).
        fair: Fair instead of standard CRPS.
        weights: Weights for the average over ``dim``.
    """
    score = _per_point_crps(observations, forecasts, member_dim, fair) * abs(efi)
    return _reduce(score, dim, weights)


def _float64(values: XArray) -> XArray:
    """Accumulate moments in float64 whatever the input precision (lazy under Dask)."""
    return values.astype(np.float64) if hasattr(values, "astype") else values


def _member_mean_error(observations: XArray, forecasts: XArray, member_dim: str) -> XArray:
    _check_member_dim(observations, forecasts, member_dim)
    return _float64(forecasts).mean(member_dim, keep_attrs=True) - _float64(observations)


def ensemble_mean_rmse(
    observations: XArray,
    forecasts: XArray,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Root-mean-square error of the ensemble mean, ``sqrt(mean_dim((xbar - y)^2))``, float64.

    With ``dim=[]`` this is the absolute error of the ensemble mean at each point.
    """
    squared = _member_mean_error(observations, forecasts, member_dim) ** 2
    return _reduce(squared, dim, weights) ** 0.5


def ensemble_spread(
    forecasts: XArray,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Ensemble spread ``sqrt(mean_dim(var_member(x)))``, unbiased (ddof=1) variance, float64."""
    _check_member_dim(None, forecasts, member_dim)
    variance = _float64(forecasts).var(member_dim, ddof=1, keep_attrs=True)
    return _reduce(variance, dim, weights) ** 0.5


def spread_skill_ratio(
    observations: XArray,
    forecasts: XArray,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
    *,
    corrected: bool = True,
) -> XArray:
    """Spread-skill ratio: ensemble spread over ensemble-mean RMSE (1 for a reliable ensemble).

    Both are averaged over the same points (those with a valid observation). With
    ``corrected=True`` the spread is multiplied by ``sqrt((M + 1) / M)`` (Fortin et al. 2014),
    which makes the ratio 1 for a finite ``M``-member ensemble that is statistically
    indistinguishable from the truth.
    """
    error2 = _member_mean_error(observations, forecasts, member_dim) ** 2
    variance = _float64(forecasts).var(member_dim, ddof=1).where(error2.notnull())
    ratio = (_reduce(variance, dim, weights) / _reduce(error2, dim, weights)) ** 0.5
    if corrected:
        members = forecasts.sizes[member_dim]
        ratio = ratio * np.sqrt((members + 1) / members)
    return ratio


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
    member_dim: str = "member",
    dim: Dim = None,
    *,
    seed: int = 0,
) -> XArray:
    """Rank histogram (Talagrand diagram): counts of the observation's rank among the members.

    The rank is ``1 + #(members < y)``, with ties between the observation and members broken
    uniformly at random (``seed``), as xskillscore does; ranks run from 1 to M + 1 along a new
    ``rank`` dimension. Points with a NaN observation or a NaN member are left out.

    Args:
        observations: Verifying values, without ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        member_dim: Name of the member dimension.
        dim: Dimensions to count over (None: all).
        seed: Seed for breaking ties.
    """
    _check_member_dim(observations, forecasts, member_dim)
    ranks = xr.apply_ufunc(
        partial(_obs_rank, seed=seed),
        observations,
        _single_member_chunk(forecasts, member_dim),
        input_core_dims=[[], [member_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
    )
    members = forecasts.sizes[member_dim]
    bins = xr.DataArray(np.arange(1, members + 2), dims="rank", name="rank")
    bins = bins.assign_coords(rank=bins.values)
    counts: XArray = (ranks == bins).sum(dim if dim is not None else list(ranks.dims))
    return counts.rename("rank_histogram") if isinstance(counts, xr.DataArray) else counts


def crps_skill_score(
    observations: XArray,
    forecasts: XArray,
    reference: XArray,
    member_dim: str = "member",
    dim: Dim = None,
    fair: bool = False,
    weights: xr.DataArray | None = None,
    *,
    reference_member_dim: str | None = None,
) -> XArray:
    """CRPS skill score ``1 - CRPS(forecasts) / CRPS(reference)`` after averaging over ``dim``.

    Args:
        observations: Verifying values.
        forecasts: Ensemble to judge, with ``member_dim``.
        reference: Reference ensemble (e.g. climatology or persistence), with
            ``reference_member_dim`` (default: ``member_dim``).
        member_dim: Member dimension of ``forecasts``.
        dim: Dimensions to average both CRPS over before the ratio.
        fair: Fair instead of standard CRPS for both.
        weights: Weights for the averages.
        reference_member_dim: Member dimension of ``reference``.
    """
    score = crps_ensemble(observations, forecasts, member_dim, dim, fair, weights)
    ref_dim = reference_member_dim or member_dim
    ref = crps_ensemble(observations, reference, ref_dim, dim, fair, weights)
    return 1.0 - score / ref


def latitude_weights(lat: xr.DataArray | xr.Dataset, *, lat_name: str = "lat") -> xr.DataArray:
    """Area weights ``cos(lat)`` normalised to mean 1 over the latitudes given.

    Args:
        lat: Latitudes in degrees, or an object with a ``lat_name`` coordinate.
        lat_name: Name of the latitude coordinate when ``lat`` is a dataset or field.
    """
    if isinstance(lat, xr.Dataset) or lat.name != lat_name:
        if lat_name not in lat.coords:
            raise ValueError(
                f"no latitude coordinate {lat_name!r}; coordinates are {list(lat.coords)}"
            )
        lat = lat[lat_name]
    if lat.ndim == 1 and lat.dims[0] not in lat.coords:
        lat = lat.assign_coords({lat.dims[0]: lat.values})
    values = np.asarray(lat.values, dtype=np.float64)
    if np.any(np.abs(values) > 90):
        raise ValueError(
            f"latitudes must lie in [-90, 90] degrees, got {values.min()} .. {values.max()}"
        )
    weights = np.clip(np.cos(np.deg2rad(lat.astype(np.float64))), 0.0, None)
    weights = weights / weights.mean()
    weights.attrs = {"long_name": "cos-latitude area weight (mean 1)", "units": "1"}
    return weights.rename("latitude_weight")
