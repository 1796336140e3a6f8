"""Fixtures for the weather tests: the real ERA5 ensemble sample."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

ERA5 = Path(__file__).resolve().parents[2] / "data" / "era5_ensemble_sample.nc"


@pytest.fixture(scope="session")
def era5() -> xr.Dataset:
    """The ERA5 10-member sample as it is stored (cfgrib names), loaded in memory."""
    with xr.open_dataset(ERA5) as ds:
        return ds.load()


def random_fields(
    rng: np.random.Generator,
    members: int = 7,
    shape: tuple[int, int, int] = (4, 6, 5),
    ties: bool = False,
    nans: bool = False,
    dtype: type[np.floating] = np.float64,
) -> tuple[xr.DataArray, xr.DataArray]:
    """Gaussian observations ``(time, lat, lon)`` and forecasts with ``member``, in K."""
    lat = np.linspace(-75, 75, shape[1])
    fc = rng.standard_normal((members, *shape))
    ob = rng.standard_normal(shape)
    if ties:
        fc, ob = np.round(fc * 2) / 2, np.round(ob * 2) / 2
    if nans:
        fc[rng.random(fc.shape) < 0.1] = np.nan
        ob[rng.random(ob.shape) < 0.1] = np.nan
    coords = {"lat": lat, "time": np.arange(shape[0])}
    fc = xr.DataArray(fc.astype(dtype), dims=("member", "time", "lat", "lon"), coords=coords)
    ob = xr.DataArray(ob.astype(dtype), dims=("time", "lat", "lon"), coords=coords)
    fc.attrs = {"units": "K"}
    ob.attrs = {"units": "K", "long_name": "temperature"}
    return ob, fc


def pairwise_crps(obs: np.ndarray, ens: np.ndarray, fair: bool = False) -> np.ndarray:
    """Direct O(M^2) energy form with NaN members dropped (independent reference)."""
    out = np.full(obs.shape, np.nan)
    for idx in np.ndindex(obs.shape):
        x = ens[idx][~np.isnan(ens[idx])]
        y = obs[idx]
        n = x.size
        if np.isnan(y) or n == 0 or (fair and n < 2):
            continue
        pair = np.abs(x[:, None] - x[None, :]).sum()
        out[idx] = np.abs(x - y).mean() - pair / (2 * n * (n - 1) if fair else 2 * n * n)
    return out
