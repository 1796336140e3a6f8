"""PIT histograms and the reliability index, on hand-made values."""

import numpy as np
import pytest
import xarray as xr

from sciml.weather.metrics.reliability import pit_histogram, reliability_index


def test_pit_histogram_and_reliability_index_by_hand() -> None:
    y = xr.DataArray([-3.0, 0.1, 3.0, 0.0, 1.0, np.nan], dims="x")
    mu = xr.DataArray([0.0, 0.0, 0.0, 0.0, 0.0, 0.0], dims="x")
    sigma = xr.DataArray([1.0, 1.0, 1.0, 1.0, 0.0, 1.0], dims="x")
    # PIT: 0.0013, 0.54, 0.9987, 0.5 (the upper bin), 1 (a point mass below y); NaN left out
    hist = pit_histogram(y, mu, sigma, bins=2)
    assert hist.dims == ("bin",) and hist.values.tolist() == [1, 4]
    assert float(reliability_index(hist)) == pytest.approx(abs(0.2 - 0.5) + abs(0.8 - 0.5))
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        pit_histogram(y, mu, -sigma, bins=2)
    with pytest.raises(ValueError, match="bins must be an integer"):
        pit_histogram(y, mu, sigma, bins=0)
    with pytest.raises(ValueError, match="'x' coordinates differ"):
        pit_histogram(
            y.assign_coords(x=np.arange(6)), mu.assign_coords(x=np.arange(1, 7)), 1.0, bins=2
        )
    with pytest.raises(ValueError, match="bin dimension"):
        reliability_index(y)
