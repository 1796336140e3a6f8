"""Fixtures for the weather tests: the real ERA5 ensemble sample."""

from pathlib import Path

import pytest
import xarray as xr

ERA5 = Path(__file__).resolve().parents[2] / "data" / "era5_ensemble_sample.nc"


@pytest.fixture(scope="session")
def era5() -> xr.Dataset:
    """The ERA5 10-member sample as it is stored (cfgrib names), loaded in memory."""
    with xr.open_dataset(ERA5) as ds:
        return ds.load()
