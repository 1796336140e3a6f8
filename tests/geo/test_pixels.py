"""PixelScaling: the units of an image's pixels, recorded and checked, on the OSBS orthophoto."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from sciml.datasets import sample_path
from sciml.geo.pixels import PixelScaling, PixelScalingError
from sciml.geo.rasters import read_image
from sciml.geo.tiles import SceneTiles


@pytest.fixture(scope="module")
def osbs() -> xr.DataArray:
    return read_image(sample_path("osbs_image")).isel(y=slice(0, 96), x=slice(0, 96))


@pytest.mark.parametrize(
    ("values", "units", "scale"),
    [
        (np.array([0, 17, 255], np.uint8), "uint8", 255.0),
        (np.array([0.0, 17.0, 255.0], np.float32), "uint8", 255.0),
        (np.array([0.0, 0.5, 1.0], np.float32), "float", 1.0),
        (np.array([0.0, 1.0, 1.0], np.float64), "float", 1.0),  # 0/1 floats: not 8-bit
        (np.array([0.0, 17.0, 256.0], np.float32), "float", 1.0),
        (np.array([0, 17, 4095], np.uint16), "uint16", 1.0),
    ],
)
def test_units_from_type_and_values(values: np.ndarray, units: str, scale: float) -> None:
    scaling = PixelScaling.of(values.reshape(1, 1, 3))
    assert (scaling.units, scaling.scale, scaling.bands) == (units, scale, 1)


def test_the_record_reads_back_and_nan_nodata_is_none(osbs: xr.DataArray) -> None:
    scaling = PixelScaling.of(osbs)
    assert scaling.nodata == 255.0 and scaling.band_names is None
    record = json.loads(json.dumps(scaling.record()))
    assert PixelScaling.from_record(record, origin="model.json") == scaling
    floats = osbs.astype(np.float32).assign_attrs(nodata=float("nan"))
    assert PixelScaling.of(floats).nodata is None
    with pytest.raises(PixelScalingError, match="model.json: the pixel scaling record"):
        PixelScaling.from_record({"units": "uint8"}, origin="model.json")


def test_training_tiles_of_the_same_pixels_stored_as_float_are_identical(
    osbs: xr.DataArray,
) -> None:
    as_bytes = SceneTiles(osbs, None, None, tile=32, overlap=8)
    as_floats = SceneTiles(osbs.astype(np.float32), None, None, tile=32, overlap=8)
    assert as_bytes.scaling == as_floats.scaling
    np.testing.assert_array_equal(as_floats.image, as_bytes.image)
    np.testing.assert_array_equal(as_floats.mask, as_bytes.mask)
    reference = osbs.values.astype(np.float64) / 255  # float64 reference of the scaling
    valid = as_bytes.has_data
    np.testing.assert_allclose(
        as_bytes.image[:, valid], reference[:, valid], rtol=np.finfo(np.float32).eps, atol=0
    )


def test_a_trained_scaling_refuses_reflectance_and_aligns_named_bands(osbs: xr.DataArray) -> None:
    named = osbs.assign_coords(band=["red", "green", "blue"])
    scaling = PixelScaling.of(named)
    reflectance = named.astype(np.float32) / 255
    with pytest.raises(
        PixelScalingError, match="scene.tif holds float32 values .* trained on uint8"
    ):
        scaling.conform(reflectance, name="scene.tif")
    swapped = named.isel(band=[2, 0, 1])
    values, nodata = scaling.conform(swapped)
    np.testing.assert_array_equal(values, named.values)
    assert nodata == 255.0
    unnamed = osbs.astype(np.float32).assign_attrs(nodata=None)
    values, nodata = scaling.conform(unnamed)  # no nodata of its own: the training image's
    assert nodata == 255.0 and values.dtype == np.float32
