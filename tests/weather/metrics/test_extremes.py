"""Extreme events by the truth's anomaly and the EFI weights, on hand-made values."""

import numpy as np
import pytest
import xarray as xr

from sciml.weather.metrics.extremes import efi_weight, extreme_events


def test_extreme_events_and_efi_weights_by_hand() -> None:
    dims = ("time", "lat")
    climate_truth = xr.DataArray([[0.0, 10.0], [2.0, 30.0]], dims=dims)  # means 1 and 20
    truth = xr.DataArray([[1.5, 20.0], [-2.0, 21.0], [4.0, 19.0], [1.0, 60.0]], dims=dims)
    # |anomalies|: 0.5, 0, 3, 1, 3, 1, 0, 40 -> the top quarter (>= 3): three points (a tie)
    mask = extreme_events(truth, climate_truth, dim=["time", "lat"], fraction=0.25)
    assert mask.values.tolist() == [[False, False], [True, False], [True, False], [False, True]]
    # per-lat thresholds when lat is kept: the top half of each column
    column = extreme_events(truth, climate_truth, dim=["time"], fraction=0.5)
    assert column.values[:, 0].tolist() == [False, True, True, False]
    # EFI: every member above the whole climate is +1, every member below -1, |.| = 1
    climate = xr.DataArray(np.arange(6.0).reshape(2, 3, 1), dims=("time", "member", "lat"))
    high = xr.DataArray(np.full((1, 3, 1), 9.0), dims=("time", "member", "lat"))
    assert efi_weight(high, climate).item() == 1.0
    assert efi_weight(-high, climate).item() == 1.0
    # the climate's own median everywhere: F_c = 1/2, EFI = 4/pi * asin(sqrt(1/2)) - 1 = 0
    assert efi_weight(high * 0 + 2.5, climate).item() == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(ValueError, match="must have the dimensions of the forecasts"):
        efi_weight(high, climate.isel(lat=0))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t, c: extreme_events(t, c, dim=["time"], fraction=0.0), r"fraction must lie in"),
        (lambda t, c: extreme_events(t, c, dim=["time"], fraction=1.5), r"fraction must lie in"),
        (lambda t, c: extreme_events(t, c, dim=["lon"]), r"'time'.*\['lon'\]"),
        (lambda t, c: extreme_events(t, c.isel(lat=0), dim=["time"]), "dimensions of the truth"),
        (lambda t, c: extreme_events(t, c.assign_coords(lat=[5, 6]), dim=["time"]), "'lat' coord"),
    ],
)
def test_extreme_events_reject_bad_inputs(call: object, message: str) -> None:
    truth = xr.DataArray(np.ones((3, 2)), dims=("time", "lat"), coords={"lat": [1, 2]})
    with pytest.raises(ValueError, match=message):
        call(truth, truth)  # type: ignore[operator]
