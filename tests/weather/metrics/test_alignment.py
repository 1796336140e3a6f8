"""The input contract and output labelling of the metrics (:mod:`.alignment`), on their own."""

import numpy as np
import pytest
import xarray as xr

from sciml.weather.metrics import alignment


def _field(lat: list[float], *, name: str = "t2m", units: str = "K") -> xr.DataArray:
    values = np.arange(len(lat), dtype=np.float64)
    attrs = {"long_name": "2 m temperature", "units": units}
    return xr.DataArray(values, dims="lat", coords={"lat": lat}, name=name, attrs=attrs)


def test_align_to_reorders_the_same_labels_and_rejects_others() -> None:
    reference = _field([10.0, 20.0, 30.0])
    flipped = reference.isel(lat=slice(None, None, -1))
    aligned = alignment.align_to(reference, flipped, ("observations", "forecasts"))
    xr.testing.assert_identical(aligned, reference)
    with pytest.raises(ValueError, match="'lat' coordinates differ: observations have"):
        alignment.align_to(reference, _field([10.0, 20.0, 31.0]), ("observations", "forecasts"))


def test_check_units_names_the_variable_and_both_units() -> None:
    with pytest.raises(ValueError, match=r"units differ: \{'a': 'K', 'b': 'degC'\}"):
        alignment.check_units(a=_field([0.0]), b=_field([0.0], units="degC"))
    alignment.check_units(a=_field([0.0]), b=_field([0.0]).drop_attrs())  # unstated: accepted


def test_reduce_over_weights_and_dims() -> None:
    score = _field([10.0, 20.0, 30.0])
    weights = xr.DataArray([1.0, 0.0, 1.0], dims="lat", coords={"lat": score["lat"]})
    assert float(alignment.reduce_over(score, None, weights)) == 1.0  # (0 + 2) / 2
    xr.testing.assert_identical(alignment.reduce_over(score, [], None), score)
    with pytest.raises(ValueError, match="weights are all zero"):
        alignment.reduce_over(score, "lat", weights * 0)
    with pytest.raises(ValueError, match=r"dim \['time'\] not among"):
        alignment.reduce_over(score, "time", None)


def test_label_names_the_score_and_takes_the_data_units() -> None:
    score = alignment.label(
        _field([0.0]).rename(None), _field([0.0]), name="crps", what="CRPS", units=None
    )
    assert score.name == "crps"
    assert score.attrs == {"long_name": "CRPS of 2 m temperature", "units": "K"}
