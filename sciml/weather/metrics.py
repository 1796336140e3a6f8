"""Ensemble verification metrics: labelled arrays in, labelled arrays out, lazy under Dask.

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

Inputs must line up; nothing is broadcast silently:

* observations have exactly the forecasts' dimensions without ``member_dim``
  (observations indexed by valid time are put on the forecasts' start time and lead time
  with :func:`sciml.weather.verify.at_valid_time`);
* coordinates shared by observations and forecasts hold the same labels: the same labels in
  another order are aligned by label, anything else (another grid, other dates, another
  level) is an error naming both sides; so are different ``units``;
* ``dim`` names dimensions of the score; ``weights`` are a DataArray, finite, non-negative,
  not all zero, whose dimensions are among the reduced ones, on the same coordinates
  (they are checked eagerly: weights are small, one value per latitude or so).

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

from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import TypeVar, cast

import dask
import numpy as np
import xarray as xr

from sciml.weather import kernels

XArray = TypeVar("XArray", xr.DataArray, xr.Dataset)
Labelled = TypeVar("Labelled", bound=xr.DataArray | xr.Dataset)
Param = TypeVar("Param")
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


def _check_xarray(name: str, value: object) -> None:
    if not isinstance(value, xr.DataArray | xr.Dataset):
        raise TypeError(
            f"{name} must be an xarray DataArray or Dataset (labelled dimensions), "
            f"got {type(value).__name__}"
        )


def _check_member_dim(forecasts: XArray, member_dim: str, *, at_least: int = 1) -> None:
    _check_xarray("forecasts", forecasts)
    if member_dim not in forecasts.dims:
        raise ValueError(
            f"forecasts have no member dimension {member_dim!r}; their dimensions are "
            f"{tuple(forecasts.dims)} (pass member_dim=...)"
        )
    members = forecasts.sizes[member_dim]
    if members < at_least:
        raise ValueError(
            f"this score needs at least {at_least} member(s) along {member_dim!r}, "
            f"the forecasts have {members}"
        )


def _describe_index(index: object) -> str:
    values = np.asarray(index)
    if values.size <= 4:
        return f"{values.tolist()}"
    return f"{values.size} labels {values[0]} .. {values[-1]}"


def _align_to(
    reference: xr.DataArray | xr.Dataset,
    other: Labelled,
    names: tuple[str, str],
    *,
    skip: Hashable = None,
) -> Labelled:
    """``other`` on the coordinates of ``reference``: the same labels in any order, or an error.

    Shared dimensions must have the same size and, where both are labelled, the same set
    of labels (``other`` is then reordered by label); shared non-index coordinates (a
    ``valid_time``, a scalar ``level``) must be equal.
    """
    ref_name, other_name = names
    for dim in set(reference.dims) & set(other.dims):
        if dim == skip:
            continue
        if dim in reference.indexes and dim in other.indexes:
            want, have = reference.indexes[dim], other.indexes[dim]
            if want.equals(have):
                continue
            if (
                want.is_unique
                and have.is_unique
                and len(want) == len(have)
                and want.isin(have).all()
            ):
                other = cast(Labelled, other.reindex({dim: want}))
                continue
            raise ValueError(
                f"{dim!r} coordinates differ: {ref_name} have {_describe_index(want)}, "
                f"{other_name} have {_describe_index(have)}; select the same points on both "
                "sides first (.sel, .reindex or .interp)"
            )
        if reference.sizes[dim] != other.sizes[dim]:
            raise ValueError(
                f"dimension {dim!r} has size {reference.sizes[dim]} in {ref_name} and "
                f"{other.sizes[dim]} in {other_name}"
            )
    for name in set(reference.coords) & set(other.coords):
        if name == skip or name in reference.dims or name in other.dims:
            continue
        want, have = reference.coords[name].variable, other.coords[name].variable
        if set(want.dims) != set(have.dims) or not want.transpose(*have.dims).equals(have):
            raise ValueError(
                f"coordinate {name!r} differs between {ref_name} ({_describe_index(want.values)}) "
                f"and {other_name} ({_describe_index(have.values)})"
            )
    return other


def _variables(value: object) -> list[tuple[Hashable, xr.DataArray]]:
    if isinstance(value, xr.Dataset):
        return list(value.data_vars.items())
    return [(None, value)] if isinstance(value, xr.DataArray) else []


def _check_units(**named: object) -> None:
    """Inputs of one variable must state the same ``units`` (where they state any)."""
    found: dict[Hashable, dict[str, str]] = {}
    for name, value in named.items():
        for key, variable in _variables(value):
            if "units" in variable.attrs:
                found.setdefault(key, {})[name] = str(variable.attrs["units"])
    for key, units in found.items():
        if len(set(units.values())) > 1:
            what = "" if key is None else f" of {key!r}"
            raise ValueError(f"units{what} differ: {units}; convert to the same units first")


def _check_pair(
    observations: XArray, forecasts: XArray, member_dim: str, *, at_least: int = 1
) -> XArray:
    """Check observations against an ensemble; return the forecasts aligned by label."""
    _check_xarray("observations", observations)
    _check_member_dim(forecasts, member_dim, at_least=at_least)
    if member_dim in observations.dims:
        raise ValueError(
            f"observations must not have the member dimension {member_dim!r}; "
            f"their dimensions are {tuple(observations.dims)}"
        )
    expected = set(forecasts.dims) - {member_dim}
    if set(observations.dims) != expected:
        missing = sorted(map(str, expected - set(observations.dims)))
        extra = sorted(map(str, set(observations.dims) - expected))
        hint = (
            " (observations indexed by valid time: sciml.weather.verify.at_valid_time)"
            if "lead_time" in missing
            else ""
        )
        raise ValueError(
            f"observations have dimensions {tuple(observations.dims)}, forecasts "
            f"{tuple(forecasts.dims)}: expected the forecasts' dimensions without "
            f"{member_dim!r} (missing {missing}, extra {extra}); nothing is broadcast{hint}"
        )
    _check_units(observations=observations, forecasts=forecasts)
    return _align_to(observations, forecasts, ("observations", "forecasts"), skip=member_dim)


def _reduced_dims(score: XArray, dim: Dim) -> list[Hashable]:
    if dim is None:
        return list(score.dims)
    dims = [dim] if isinstance(dim, str) or not isinstance(dim, Sequence) else list(dim)
    missing = [name for name in dims if name not in score.dims]
    if missing:
        raise ValueError(
            f"dim {missing} not among the score's dimensions {tuple(score.dims)} "
            "(the member dimension is reduced by the score itself)"
        )
    return dims


def _check_weights(score: XArray, dims: list[Hashable], weights: object) -> xr.DataArray:
    if not isinstance(weights, xr.DataArray):
        raise TypeError(f"weights must be an xarray DataArray, got {type(weights).__name__}")
    outside = [name for name in weights.dims if name not in dims]
    if outside:
        raise ValueError(
            f"weights have dimensions {list(weights.dims)}, but only {dims} are averaged "
            f"over: {outside} would not be reduced (weights apply to the averaged dimensions)"
        )
    weights = _align_to(score, weights, ("the score", "weights"))
    values = weights.values  # weights are small (e.g. one per latitude)
    if not np.isfinite(values).all() or (values < 0).any():
        raise ValueError("weights must be finite and non-negative (got NaN, inf or < 0)")
    if not values.any():
        raise ValueError("weights are all zero")
    return weights


def _reduce(score: XArray, dim: Dim, weights: xr.DataArray | None) -> XArray:
    dims = _reduced_dims(score, dim)
    if weights is not None:
        weights = _check_weights(score, dims, weights)
    if not dims:
        return score
    if weights is None:
        return score.mean(dims)
    return score.weighted(weights).mean(dims)


def _label(result: XArray, *sources: object, name: str, what: str, units: str | None) -> XArray:
    """Name ``result`` and set its ``long_name`` and ``units`` (None: the data's units).

    The variable described and the data's units are taken from the first of ``sources``
    (labelled inputs, matched by variable name for Datasets) that states them.
    """

    def attrs(key: Hashable) -> dict[str, str]:
        variables = [
            variable
            for source in sources
            for var_key, variable in _variables(source)
            if var_key == key or var_key is None or key is None
        ]
        described = next(
            (
                str(v.attrs.get("long_name") or v.name)
                for v in variables
                if v.attrs.get("long_name") or v.name
            ),
            "the data",
        )
        out = {"long_name": f"{what} of {described}"}
        unit = units or next((str(v.attrs["units"]) for v in variables if "units" in v.attrs), None)
        return out if unit is None else {**out, "units": unit}

    if isinstance(result, xr.Dataset):
        result = result.copy()
        for key in result.data_vars:
            result[key].attrs = attrs(key)
        result.attrs = {}
        return result
    result = result.rename(name)
    result.attrs = attrs(None)
    return result


def _single_member_chunk(forecasts: XArray, member_dim: str) -> XArray:
    return forecasts.chunk({member_dim: -1}) if _is_lazy(forecasts) else forecasts


def _per_point_crps(observations: XArray, forecasts: XArray, member_dim: str, fair: bool) -> XArray:
    forecasts = _check_pair(observations, forecasts, member_dim, at_least=2 if fair else 1)
    lazy = _is_lazy(observations, forecasts)
    return xr.apply_ufunc(
        partial(kernels.crps_ensemble_array, fair=fair, threads=1 if lazy else None),
        observations,
        _single_member_chunk(forecasts, member_dim),
        input_core_dims=[[], [member_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
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
    """
    score = _reduce(_per_point_crps(observations, forecasts, member_dim, fair), dim, weights)
    what = "fair CRPS" if fair else "CRPS"
    name = "crps_fair" if fair else "crps"
    return _label(score, forecasts, observations, name=name, what=what, units=None)


def _check_gaussian_parameter(name: str, value: Param, observations: XArray) -> Param:
    if isinstance(value, xr.DataArray | xr.Dataset):
        extra = [d for d in value.dims if d not in observations.dims]
        if extra:
            raise ValueError(
                f"{name} has dimensions {extra} that the observations {tuple(observations.dims)} "
                "lack; nothing is broadcast"
            )
        return cast(Param, _align_to(observations, value, ("observations", name)))
    if not np.isscalar(value) or isinstance(value, str | bytes):
        raise TypeError(
            f"{name} must be a number or an xarray DataArray/Dataset, got {type(value).__name__}"
        )
    return value


def crps_gaussian(
    observations: XArray,
    mu: XArray | float,
    sigma: XArray | float,
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
    """
    _check_xarray("observations", observations)
    mu = _check_gaussian_parameter("mu", mu, observations)
    sigma = _check_gaussian_parameter("sigma", sigma, observations)
    _check_units(observations=observations, mu=mu, sigma=sigma)
    score = xr.apply_ufunc(
        kernels.crps_gaussian_array,
        observations,
        mu,
        sigma,
        dask="parallelized",
        output_dtypes=[np.float64],
    )
    score = _reduce(score, dim, weights)
    return _label(score, observations, mu, name="crps", what="Gaussian CRPS", units=None)


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
    _check_pair(observations, forecasts, member_dim, at_least=2 if fair else 1)

    def chain(values: XArray) -> XArray:
        return values.clip(min=a, max=b, keep_attrs=True) if v_func is None else v_func(values)

    score = crps_ensemble(
        chain(observations), chain(forecasts), member_dim, dim, fair=fair, weights=weights
    )
    return _label(
        score, forecasts, observations, name="twcrps", what="threshold-weighted CRPS", units=None
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
            lead time) along ``climate_dim``; its other dimensions must be among the
            forecasts' (on the same coordinates) and are broadcast along the others.
        member_dim: Name of the member dimension.
        climate_dim: Name of the climate-sample dimension.
    """
    _check_member_dim(forecasts, member_dim)
    _check_xarray("climate", climate)
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
    _check_units(forecasts=forecasts, climate=climate)
    climate = _align_to(forecasts, climate, ("forecasts", "climate"), skip=member_dim)
    efi = xr.apply_ufunc(
        kernels.efi_array,
        _single_member_chunk(forecasts, member_dim),
        _single_member_chunk(climate, climate_dim),
        input_core_dims=[[member_dim], [climate_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
    )
    return _label(efi, forecasts, name="efi", what="extreme forecast index", units="1")


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
        observations: Verifying values, with the forecasts' dimensions but ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        efi: EFI of each point, with the observations' dimensions (or fewer).
        member_dim: Name of the member dimension.
        dim: Dimensions to average over (None: all, []: none).
        fair: Fair instead of standard CRPS.
        weights: Weights for the average over ``dim``.
    """
    crps = _per_point_crps(observations, forecasts, member_dim, fair)
    efi = _check_gaussian_parameter("efi", efi, observations)
    score = _reduce(crps * abs(efi), dim, weights)
    return _label(
        score, forecasts, observations, name="crps_efi", what="EFI-weighted CRPS", units=None
    )


def _float64(values: XArray) -> XArray:
    """Accumulate moments in float64 whatever the input precision (lazy under Dask)."""
    return values.astype(np.float64)


def _squared_mean_error(observations: XArray, forecasts: XArray, member_dim: str) -> XArray:
    forecasts = _check_pair(observations, forecasts, member_dim)
    return (_float64(forecasts).mean(member_dim) - _float64(observations)) ** 2


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
    squared = _squared_mean_error(observations, forecasts, member_dim)
    rmse = _reduce(squared, dim, weights) ** 0.5
    return _label(
        rmse, forecasts, observations, name="rmse", what="RMSE of the ensemble mean", units=None
    )


def ensemble_spread(
    forecasts: XArray,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> XArray:
    """Ensemble spread ``sqrt(mean_dim(var_member(x)))``, unbiased (ddof=1) variance, float64.

    Needs at least two members.
    """
    _check_member_dim(forecasts, member_dim, at_least=2)
    variance = _float64(forecasts).var(member_dim, ddof=1)
    spread = _reduce(variance, dim, weights) ** 0.5
    return _label(spread, forecasts, name="spread", what="ensemble spread", units=None)


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
    indistinguishable from the truth. Needs at least two members.
    """
    _check_member_dim(forecasts, member_dim, at_least=2)
    error2 = _squared_mean_error(observations, forecasts, member_dim)
    forecasts = _align_to(observations, forecasts, ("observations", "forecasts"), skip=member_dim)
    variance = _float64(forecasts).var(member_dim, ddof=1).where(error2.notnull())
    ratio = (_reduce(variance, dim, weights) / _reduce(error2, dim, weights)) ** 0.5
    if corrected:
        members = forecasts.sizes[member_dim]
        ratio = ratio * np.sqrt((members + 1) / members)
    what = "spread-skill ratio" + (" ((M+1)/M corrected)" if corrected else "")
    return _label(ratio, forecasts, observations, name="spread_skill", what=what, units="1")


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
        observations: Verifying values, with the forecasts' dimensions but ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        member_dim: Name of the member dimension.
        dim: Dimensions to count over (None: all).
        seed: Seed for breaking ties.
    """
    forecasts = _check_pair(observations, forecasts, member_dim)
    ranks = xr.apply_ufunc(
        partial(_obs_rank, seed=seed),
        observations,
        _single_member_chunk(forecasts, member_dim),
        input_core_dims=[[], [member_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
    )
    dims = _reduced_dims(ranks, dim)
    members = forecasts.sizes[member_dim]
    bins = xr.DataArray(np.arange(1, members + 2), dims="rank", name="rank")
    bins = bins.assign_coords(rank=bins.values)
    bins["rank"].attrs = {"long_name": "rank of the observation among the members"}
    counts: XArray = (ranks == bins).sum(dims)
    return _label(counts, observations, name="rank_histogram", what="rank histogram", units="count")


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
    skill = 1.0 - score / ref
    what = "fair CRPS skill score" if fair else "CRPS skill score"
    return _label(skill, forecasts, observations, name="crps_skill_score", what=what, units="1")


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
