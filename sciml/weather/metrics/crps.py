"""The CRPS family and :func:`latitude_weights`: labelled arrays in and out, lazy under Dask.

The public face of the metrics is :mod:`sciml.weather.metrics` (``from
sciml.weather.metrics import crps_ensemble, crps_gaussian``); the dispersion diagnostics
(RMSE, spread, spread-skill ratio, rank histogram) live in :mod:`.dispersion`.

Conventions (as in xskillscore):

* ``dim=None`` averages the per-point score over every dimension, ``dim=[]`` keeps every
  point, a name or list of names averages over those dimensions; ``weights`` (e.g.
  :func:`latitude_weights`) makes it ``score.weighted(weights).mean(dim)``.
* Nothing is computed until asked for when the inputs are Dask-backed (the member
  dimension is rechunked to a single chunk).
* Every output says what it is: a DataArray is named after the score (``crps``,
  ``spread_skill``, ...) and carries ``long_name`` and ``units`` (the data's units for
  CRPS, RMSE and spread; ``"1"`` for ratios, skill scores and the EFI; ``"count"`` for rank
  histograms). A Dataset keeps its variable names and each variable gets these attributes.

Inputs must line up, by label, or the call fails naming both sides; nothing is broadcast
silently (the contract, its checks and the output labelling are in :mod:`.alignment`).

NaN policy: a NaN observation gives a NaN score at that point; NaN members are dropped at
that point (as properscoring does); a point without a valid member (or with fewer than two
for the fair CRPS) is NaN. Averages over ``dim`` skip NaN points (weighted averages
renormalise by the weights of the valid points), as xskillscore does. The rank histogram
leaves out points with a NaN observation or any NaN member.

References: Gneiting & Raftery (2007) for the CRPS; Ferro (2014) for the fair CRPS; Allen
et al. (2023) for the threshold-weighted CRPS; Lalaurette (2003) for the Extreme Forecast
Index and Ashkboos et al. (2022, ENS-10) for the EFI-weighted CRPS; Fortin et al. (2014)
for the (M+1)/M spread-skill correction.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import xarray as xr

from sciml.weather.metrics import kernels
from sciml.weather.metrics.alignment import (
    Dim,
    XArray,
    align_to,
    check_member_dim,
    check_pair,
    check_parameter,
    check_units,
    check_xarray,
    is_lazy,
    label,
    reduce_over,
    single_member_chunk,
)

__all__ = [
    "crps_ensemble",
    "crps_ensemble_efi_weighted",
    "crps_gaussian",
    "crps_skill_score",
    "extreme_forecast_index",
    "latitude_weights",
    "twcrps_ensemble",
]


def _per_point_crps(observations: XArray, forecasts: XArray, member_dim: str, fair: bool) -> XArray:
    forecasts = check_pair(observations, forecasts, member_dim, at_least=2 if fair else 1)
    lazy = is_lazy(observations, forecasts)
    return xr.apply_ufunc(
        partial(kernels.crps_ensemble_array, fair=fair, threads=1 if lazy else None),
        observations,
        single_member_chunk(forecasts, member_dim),
        input_core_dims=[[], [member_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
    )


def crps_ensemble(
    observations: XArray,
    forecasts: XArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    fair: bool = False,
    weights: xr.DataArray | None = None,
) -> XArray:
    r"""Continuous ranked probability score of an ensemble (empirical distribution).

    Standard: :math:`\frac1M\sum_i|x_i-y| - \frac{1}{2M^2}\sum_{i,j}|x_i-x_j|`
    (equals properscoring / xskillscore); fair (``fair=True``, Ferro 2014): the second
    term divided by :math:`M(M-1)` instead of :math:`M^2`. Computed by sorting each
    point's members, O(M log M), in float64. One member gives the absolute error; the fair
    CRPS needs at least two.

    Args:
        observations: Verifying values, with the forecasts' dimensions but ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        member_dim: Name of the member dimension.
        dim: Dimensions to average over (None: all, []: none).
        fair: Fair CRPS instead of the standard one.
        weights: Weights for the average over ``dim`` (e.g. :func:`latitude_weights`).

    Returns:
        The (averaged) CRPS, float64, in the units of the data, named ``crps``
        (``crps_fair``).

    Examples:
        Two members at -1 and 1 and an observation at 0: the mean distance to the
        observation is 1, half the mean distance between members (0, 2, 2, 0) is 0.5.

        >>> import xarray as xr
        >>> obs = xr.DataArray(0.0)
        >>> ens = xr.DataArray([-1.0, 1.0], dims="member")
        >>> float(crps_ensemble(obs, ens))
        0.5
        >>> float(crps_ensemble(obs, ens, fair=True))  # between distinct members only
        0.0
    """
    score = reduce_over(_per_point_crps(observations, forecasts, member_dim, fair), dim, weights)
    what = "fair CRPS" if fair else "CRPS"
    name = "crps_fair" if fair else "crps"
    return label(score, forecasts, observations, name=name, what=what, units=None)


def crps_gaussian(
    observations: XArray,
    mu: XArray | float,
    sigma: XArray | float,
    *,
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Closed-form CRPS of a normal forecast N(mu, sigma^2) (Gneiting et al. 2005).

    ``sigma == 0`` gives ``|y - mu|``; a negative ``sigma`` is a ``ValueError`` (raised
    when the values are computed, for Dask inputs); a NaN parameter gives a NaN score.

    Args:
        observations: Verifying values.
        mu: Forecast mean: a number, or labelled values whose dimensions are among the
            observations' (on the same coordinates).
        sigma: Forecast standard deviation, like ``mu``.
        dim: Dimensions to average over (None: all, []: none).
        weights: Weights for the average over ``dim``.

    Examples:
        The standard normal at its mean: ``2 * pdf(0) - 1 / sqrt(pi)``.

        >>> import xarray as xr
        >>> round(float(crps_gaussian(xr.DataArray(0.0), 0.0, 1.0)), 6)
        0.233695
    """
    check_xarray("observations", observations)
    mu = check_parameter("mu", mu, observations)
    sigma = check_parameter("sigma", sigma, observations)
    check_units(observations=observations, mu=mu, sigma=sigma)
    score = xr.apply_ufunc(
        kernels.crps_gaussian_array,
        observations,
        mu,
        sigma,
        dask="parallelized",
        output_dtypes=[np.float64],
    )
    score = reduce_over(score, dim, weights)
    return label(score, observations, mu, name="crps", what="Gaussian CRPS", units=None)


