r"""NumPy/Numba kernels behind :mod:`sciml.weather.metrics` (plain arrays, last axis = members).

The ensemble CRPS uses the sorted-ensemble identity

.. math::
    \sum_{i,j} |x_i - x_j| = 2 \sum_{i=1}^{M} (2i - M - 1)\, x_{(i)},

so that per point

.. math::
    \mathrm{CRPS} = \frac{1}{M} \sum_i |x_i - y| - \frac{1}{M^2} \sum_i (2i - M - 1) x_{(i)}

and the fair CRPS (Ferro 2014) has :math:`M(M-1)` in place of :math:`M^2`. The cost is one
sort per point, O(M log M), with memory linear in points x members. NumPy's SIMD sort
(x86-simd-sort) is much faster on short rows than a sort written in Numba or ``torch.sort``,
so the kernel sorts blocks of rows with NumPy and does the weighted sums in one fused Numba
pass, in float64 whatever the input precision; blocks run on a small thread pool (both steps
release the GIL). The sums use :math:`x_{(i)} - x_{(1)}` so that large offsets (geopotential)
do not cancel.

NaN policy (shared by every metric): a NaN observation gives a NaN score at that point; NaN
members are dropped at that point (the ensemble is the remaining members, as in
properscoring); a point with no valid member (or fewer than two for the fair CRPS) is NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from sciml.distributed.cores import usable_cores

#: Rows per block: keeps each block's sorted copy in cache-sized pieces.
BLOCK_ROWS = 8192


@numba.njit(nogil=True, cache=True)
def _crps_sorted_rows(
    obs: np.ndarray, sorted_ens: np.ndarray, fair: bool, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    rows, members = sorted_ens.shape
    for i in range(rows):
        y = np.float64(obs[i])
        m = members
        while m > 0 and np.isnan(sorted_ens[i, m - 1]):
            m -= 1
        if np.isnan(y) or m == 0 or (fair and m < 2):
            out[i] = np.nan
            continue
        x0 = np.float64(sorted_ens[i, 0])
        s_abs = 0.0
        s_rank = 0.0
        for j in range(m):
            x = np.float64(sorted_ens[i, j])
            s_abs += abs(x - y)
            s_rank += (2 * j - m + 1) * (x - x0)
        if fair:
            out[i] = s_abs / m - s_rank / (m * (m - 1.0))
        else:
            out[i] = s_abs / m - s_rank / (m * np.float64(m))


def _map_blocks(func: Callable[[int, int], None], rows: int, threads: int) -> None:
    starts = range(0, rows, BLOCK_ROWS)
    if threads <= 1 or rows <= BLOCK_ROWS:
        for start in starts:
            func(start, min(start + BLOCK_ROWS, rows))
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for future in [pool.submit(func, s, min(s + BLOCK_ROWS, rows)) for s in starts]:
            future.result()


def crps_ensemble_array(
    observations: np.ndarray,
    forecasts: np.ndarray,
    *,
    fair: bool = False,
    threads: int | None = None,
) -> np.ndarray:
    """Per-point ensemble CRPS of NumPy arrays (members on the last axis of ``forecasts``).

    Args:
        observations: Array broadcastable to ``forecasts.shape[:-1]``.
        forecasts: Ensemble, members on the last axis; float32 or float64.
        fair: Fair (unbiased for the infinite ensemble) CRPS instead of the standard one.
        threads: Worker threads (default: the CPUs available).

    Returns:
        float64 array of shape ``forecasts.shape[:-1]``.
    """
    forecasts = np.asarray(forecasts)
    if forecasts.ndim == 0:
        raise ValueError("forecasts must have a member axis (the last axis)")
    if forecasts.dtype not in (np.float32, np.float64):
        forecasts = forecasts.astype(np.float64)
    shape = forecasts.shape[:-1]
    members = forecasts.shape[-1]
    obs = np.ascontiguousarray(np.broadcast_to(observations, shape), dtype=np.float64).reshape(-1)
    ens = forecasts.reshape(-1, members)
    out = np.empty(obs.shape[0], dtype=np.float64)

    def block(start: int, stop: int) -> None:
        part = np.array(ens[start:stop], order="C", copy=True)
        part.sort(axis=-1)
        _crps_sorted_rows(obs[start:stop], part, fair, out[start:stop])

    _map_blocks(block, obs.shape[0], usable_cores() if threads is None else threads)
    return out.reshape(shape)


def crps_gaussian_array(observations: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Closed-form CRPS of a normal distribution N(mu, sigma^2) (Gneiting et al. 2005).

    ``sigma == 0`` gives the limit ``|y - mu|``; a NaN ``sigma`` gives NaN.

    Raises:
        ValueError: If any ``sigma`` is negative.
    """
    from scipy.special import ndtr

    y = np.asarray(observations, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    if np.any(sigma < 0):
        raise ValueError(f"sigma must be >= 0, got {np.sum(sigma < 0)} negative value(s)")
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (y - mu) / sigma
        pdf = np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi)
        crps = sigma * (z * (2 * ndtr(z) - 1) + 2 * pdf - 1 / np.sqrt(np.pi))
    return np.where(sigma == 0, np.abs(y - mu), crps)


