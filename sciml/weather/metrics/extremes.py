"""Which forecasts concern extreme weather: the EFI weights and the most extreme events.

Two extreme-event views of a score table (:mod:`sciml.weather.postprocess.evaluate`), both defined
by the data, never by the forecast being judged, so that every model is weighted alike:

* the **EFI weight** of ENS-10 (Ashkboos et al. 2022, NeurIPS Datasets and Benchmarks): the
  magnitude of the Extreme Forecast Index (Lalaurette 2003;
  :func:`sciml.weather.metrics.extreme_forecast_index`) of the raw full ensemble against a
  model climate; the EFI-weighted CRPS is ``mean(|EFI| * CRPS)`` over the points;
* the **most extreme events**: the points where the truth's anomaly (against the truth's
  climatology) is largest in magnitude, the top ``fraction`` of them (5 % by default).

Both climates are taken per lead time and grid point (and level): the model climate pools
the members of every start date of ``climate`` (each lead time's forecasts form their own
climate, as ECMWF's M-climate does), the truth's climatology is the mean of the truth over
those start dates. ``climate`` is the training data when the caller has it (the test dates
then play no part in defining what is extreme); without it the test data's own start dates
serve, which a small test set makes a coarse climate (stated in the score table's caller).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import xarray as xr

from sciml.weather.metrics import extreme_forecast_index
from sciml.weather.metrics.alignment import align_to

__all__ = ["check_fraction", "efi_weight", "extreme_events", "model_climate"]


def _check_same_dims(data: xr.DataArray, climate: xr.DataArray, *names: str) -> None:
    """The climate must have the data's dimensions (nothing broadcast silently)."""
    if set(data.dims) != set(climate.dims):
        raise ValueError(
            f"the {names[1]} ({climate.name}) must have the dimensions of the {names[0]}, "
            f"{data.dims}, got {climate.dims}"
        )


def check_fraction(fraction: float) -> None:
    """The share of extreme events must lie in (0, 1].

    Raises:
        ValueError: It does not.
    """
    if isinstance(fraction, bool) or not 0 < fraction <= 1:
        raise ValueError(f"the extreme fraction must lie in (0, 1], got {fraction!r}")


def model_climate(
    forecasts: xr.DataArray, *, member_dim: str = "member", time_dim: str = "time"
) -> xr.DataArray:
    """The members of every start date as one climate sample per remaining point.

    Args:
        forecasts: Ensemble with ``member_dim`` and ``time_dim`` (start dates).
        member_dim: Name of the member dimension.
        time_dim: Name of the start-date dimension.

    Returns:
        The values with ``time_dim`` and ``member_dim`` stacked into ``climate``, without
        the coordinates along them (e.g. a ``valid_time``).

    Raises:
        ValueError: A dimension is missing.
    """
    missing = [d for d in (member_dim, time_dim) if d not in forecasts.dims]
    if missing:
        raise ValueError(
            f"the model climate needs dimensions {missing}; {forecasts.name} has {forecasts.dims}"
        )
    dated = [name for name, c in forecasts.coords.items() if {time_dim, member_dim} & set(c.dims)]
    stacked = forecasts.drop_vars(dated).stack(climate=(time_dim, member_dim))
    return stacked.drop_vars(["climate", time_dim, member_dim], errors="ignore")


def efi_weight(
    forecasts: xr.DataArray,
    climate: xr.DataArray,
    *,
    member_dim: str = "member",
    time_dim: str = "time",
) -> xr.DataArray:
    """``|EFI|`` of each point's ensemble against the model climate of ``climate``.

    Args:
        forecasts: The raw full ensemble to weight by, with ``member_dim`` and ``time_dim``.
        climate: The ensemble whose start dates make the model climate (:func:`model_climate`),
            on the same lead times and grid as ``forecasts`` (checked by label).
        member_dim: Name of the member dimension.
        time_dim: Name of the start-date dimension.

    Returns:
        The EFI's magnitude in [0, 1], with ``forecasts``' dimensions but ``member_dim``.
    """
    _check_same_dims(forecasts, climate, "forecasts", "climate")
    sample = model_climate(climate, member_dim=member_dim, time_dim=time_dim)
    efi = extreme_forecast_index(forecasts, sample, member_dim=member_dim)
    return abs(efi).rename("efi_weight")


def extreme_events(
    truth: xr.DataArray,
    climate_truth: xr.DataArray,
    *,
    dim: Sequence[Hashable],
    fraction: float = 0.05,
    time_dim: str = "time",
) -> xr.DataArray:
    """The points whose truth departs most from its climatology: the top ``fraction`` of ``dim``.

    The anomaly is ``truth - mean_time(climate_truth)`` per remaining point (lead time, grid
    point, level); the points kept are those with ``|anomaly|`` at or above its
    ``1 - fraction`` quantile over ``dim`` (ties at the threshold are all kept).

    Args:
        truth: Verifying values.
        climate_truth: Verifying values of the climate's start dates (``time_dim``), on the
            same other coordinates as ``truth`` (checked by label).
        dim: Dimensions over which the most extreme points are chosen (start dates and the
            grid); the others (lead time, level) each get their own threshold.
        fraction: Share of the points to keep, in (0, 1].
        time_dim: Name of the start-date dimension.

    Returns:
        Boolean mask with ``truth``'s dimensions.

    Raises:
        ValueError: ``fraction`` outside (0, 1], or a dimension missing.
    """
    check_fraction(fraction)
    missing = [d for d in dim if d not in truth.dims]
    if time_dim not in climate_truth.dims or missing:
        raise ValueError(
            f"extreme events need {time_dim!r} in the climate truth {climate_truth.dims} and "
            f"{list(dim)} in the truth {truth.dims}"
        )
    _check_same_dims(truth, climate_truth, "truth", "climate truth")
    climatology = climate_truth.astype(np.float64).mean(time_dim)
    climatology = align_to(truth, climatology, ("truth", "climate truth"))
    anomaly = abs(truth.astype(np.float64) - climatology)
    threshold = anomaly.quantile(1 - fraction, dim=list(dim)).drop_vars("quantile")
    return (anomaly >= threshold).rename("extreme")