def twcrps_ensemble(
    observations: XArray,
    forecasts: XArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
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
        observations: Verifying values, with the forecasts' dimensions but ``member_dim``.
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
    check_pair(observations, forecasts, member_dim, at_least=2 if fair else 1)

    def chain(values: XArray) -> XArray:
        return values.clip(min=a, max=b, keep_attrs=True) if v_func is None else v_func(values)

    score = crps_ensemble(
        chain(observations),
        chain(forecasts),
        member_dim=member_dim,
        dim=dim,
        fair=fair,
        weights=weights,
    )
    return label(
        score, forecasts, observations, name="twcrps", what="threshold-weighted CRPS", units=None
    )


def extreme_forecast_index(
    forecasts: XArray,
    climate: XArray,
    *,
    member_dim: str = "member",
    climate_dim: str = "climate",
) -> XArray:
    r"""Extreme Forecast Index of each point's ensemble against its model climate.

    :math:`\mathrm{EFI} = \frac{2}{\pi}\int_0^1 \frac{p - F_f(p)}{\sqrt{p(1-p)}}dp`
    (Lalaurette 2003), with :math:`F_f(p)` the fraction of members below the climate's
    p-quantile; evaluated exactly for the piecewise-linear climate quantile function (see
    :func:`sciml.weather.metrics.kernels.efi_array`). +1: all members above the whole climate; -1:
    all below; 0: forecast distributed as the climate.

    Args:
        forecasts: Ensemble with ``member_dim``.
        climate: Model-climate sample (e.g. reforecasts of many years for the same date and
            lead time) along ``climate_dim``; its other dimensions must be among the
            forecasts' (on the same coordinates) and are broadcast along the others.
        member_dim: Name of the member dimension.
        climate_dim: Name of the climate-sample dimension.
    """
    check_member_dim(forecasts, member_dim)
    check_xarray("climate", climate)
    if climate_dim not in climate.dims:
        raise ValueError(
            f"climate has no sample dimension {climate_dim!r}; its dimensions are "
            f"{tuple(climate.dims)} (pass climate_dim=...)"
        )
    extra = [d for d in climate.dims if d != climate_dim and d not in forecasts.dims]
    if extra:
        raise ValueError(
            f"climate has dimensions {extra} that the forecasts {tuple(forecasts.dims)} lack"
        )
    check_units(forecasts=forecasts, climate=climate)
    climate = align_to(forecasts, climate, ("forecasts", "climate"), skip=member_dim)
    efi = xr.apply_ufunc(
        kernels.efi_array,
        single_member_chunk(forecasts, member_dim),
        single_member_chunk(climate, climate_dim),
        input_core_dims=[[member_dim], [climate_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
    )
    return label(efi, forecasts, name="efi", what="extreme forecast index", units="1")


def crps_ensemble_efi_weighted(
    observations: XArray,
    forecasts: XArray,
    efi: XArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    fair: bool = False,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Extreme-event weighted CRPS of ENS-10 (Ashkboos et al. 2022): ``|EFI| * CRPS``.

    Each point's CRPS is weighted by the magnitude of its Extreme Forecast Index (see
    :func:`extreme_forecast_index`), so that forecasts of unusual weather count most.

    Args:
        observations: Verifying values, with the forecasts' dimensions but ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        efi: EFI of each point, with the observations' dimensions (or fewer).
        member_dim: Name of the member dimension.
        dim: Dimensions to average over (None: all, []: none).
        fair: Fair instead of standard CRPS.
        weights: Weights for the average over ``dim``.
    """
    crps = _per_point_crps(observations, forecasts, member_dim, fair)
    efi = check_parameter("efi", efi, observations)
    score = reduce_over(crps * abs(efi), dim, weights)
    return label(
        score, forecasts, observations, name="crps_efi", what="EFI-weighted CRPS", units=None
    )


def crps_skill_score(
    observations: XArray,
    forecasts: XArray,
    reference: XArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    fair: bool = False,
    weights: xr.DataArray | None = None,
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
    score = crps_ensemble(
        observations, forecasts, member_dim=member_dim, dim=dim, fair=fair, weights=weights
    )
    ref_dim = reference_member_dim or member_dim
    ref = crps_ensemble(
        observations, reference, member_dim=ref_dim, dim=dim, fair=fair, weights=weights
    )
    skill = 1.0 - score / ref
    what = "fair CRPS skill score" if fair else "CRPS skill score"
    return label(skill, forecasts, observations, name="crps_skill_score", what=what, units="1")


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
    if not np.all(np.abs(values) <= 90):  # also rejects NaN
        raise ValueError(
            f"latitudes must be finite and lie in [-90, 90] degrees, got "
            f"{np.nanmin(values)} .. {np.nanmax(values)} ({np.isnan(values).sum()} NaN)"
        )
    weights = np.clip(np.cos(np.deg2rad(lat.astype(np.float64))), 0.0, None)
    weights = weights / weights.mean()
    weights.attrs = {"long_name": "cos-latitude area weight (mean 1)", "units": "1"}
    return weights.rename("latitude_weight")
