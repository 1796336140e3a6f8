"""A classical estimator of CosmoFlow's parameters: summary statistics and a fitted regression.

An independent reference for how much each volume size tells about the
parameters, with no network and no training loop: each volume is reduced to
a few statistics a cosmologist would measure (:func:`summary_statistics`),
and a quadratic least-squares regression from those statistics to the
scaled parameters is fitted on the training volumes and scored on the test
volumes (:func:`reference_errors`). If this estimator improves with the
volume and a network does not, the network's training is what falls short.

The statistics, per volume of Poisson counts ``n`` (4 redshift channels):

* ``log(mean n)`` per channel (the Poisson mean ``nbar``),
* the log-normal standard deviation per channel, from the variance of the
  counts less their shot noise: ``s**2 = log(1 + (var - mean) / mean**2)``
  (``sigma`` times a power of ``growth``),
* the slope of a straight-line fit of the shot-noise-free power spectrum of
  today's channel against ``k`` (log-log, 5 logarithmic ``k`` bins), and the
  log power in the 3 lowest bins (``slope`` and the amplitude).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from sciml.datasets.store import check_store
from sciml.volumes.data import PARAMS
from sciml.volumes.layout import VOLUME_DIMS, dims_by_name

__all__ = ["reference_errors", "summary_statistics"]

#: Logarithmic k bins of the power spectrum fit.
K_BINS = 5
#: Ridge penalty of the regression, on standardised statistics.
RIDGE = 0.1


def _power_spectrum(overdensity: np.ndarray, shot_noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Log mean power and log mean ``k`` (cycles per voxel) in each non-empty bin."""
    size = overdensity.shape[0]
    power = np.abs(np.fft.rfftn(overdensity)) ** 2 / overdensity.size - shot_noise
    freqs = np.meshgrid(
        np.fft.fftfreq(size), np.fft.fftfreq(size), np.fft.rfftfreq(size), indexing="ij"
    )
    k = np.sqrt(sum(np.square(f) for f in freqs))
    bins = np.digitize(k, np.geomspace(1 / size, 0.5, K_BINS + 1))
    log_k, log_p = [], []
    for b in range(1, K_BINS + 1):
        inside = bins == b
        if inside.any():
            log_k.append(np.log(k[inside].mean()))
            log_p.append(np.log(max(float(power[inside].mean()), 1e-6)))
    return np.array(log_k), np.array(log_p)


def summary_statistics(counts: np.ndarray) -> np.ndarray:
    """The statistics of one volume of counts ``(4, D, H, W)`` (module docstring), 12 values.

    Raises:
        ValueError: If ``counts`` is not a ``(4, n, n, n)`` volume with ``n >= 4`` and
            counts in every channel.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 4 or counts.shape[0] != 4 or len(set(counts.shape[1:])) != 1:
        raise ValueError(f"expected counts of shape (4, n, n, n), got {counts.shape}")
    if counts.shape[1] < 4:
        raise ValueError(
            f"the volume edge must be >= 4 for the spectrum fit, got {counts.shape[1]}"
        )
    flat = counts.reshape(4, -1)
    mean, var = flat.mean(1), flat.var(1)
    if np.any(mean <= 0):
        raise ValueError("every channel needs counts > 0 somewhere (its mean is 0)")
    log_sd = 0.5 * np.log(np.log1p(np.maximum(var - mean, 1e-6) / mean**2))
    log_k, log_p = _power_spectrum(counts[3] / mean[3] - 1, 1 / mean[3])
    slope = np.polyfit(log_k, log_p, 1)[0]
    low = np.pad(log_p[:3], (0, max(3 - len(log_p), 0)), mode="edge")
    return np.concatenate([np.log(mean), log_sd, [slope], low])


def _read(path: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """Statistics ``(samples, 12)``, scaled parameters ``(samples, 4)`` and the volume edge.

    The store's chunks are checked first and its dims read by name, as in training.
    """
    check_store(path)
    with xr.open_zarr(path) as ds:
        if tuple(ds["param"].values) != PARAMS:
            raise ValueError(f"{path}: parameters {tuple(ds['param'].values)}, expected {PARAMS}")
        dims = dims_by_name(ds["volume"].dims, VOLUME_DIMS, what=f"'volume' in {path}")
        volume = ds["volume"].transpose(*dims.values())
        stats = np.stack([summary_statistics(volume[i].values) for i in range(volume.shape[0])])
        return stats, ds["params"].values.astype(np.float64), volume.shape[-1]


def _design(stats: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """A constant, the standardised statistics and their pairwise products."""
    z = (stats - mean) / std
    rows, cols = np.triu_indices(z.shape[1])
    return np.hstack([np.ones((len(z), 1)), z, z[:, rows] * z[:, cols]])


def reference_errors(train: Path | str, test: Path | str) -> dict[str, float]:
    """Mean absolute test error of the scaled parameters, fitted on ``train``, one per parameter.

    Args:
        train: A ``sciml cosmoflow data`` store to fit the regression on.
        test: A store of the same volume edge to score it on.

    Returns:
        ``{name: error}`` for each of :data:`~sciml.volumes.data.PARAMS` (predictions
        clipped to [-1, 1], the parameters' range).

    Raises:
        ValueError: If the stores hold other parameters or edges of another size.
    """
    x_train, y_train, edge = _read(Path(train))
    x_test, y_test, test_edge = _read(Path(test))
    if test_edge != edge:
        raise ValueError(f"{test} holds volumes of edge {test_edge}, {train} of edge {edge}")
    mean, std = x_train.mean(0), x_train.std(0)
    std[std == 0] = 1.0
    design = _design(x_train, mean, std)
    weights = np.linalg.solve(
        design.T @ design + RIDGE * np.eye(design.shape[1]), design.T @ y_train
    )
    pred = np.clip(_design(x_test, mean, std) @ weights, -1, 1)
    errors = np.abs(pred - y_test).mean(0)
    return dict(zip(PARAMS, map(float, errors), strict=True))
