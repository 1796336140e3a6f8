"""open_ensemble on the real ERA5 sample and on small rewritten copies of it."""

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import xarray as xr

from sciml.datasets.channels import compute_stats, normalise
from sciml.weather.data import open_ensemble, standardise_names
from sciml.weather.reads import in_memory
from sciml.weather.split import split_start_dates

from .conftest import ERA5


def test_open_real_sample_maps_names_and_stays_lazy(era5: xr.Dataset) -> None:
    ds = open_ensemble(ERA5)
    assert dict(ds.sizes) == {"member": 10, "time": 4, "level": 2, "lat": 61, "lon": 120}
    assert ds["t"].dims == ("member", "time", "level", "lat", "lon")
    assert ds["t"].chunks is not None
    np.testing.assert_array_equal(ds["t"].values, era5["t"].values)
    assert ds["t"].attrs["units"] == "K"
    assert "valid_time" in ds.coords


def test_select_variables_levels_members(era5: xr.Dataset) -> None:
    ds = open_ensemble(
        str(ERA5), variables=["z"], levels=[500], members=range(5), chunks={"member": 1}
    )
    assert list(ds.data_vars) == ["z"]
    assert ds.sizes["member"] == 5 and ds["level"].values.tolist() == [500.0]
    assert ds["z"].chunks[0] == (1,) * 5
    expected = era5["z"].sel(isobaricInhPa=[500], number=range(5)).values
    np.testing.assert_array_equal(ds["z"].values, expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variables": ["u"]}, r"variable\(s\) \['u'\] not found"),
        ({"levels": [700]}, r"levels \[700\] not in the data"),
        ({"members": [11]}, r"members \[11\] not in the data"),
    ],
)
def test_clear_errors_for_missing_selections(
    kwargs: dict[str, list[str] | list[int]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        open_ensemble(ERA5, **kwargs)


def test_several_files_by_time_and_by_variable_and_zarr(era5: xr.Dataset, tmp_path: Path) -> None:
    first, second = tmp_path / "a.nc", tmp_path / "b.nc"
    era5.isel(time=slice(0, 2)).to_netcdf(first)
    era5.isel(time=slice(2, 4)).to_netcdf(second)
    ds = open_ensemble([second, first])
    np.testing.assert_array_equal(ds["z"].values, era5["z"].values)
    assert open_ensemble(str(tmp_path / "*.nc")).sizes["time"] == 4
    era5[["t"]].to_netcdf(tmp_path / "t.nc")
    era5[["z"]].to_zarr(tmp_path / "z.zarr", zarr_format=2)
    both = open_ensemble([tmp_path / "t.nc", tmp_path / "z.zarr"], variables=["t", "z"])
    np.testing.assert_array_equal(both["t"].values, era5["t"].values)
    np.testing.assert_array_equal(both["z"].values, era5["z"].values)


def test_mismatched_grid_and_non_monotonic_coordinates(era5: xr.Dataset, tmp_path: Path) -> None:
    era5.isel(time=[0]).to_netcdf(tmp_path / "a.nc")
    shifted = era5.isel(time=[1]).assign_coords(longitude=era5.longitude + 1.5)
    shifted.to_netcdf(tmp_path / "b.nc")
    with pytest.raises(ValueError, match=r"b\.nc: its 'lon' grid .* differs from .*a\.nc"):
        open_ensemble([tmp_path / "a.nc", tmp_path / "b.nc"])
    era5.isel(latitude=[0, 2, 1]).to_netcdf(tmp_path / "c.nc")
    with pytest.raises(ValueError, match=r"c\.nc: coordinate 'lat' is not strictly monotonic"):
        open_ensemble(tmp_path / "c.nc")
    era5.isel(time=[0, 0]).to_netcdf(tmp_path / "d.nc")
    with pytest.raises(ValueError, match="'time' is not strictly monotonic"):
        open_ensemble(tmp_path / "d.nc")


def test_missing_grid_dimension_and_missing_file(era5: xr.Dataset, tmp_path: Path) -> None:
    era5.isel(longitude=0).to_netcdf(tmp_path / "zonal.nc")
    with pytest.raises(ValueError, match=r"zonal\.nc: variable 'z' has dimensions"):
        open_ensemble(tmp_path / "zonal.nc")
    with pytest.raises(FileNotFoundError, match="nothing.nc"):
        open_ensemble(tmp_path / "nothing.nc")


def test_grib_without_cfgrib_gives_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    path = tmp_path / "fc.grib"
    path.write_bytes(b"GRIB")
    real_import = builtins.__import__

    def no_cfgrib(name: str, *args: Any, **kwargs: Any) -> ModuleType:
        if name == "cfgrib":
            raise ImportError("No module named 'cfgrib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cfgrib)
    with pytest.raises(ImportError, match=r"fc\.grib needs cfgrib: pip install 'sciml\[grib\]'"):
        open_ensemble(path)


def test_cfgrib_forecast_layout_with_steps() -> None:
    raw = xr.Dataset(
        {"t2m": (("number", "time", "step", "latitude", "longitude"), np.zeros((3, 2, 4, 2, 3)))},
        coords={
            "number": [0, 1, 2],
            "time": np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[ns]"),
            "step": np.array([0, 6, 12, 18], dtype="timedelta64[h]").astype("timedelta64[ns]"),
            "latitude": [10.0, 0.0],
            "longitude": [0.0, 1.0, 2.0],
            "surface": 0.0,
        },
    )
    raw = raw.assign_coords(valid_time=raw.time + raw.step)
    ds = standardise_names(raw)
    assert ds["t2m"].dims == ("member", "time", "lead_time", "lat", "lon")
    assert ds["valid_time"].dims == ("time", "lead_time")
    era5_api = xr.Dataset(
        {"z": (("valid_time", "latitude", "longitude"), np.zeros((2, 2, 3)))},
        coords={"valid_time": raw.time.values},
    )
    assert standardise_names(era5_api)["z"].dims == ("time", "lat", "lon")


def test_split_and_lazy_normalisation(era5: xr.Dataset) -> None:
    ds = open_ensemble(ERA5)
    train, val, test = split_start_dates(ds, val_start="2017-01-01T12", test_start="2017-01-02T12")
    assert (train.sizes["time"], val.sizes["time"], test.sizes["time"]) == (1, 2, 1)
    with pytest.raises(ValueError, match="test split is empty"):
        split_start_dates(ds, val_start="2017-01-01T12", test_start="2018-01-01")
    with pytest.raises(ValueError, match="must come before"):
        split_start_dates(ds, val_start="2017-01-02", test_start="2017-01-01")
    stats = compute_stats(train, ["t"], channel_dims=("level",))
    assert stats.channels == ("t[level=850.0]", "t[level=500.0]")  # the stored order
    assert era5["t"].dtype == np.float32  # statistics in float32, checked against float64
    expected = era5["t"].isel(time=[0]).values.astype(np.float64)
    axes = (0, 1, 3, 4)
    # float32 rounding: pairwise sums err by ~log2(n) eps relative to the sum of |x|; the
    # deviations x - mean carry eps * |x|, i.e. eps * |x| / std relative to the spread
    eps, count = np.finfo(np.float32).eps, expected[:, :, 0].size
    sum_error = 4 * np.log2(count) * eps
    offset = np.abs(expected).max(axes) / expected.std(axes)
    np.testing.assert_allclose(stats.mean, expected.mean(axes), rtol=sum_error)
    reference = expected.std(axes)
    assert np.all(
        np.abs(np.array(stats.std) - reference) <= (sum_error + 4 * eps * offset) * reference
    )
    lazy = normalise(train[["t"]], stats, channel_dims=("level",))
    assert lazy["t"].chunks is not None
    centred = lazy.compute()["t"].mean(["member", "time", "lat", "lon"]).values
    assert np.all(np.abs(centred) <= (sum_error + 4 * eps) * offset)


def test_single_date_grib_like_files_combine_along_time(tmp_path: Path) -> None:
    """cfgrib keeps one date/step/member as scalar coordinates (ENS-10 files): expand them."""
    paths = []
    for day in (1, 2):
        dims = ("number", "isobaricInhPa", "latitude", "longitude")
        one = xr.Dataset(
            {"t": (dims, np.full((2, 1, 2, 3), day))},
            coords={
                "number": [0, 1],
                "isobaricInhPa": [850.0],
                "latitude": [10.0, 0.0],
                "longitude": [0.0, 1.0, 2.0],
                "time": np.datetime64(f"2018-01-0{day}", "ns"),
                "step": np.timedelta64(48, "h").astype("timedelta64[ns]"),
                "valid_time": np.datetime64(f"2018-01-0{day + 2}", "ns"),
            },
        )
        paths.append(tmp_path / f"ens10_{day}.nc")
        one.to_netcdf(paths[-1])
    ds = open_ensemble(paths)
    assert ds["t"].dims == ("member", "time", "lead_time", "level", "lat", "lon")
    assert ds.sizes["time"] == 2
    np.testing.assert_array_equal(
        ds["t"].isel(member=0, lead_time=0, level=0, lat=0, lon=0), [1, 2]
    )
    assert ds["valid_time"].values.ravel()[-1] == np.datetime64("2018-01-04", "ns")


GRIB_BITS = 16  # bits per packed value of the test files


def _write_grib(
    path: Path, days: list[int], members: list[int], rng: np.random.Generator
) -> dict[tuple[int, int], np.ndarray]:
    """Tiny GRIB2 ensemble written with ecCodes (cfgrib's writer needs an older xarray)."""
    eccodes = pytest.importorskip("eccodes")
    values = {}
    with open(path, "wb") as handle:
        for day in days:
            for number in members:
                grib = eccodes.codes_grib_new_from_samples("regular_ll_pl_grib2")
                eccodes.codes_set(grib, "productDefinitionTemplateNumber", 1)
                keys = {
                    "discipline": 0,
                    "parameterCategory": 0,
                    "parameterNumber": 0,  # t
                    "typeOfFirstFixedSurface": 100,
                    "level": 850,
                    "dataDate": 20170100 + day,
                    "dataTime": 0,
                    "stepRange": "0",
                    "perturbationNumber": number,
                    "numberOfForecastsInEnsemble": len(members),
                    "typeOfEnsembleForecast": 3,
                    "Ni": 4,
                    "Nj": 3,
                    "latitudeOfFirstGridPointInDegrees": 10.0,
                    "latitudeOfLastGridPointInDegrees": 0.0,
                    "longitudeOfFirstGridPointInDegrees": 0.0,
                    "longitudeOfLastGridPointInDegrees": 15.0,
                    "iDirectionIncrementInDegrees": 5.0,
                    "jDirectionIncrementInDegrees": 5.0,
                }
                for key, value in keys.items():
                    eccodes.codes_set(grib, key, value)
                values[day, number] = 250 + rng.standard_normal((3, 4))
                eccodes.codes_set(grib, "bitsPerValue", GRIB_BITS)
                eccodes.codes_set_values(grib, values[day, number].ravel())
                eccodes.codes_write(grib, handle)
                eccodes.codes_release(grib)
    return values


def test_real_grib_through_cfgrib(tmp_path: Path) -> None:
    pytest.importorskip("cfgrib")
    rng = np.random.default_rng(0)
    first = _write_grib(tmp_path / "day1.grib", [1], [0, 1, 2], rng)
    second = _write_grib(tmp_path / "day2.grib", [2], [0, 1, 2], rng)
    ds = open_ensemble([tmp_path / "day1.grib", tmp_path / "day2.grib"], members=[0, 2])
    assert ds["t"].dims == ("member", "time", "lead_time", "level", "lat", "lon")
    assert ds["level"].values.tolist() == [850.0] and ds["member"].values.tolist() == [0, 2]
    expected = {**first, **second}
    for i, day in enumerate((1, 2)):
        for j, number in enumerate((0, 2)):
            got = ds["t"].isel(member=j, time=i, lead_time=0, level=0).values
            # simple packing: steps of 2**E <= 2 * range / (2**bits - 1), rounded to nearest
            field = expected[day, number]
            step = 2 * np.ptp(field) / (2**GRIB_BITS - 1)
            np.testing.assert_allclose(got, field, atol=step / 2)


def test_selections_reject_what_would_be_silently_wrong() -> None:
    with pytest.raises(ValueError, match=r"members \[0\] asked for more than once"):
        open_ensemble(ERA5, members=[0, 0, 1])
    only_t = open_ensemble(ERA5, variables="t")  # one name, not the letters of a name
    assert list(only_t.data_vars) == ["t"]
    ds = open_ensemble(ERA5)
    with pytest.raises(ValueError, match="val_start 'soon' is not a date"):
        split_start_dates(ds, val_start="soon", test_start="2017-01-02")


def test_split_start_dates_keeps_whole_start_dates_in_order() -> None:
    times = np.datetime64("2000-01-01") + np.arange(10) * np.timedelta64(2, "D")
    ds = xr.Dataset({"t": (("member", "time", "x"), np.zeros((3, 10, 2)))}, coords={"time": times})
    train, val, test = split_start_dates(ds)
    assert [part.sizes["time"] for part in (train, val, test)] == [6, 2, 2]
    assert train.time.max() < val.time.min() and val.time.max() < test.time.min()
    assert train.sizes["member"] == 3  # whole ensembles
    with pytest.raises(ValueError, match="cannot be split"):
        split_start_dates(ds.isel(time=[0, 1]))
    with pytest.raises(ValueError, match="sum to less than 1"):
        split_start_dates(ds, validation=0.5, test=0.5)
    with pytest.raises(ValueError, match="needs a 'time' dimension"):
        split_start_dates(ds.isel(time=0))


def test_small_data_are_read_into_memory_and_large_data_stay_lazy() -> None:
    lazy = open_ensemble(ERA5, variables=["t"])
    assert lazy["t"].chunks is not None
    loaded = in_memory(lazy, what="the test data")
    assert loaded["t"].chunks is None and lazy["t"].chunks is not None  # the caller's stays lazy
    xr.testing.assert_identical(loaded, lazy.compute())
    kept = in_memory(lazy, what="the test data", limit=lazy.nbytes - 1)
    assert kept is lazy