@numba.njit(nogil=True, cache=True)
def _efi_rows(
    ens: np.ndarray,
    ens_row: np.ndarray,
    sorted_clim: np.ndarray,
    clim_row: np.ndarray,
    valid: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """EFI of ``ens[ens_row[i]]`` against ``sorted_clim[clim_row[i]]`` (its first ``valid``)."""
    members = ens.shape[1]
    for i in range(out.shape[0]):
        e = ens[ens_row[i]]
        c = clim_row[i]
        k = valid[c]
        if k < 2:
            out[i] = np.nan
            continue
        clim = sorted_clim[c, :k]
        total = 0.0
        m = 0
        for j in range(members):
            x = e[j]
            if np.isnan(x):
                continue
            m += 1
            lo = np.searchsorted(clim, x, side="left")
            hi = np.searchsorted(clim, x, side="right")
            if hi == 0:
                cdf = 0.0
            elif lo == k:
                cdf = 1.0
            elif lo < hi:  # x equals climate values lo..hi-1: middle of the flat step
                cdf = 0.5 * (lo + hi - 1) / (k - 1)
            else:  # strictly between sample lo-1 and lo
                a = clim[lo - 1]
                b = clim[lo]
                cdf = (lo - 1 + (x - a) / (b - a)) / (k - 1)
            total += np.arcsin(np.sqrt(cdf))
        out[i] = np.nan if m == 0 else 4.0 / np.pi * total / m - 1.0


def _rows_of(shape: tuple[int, ...], lead: tuple[int, ...]) -> np.ndarray:
    """For each point of ``lead`` (flat), the flat index of its point in ``shape`` (broadcast)."""
    flat = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    return np.broadcast_to(flat, lead).reshape(-1)


def efi_array(forecasts: np.ndarray, climate: np.ndarray) -> np.ndarray:
    r"""Extreme Forecast Index (Lalaurette 2003) of ensembles against a model climate.

    The EFI is :math:`\frac{2}{\pi}\int_0^1 \frac{p - F_f(p)}{\sqrt{p(1-p)}}\,dp`, with
    :math:`F_f(p)` the fraction of members below the climate's p-quantile. The climate
    quantile function is the linear interpolation of its sorted sample (NumPy's default
    quantile); :math:`F_f` is then a step function and the integral is exact:
    :math:`\mathrm{EFI} = \frac{4}{\pi M}\sum_m \arcsin\sqrt{F_c(x_m)} - 1`, with
    :math:`F_c` the climate CDF (a member equal to tied climate values takes the middle of
    the flat step). NaN members and NaN climate values are dropped; fewer than two climate
    values or no valid member give NaN.

    Each climate sample is sorted once, in its own shape, and shared by every forecast point
    it broadcasts to (a climate per grid point serves every start date): memory is the
    inputs' plus one sorted copy of the climate, and each member costs a binary search.

    Args:
        forecasts: Ensemble, members on the last axis.
        climate: Model-climate sample on the last axis, leading axes broadcastable.

    Returns:
        float64 EFI in [-1, 1]: +1 when every member exceeds the whole climate.
    """
    forecasts = np.asarray(forecasts, dtype=np.float64)
    climate = np.asarray(climate, dtype=np.float64)
    if forecasts.ndim == 0 or climate.ndim == 0:
        raise ValueError("forecasts and climate must have a sample axis (the last axis)")
    lead = np.broadcast_shapes(forecasts.shape[:-1], climate.shape[:-1])
    ens = np.ascontiguousarray(forecasts).reshape(-1, forecasts.shape[-1])
    clim = np.sort(climate, axis=-1).reshape(-1, climate.shape[-1])
    valid = np.count_nonzero(~np.isnan(clim), axis=-1)  # NaNs sort last
    out = np.empty(int(np.prod(lead)), dtype=np.float64)
    ens_row = _rows_of(forecasts.shape[:-1], lead)
    clim_row = _rows_of(climate.shape[:-1], lead)
    _efi_rows(ens, ens_row, clim, clim_row, valid, out)
    return out.reshape(lead)
