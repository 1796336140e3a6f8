"""Reliability of a Gaussian forecast: the PIT histogram, and how far a histogram is from flat.

The probability integral transform (PIT) of a forecast distribution F is ``F(y)`` at the
verifying value; for a calibrated forecast it is uniform on [0, 1] (Gneiting et al. 2007).
Its histogram over ``B`` equal bins is the continuous counterpart of an M-member
ensemble's rank histogram (:func:`sciml.weather.metrics.rank_histogram`) with
``B = M + 1``. :func:`reliability_index` sums the absolute departures of the relative
frequencies from ``1 / B`` (Delle Monache et al. 2006): 0 for a flat histogram, at most
``2 (1 - 1/B)``; sampling noise alone makes it positive, more so for few points and many
bins, so compare it between forecasts with the same bins and points.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy.special import ndtr

from sciml.weather.metrics.alignment import Dim, check_parameter, check_xarray, label, reduced_dims

__all__ = ["pit", "pit_histogram", "reliability_index"]


def _pit_values(y: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    if np.any(sigma < 0):
        raise ValueError(f"sigma must be >= 0, got a minimum of {np.nanmin(sigma)}")
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (y - mu) / sigma
    step = np.where(y > mu, 1.0, np.where(y < mu, 0.0, 0.5))  # sigma == 0: a point mass
    return np.where(sigma > 0, ndtr(z), np.where(np.isnan(y - mu), np.nan, step))


def pit(
    observations: xr.DataArray, mu: xr.DataArray | float, sigma: xr.DataArray | float
) -> xr.DataArray:
    """``Phi((y - mu) / sigma)`` at every point (a zero ``sigma``: 0, 1/2 or 1; NaN stays NaN).

    Args:
        observations: Verifying values.
        mu: Forecast mean, on the observations' coordinates (no extra dimension).
        sigma: Forecast standard deviation, like ``mu``.

    Raises:
        ValueError: A negative ``sigma``, or ``mu``/``sigma`` not on the observations' grid.
    """
    check_xarray("observations", observations)
    mu = check_parameter("mu", mu, observations)
    sigma = check_parameter("sigma", sigma, observations)
    values = xr.apply_ufunc(
        _pit_values,
        observations.astype(np.float64),
        mu,
        sigma,
        dask="parallelized",
        output_dtypes=[np.float64],
    )
    return label(values, observations, name="pit", what="probability integral transform", units="1")


def pit_histogram(
    observations: xr.DataArray,
    mu: xr.DataArray | float,
    sigma: xr.DataArray | float,
    *,
    bins: int,
    dim: Dim = None,
) -> xr.DataArray:
    """Counts of the PIT in ``bins`` equal bins of [0, 1], along a new ``bin`` dimension.

    Bin ``b`` (1 to ``bins``) holds PIT values in ``[(b-1)/bins, b/bins)``, the last one
    also 1. Points with a NaN observation or parameter are left out.

    Args:
        observations: Verifying values.
        mu: Forecast mean, on the observations' coordinates.
        sigma: Forecast standard deviation, like ``mu``.
        bins: Number of bins (``M + 1`` to compare with an M-member rank histogram).
        dim: Dimensions to count over (None: all).
    """
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    values = pit(observations, mu, sigma)
    index = np.minimum(np.floor(values * bins), bins - 1) + 1
    edges = xr.DataArray(np.arange(1, bins + 1), dims="bin", name="bin")
    edges = edges.assign_coords(bin=edges.values)
    edges["bin"].attrs = {"long_name": f"PIT bin (of {bins} equal bins of [0, 1])"}
    counts = (index == edges).sum(reduced_dims(values, dim))
    return label(counts, observations, name="pit_histogram", what="PIT histogram", units="count")


def reliability_index(histogram: xr.DataArray, *, dim: str | None = None) -> xr.DataArray:
    """``sum_b |f_b - 1/B|`` of a rank or PIT histogram (0: flat), f the relative frequencies.

    Args:
        histogram: Counts along ``dim``.
        dim: The histogram's bin dimension (default: ``rank`` or ``bin``, whichever it has).

    Raises:
        ValueError: No such dimension, or a histogram without counts.
    """
    if dim is None:
        dim = next((d for d in ("rank", "bin") if d in histogram.dims), None)
    if dim is None or dim not in histogram.dims:
        raise ValueError(f"histogram needs a bin dimension ('rank' or 'bin'), got {histogram.dims}")
    total = histogram.sum(dim)
    if bool((total == 0).any()):
        raise ValueError("a histogram without counts has no reliability index")
    freq = histogram / total
    index = abs(freq - 1 / histogram.sizes[dim]).sum(dim)
    return label(
        index, histogram, name="reliability", what="reliability index (0: flat)", units="1"
    )
