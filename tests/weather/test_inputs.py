"""The weather ensemble's input contract: units, calendars, variables not asked for, missing
values and a run record edited by hand; every refusal leaves inputs and run folders as they were.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciml.cli import main
from sciml.datasets.cf import UnitsMismatch, conversion
from sciml.training import TrainConfig
from sciml.weather.data import open_ensemble
from sciml.weather.dataset import EnsembleDataset
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.models import PostProcessor, gaussian_crps_loss, member_mean_sd
from sciml.weather.postprocess.predict import predict_run
from sciml.weather.postprocess.train import train_postprocessor
from sciml.weather.spread.config import SpreadConfig
from sciml.weather.spread.predict import predict_spread
from sciml.weather.spread.train import train_spread
from tests.file_digests import digests

#: One quiet epoch of the loop.
LOOP = TrainConfig(epochs=1, progress=False, tensorboard=False)
#: Kelvin at 0 degrees Celsius.
ZERO_C = 273.15


def _ensemble(dates: int = 6, seed: int = 0) -> xr.Dataset:
    """3 members of ``psi`` in kelvin (and its truth) on 1 level, 4 x 8 points, 2 lead times,
    a static topography."""
    rng = np.random.default_rng(seed)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    shape = (3, dates, 2, 1, 4, 8)
    signal = 280.0 + 5.0 * rng.standard_normal(shape[1:])
    kelvin = {"units": "K"}
    data = {
        "psi": (dims, signal + rng.standard_normal(shape), kelvin),
        "psi_truth": (dims[1:], signal + 0.5 * rng.standard_normal(shape[1:]), kelvin),
        "topography": (("lat", "lon"), rng.standard_normal((4, 8)), {"units": "m"}),
    }
    coords = {
        "time": np.datetime64("2000-02-20") + np.arange(dates) * np.timedelta64(2, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "level": [500],
        "lat": np.linspace(60.0, -60.0, 4),
        "lon": np.arange(8) * 45.0,
    }
    return xr.Dataset(data, coords=coords)


def _celsius(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with ``psi`` and its truth in degrees Celsius."""
    return ds.assign(
        {name: (ds[name] - ZERO_C).assign_attrs(units="degC") for name in ("psi", "psi_truth")}
    )


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *paths: Path) -> str:
    """The error of a command that must fail, having left ``paths`` as they were."""
    before = digests(*paths)
    assert main(argv) == 1
    assert digests(*paths) == before
    return capsys.readouterr().err


@pytest.fixture(scope="module")
def kelvin_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """EMOS, MLP and spread runs trained on kelvin, and test files in kelvin, degrees Celsius
    and metres."""
    folder = tmp_path_factory.mktemp("units")
    train = _ensemble(seed=0)
    train.to_netcdf(folder / "train.nc")
    _celsius(train).to_netcdf(folder / "train_celsius.nc")
    train_postprocessor(
        train, PostprocessConfig(model="mlp", members=2, train=LOOP), folder / "mlp"
    )
    train_spread(
        train, SpreadConfig(members=2, base_channels=4, depth=1, train=LOOP), folder / "spread"
    )
    test = _ensemble(seed=1)
    test.to_netcdf(folder / "kelvin.nc")
    _celsius(test).to_netcdf(folder / "celsius.nc")
    metres = {name: test[name].assign_attrs(units="m") for name in ("psi", "psi_truth")}
    test.assign(metres).to_netcdf(folder / "metres.nc")
    run = folder / "run"
    argv = ["weather", "train", "--model", "emos", "--members", "2", "--run-dir", str(run)]
    assert main([*argv, str(folder / "train.nc")]) == 0
    return {"folder": folder, "run": run}


def test_the_run_records_each_variable_s_units(kelvin_run: dict[str, Path]) -> None:
    record = json.loads((kelvin_run["run"] / "weather_run.json").read_text())
    assert record["config"]["data"]["units"] == {"psi": "K"}


def test_data_in_celsius_get_the_scores_of_the_same_data_in_kelvin(
    kelvin_run: dict[str, Path],
) -> None:
    folder, run = kelvin_run["folder"], kelvin_run["run"]
    tables = {}
    for name in ("kelvin", "celsius"):
        out = folder / f"{name}.json"
        argv = ["weather", "evaluate", "--run-dir", str(run), "--json", str(out)]
        assert main([*argv, str(folder / f"{name}.nc")]) == 0
        tables[name] = json.loads(out.read_text())
    # the Celsius values are a float64 rounding away from the kelvin ones, converted back
    # with another; EMOS's coefficients (about 1) carry them to mu and sigma, and the CRPS
    # moves by at most as much as they do: a few roundings of values of 300 K
    bound = 16 * np.finfo(np.float64).eps * 300.0
    assert len(tables["kelvin"]) == len(tables["celsius"]) > 0
    for kelvin, celsius in zip(tables["kelvin"], tables["celsius"], strict=True):
        assert kelvin["model"] == celsius["model"]
        assert celsius["crps"] == pytest.approx(kelvin["crps"], abs=bound, rel=0)
        assert celsius["rmse"] == pytest.approx(kelvin["rmse"], abs=bound, rel=0)


def test_climate_data_and_observations_are_converted_to_the_forecasts_units(
    kelvin_run: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, run = kelvin_run["folder"], kelvin_run["run"]
    tables = []
    for climate in ("train.nc", "train_celsius.nc"):
        out = folder / f"climate-{climate}.json"
        argv = ["weather", "evaluate", str(folder / "kelvin.nc"), "--run-dir", str(run)]
        assert main([*argv, "--json", str(out), "--climate", str(folder / climate)]) == 0
        tables.append(json.loads(out.read_text()))
    bound = 16 * np.finfo(np.float64).eps * 300.0
    for kelvin, celsius in zip(*tables, strict=True):
        assert celsius["crps_extreme"] == pytest.approx(kelvin["crps_extreme"], abs=bound, rel=0)
    # observations every day of the forecasts' valid times
    test = _ensemble(seed=1)
    daily = np.datetime64("2000-02-20") + np.arange(12) * np.timedelta64(1, "D")
    field = test["psi_truth"].isel(lead_time=0, time=0, drop=True)
    values = field + xr.DataArray(np.arange(12.0), coords={"time": daily})
    observed = values.assign_attrs(units="K").to_dataset(name="psi")
    scored = []
    celsius = observed.assign(psi=(observed["psi"] - ZERO_C).assign_attrs(units="degC"))
    for name, observations in (("obs_k", observed), ("obs_c", celsius)):
        observations.to_netcdf(folder / f"{name}.nc")
        capsys.readouterr()
        argv = ["weather", "score", str(folder / "kelvin.nc"), "--variable", "psi"]
        assert main([*argv, "--observations", str(folder / f"{name}.nc")]) == 0
        scored.append(capsys.readouterr().out.split("\n", 1)[1])
    assert scored[0] == scored[1]


def test_predictions_are_in_the_data_s_own_units(kelvin_run: dict[str, Path]) -> None:
    folder, run = kelvin_run["folder"], kelvin_run["run"]
    with (
        xr.open_dataset(folder / "kelvin.nc") as kelvin,
        xr.open_dataset(folder / "celsius.nc") as celsius,
    ):
        mu_k, sigma_k = predict_run(run, kelvin.load())["psi"]
        mu_c, sigma_c = predict_run(run, celsius.load())["psi"]
    bound = 16 * np.finfo(np.float64).eps * 300.0
    np.testing.assert_allclose(mu_c.values + ZERO_C, mu_k.values, atol=bound, rtol=0)
    np.testing.assert_allclose(sigma_c.values, sigma_k.values, atol=bound, rtol=0)
    assert mu_c.attrs["units"] == "degC"
    # the deep models read float32: the converted inputs round to the same float32 values
    # or to neighbours, so their outputs (about 300 K) agree to a few float32 roundings
    deep = 8 * 2.0**-24 * 300.0
    with (
        xr.open_dataset(folder / "kelvin.nc") as kelvin,
        xr.open_dataset(folder / "celsius.nc") as celsius,
    ):
        (mu_k, sigma_k), (mu_c, sigma_c) = (
            predict_run(folder / "mlp", data.load())["psi"] for data in (kelvin, celsius)
        )
        spread_k, spread_c = (
            predict_spread(folder / "spread", data.load())["psi"] for data in (kelvin, celsius)
        )
    np.testing.assert_allclose(mu_c.values + ZERO_C, mu_k.values, atol=deep, rtol=0)
    np.testing.assert_allclose(sigma_c.values, sigma_k.values, atol=deep, rtol=0)
    np.testing.assert_allclose(spread_c.values, spread_k.values, atol=deep, rtol=0)


def test_units_that_do_not_convert_are_refused_naming_both(
    kelvin_run: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, run = kelvin_run["folder"], kelvin_run["run"]
    data, out = folder / "metres.nc", folder / "metres.json"
    argv = ["weather", "evaluate", "--run-dir", str(run), "--json", str(out), str(data)]
    err = _refused(argv, capsys, run, data, out)
    assert f"variable 'psi' of the test data ({data}) is in 'm'" in err
    assert f"'K', the units of the run in {run} (--run-dir)" in err


def test_a_truth_in_other_units_than_its_forecast_is_converted_to_them(tmp_path: Path) -> None:
    ds = _ensemble()
    ds.assign(psi_truth=_celsius(ds)["psi_truth"]).to_netcdf(tmp_path / "mixed.nc")
    opened = open_ensemble(tmp_path / "mixed.nc")
    assert opened["psi_truth"].attrs["units"] == "K"
    bound = 4 * np.finfo(np.float64).eps * 300.0
    np.testing.assert_allclose(opened["psi_truth"], ds["psi_truth"], atol=bound, rtol=0)
    with pytest.raises(UnitsMismatch, match=r"'banana', which UDUNITS cannot read"):
        conversion("banana", "K", what="variable 'psi'", reference="the run")


CALENDARS = ["noleap", "360_day", "julian", "proleptic_gregorian"]


@pytest.mark.parametrize("calendar", CALENDARS)
def test_times_in_any_cf_calendar_train_split_and_score_as_the_standard_one(
    calendar: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = _ensemble(dates=10)
    times = xr.date_range("2000-02-20", periods=10, freq="2D", calendar=calendar, use_cftime=True)
    files = {"standard": tmp_path / "standard.nc", calendar: tmp_path / f"{calendar}.nc"}
    ds.to_netcdf(files["standard"])
    ds.assign_coords(time=times).to_netcdf(files[calendar])
    found = {}
    for name, path in files.items():
        run, out = tmp_path / f"run-{name}", tmp_path / f"split-{name}"
        train = ["weather", "train", "--model", "emos", "--members", "2", "--run-dir", str(run)]
        assert main([*train, str(path)]) == 0
        assert main(["weather", "split", "--out", str(out), str(path)]) == 0
        capsys.readouterr()
        assert main(["weather", "score", "--variable", "psi", str(path)]) == 0
        with xr.open_dataset(run / "emos.nc") as coefficients:
            fitted = coefficients.load()
        with xr.open_dataset(out / "test.nc") as test:
            test_times = test["time"].values
        found[name] = (fitted, test_times, capsys.readouterr().out.split("\n", 1)[1])
    assert found[calendar][0].identical(found["standard"][0])
    with xr.open_dataset(files[calendar]) as written:  # as xarray decodes them
        assert list(found[calendar][1]) == list(written["time"].values[-2:])
    assert found[calendar][2] == found["standard"][2]


def test_a_split_by_date_reads_the_date_in_the_data_s_calendar(tmp_path: Path) -> None:
    times = xr.date_range("2000-02-20", periods=10, freq="2D", calendar="360_day", use_cftime=True)
    _ensemble(dates=10).assign_coords(time=times).to_netcdf(tmp_path / "days360.nc")
    out = tmp_path / "split"
    dates = ["--val-start", "2000-02-28", "--test-start", "2000-02-30"]
    assert main(["weather", "split", "--out", str(out), *dates, str(tmp_path / "days360.nc")]) == 0
    with xr.open_dataset(out / "test.nc") as test:
        assert str(test["time"].values[0]) == "2000-02-30 00:00:00"


def test_files_in_two_calendars_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = _ensemble(dates=4)
    ds.to_netcdf(tmp_path / "a.nc")
    later = xr.date_range("2000-03-01", periods=4, freq="2D", calendar="noleap", use_cftime=True)
    ds.assign_coords(time=later).to_netcdf(tmp_path / "b.nc")
    err = _refused(
        ["weather", "score", "--variable", "psi", str(tmp_path / "a.nc"), str(tmp_path / "b.nc")],
        capsys,
        tmp_path,
    )
    assert "'time' coordinates are in different calendars" in err
    assert f"{tmp_path / 'a.nc'}: 'standard'" in err and f"{tmp_path / 'b.nc'}: 'noleap'" in err


def test_variables_not_asked_for_are_not_checked(tmp_path: Path) -> None:
    ds = _ensemble()
    extra = ds.assign(
        crs=((), 0),
        time_bnds=(("time", "bnds"), np.stack([ds["time"].values] * 2, axis=1)),
        lsm=(("lat", "lon"), (np.arange(32).reshape(4, 8) % 3 == 0).astype(float)),
        q=ds["psi"].isel(lat=0),  # not on the grid, and not asked for
    )
    extra.to_netcdf(tmp_path / "extra.nc")
    run = tmp_path / "run"
    argv = ["weather", "train", "--model", "mlp", "--members", "2", "--epochs", "1"]
    files = ["--variables", "psi", "--run-dir", str(run), str(tmp_path / "extra.nc")]
    assert main([*argv, *files]) == 0
    record = json.loads((run / "weather_run.json").read_text())["config"]
    assert record["variables"] == ["psi"] and record["static"] == ["topography", "lsm"]


def _masked(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its northernmost row of points missing (land under a sea-surface field)."""
    land = ds["lat"] == ds["lat"].max()
    return ds.assign({name: ds[name].where(~land) for name in ("psi", "psi_truth")})


def test_missing_values_are_refused_before_anything_is_written_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, run = tmp_path / "masked.nc", tmp_path / "run"
    _masked(_ensemble()).to_netcdf(data)
    argv = ["weather", "train", "--model", "pooled", "--members", "2", "--run-dir", str(run)]
    err = _refused([*argv, str(data)], capsys, data, run)
    assert f"missing (NaN) values in 'psi' of {data}: 288 of 1152 points" in err
    assert "nothing was written: give --missing mask" in err
    spread = ["weather", "spread", "train", "--members", "2", "--run-dir", str(run)]
    err = _refused([*spread, str(data)], capsys, data, run)
    assert "a spread run does not mask missing values" in err


def test_masked_points_are_left_out_of_the_scores_and_predicted_as_missing(
    tmp_path: Path,
) -> None:
    data, run, scores = tmp_path / "masked.nc", tmp_path / "run", tmp_path / "scores.json"
    masked = _masked(_ensemble())
    masked.to_netcdf(data)
    argv = ["weather", "train", "--model", "pooled", "--members", "2", "--epochs", "2"]
    assert main([*argv, "--missing", "mask", "--run-dir", str(run), str(data)]) == 0
    evaluate = ["weather", "evaluate", "--run-dir", str(run), "--json", str(scores)]
    assert main([*evaluate, str(data)]) == 0
    table = json.loads(scores.read_text())
    assert {row["model"] for row in table} == {"raw_3", "raw_2", "pooled_2"}
    assert all(np.isfinite(row["crps"]) for row in table)
    mu, sigma = predict_run(run, masked)["psi"]
    land = masked["psi"].isnull().any("member")
    assert mu.isnull().equals(land) and sigma.isnull().equals(land)


def test_the_masked_loss_is_the_mean_over_the_points_present() -> None:
    data = _masked(_ensemble())
    samples = EnsembleDataset(data, ["psi"], members=2, missing="mask")
    batch = torch.utils.data.default_collate(samples.__getitems__([0, 1, 2]))
    present = batch["mask"]
    assert not present[:, :, 0].any() and present[:, :, 1:].all()
    assert (batch["members"][:, :, :, 0] == 0).all()  # the channel's mean, normalised
    model = PostProcessor(1, backbone="mlp")
    other = dict(batch, truth=torch.where(present, batch["truth"], 99.0))
    assert gaussian_crps_loss(model, other) == gaussian_crps_loss(model, batch)
    mu, sigma = model(batch["members"], None, batch["lead_time"])
    kept = gaussian_crps_loss(model, dict(batch, mask=torch.ones_like(present)))
    assert torch.isfinite(kept) and torch.isfinite(mu).all() and torch.isfinite(sigma).all()


def test_identical_members_have_a_zero_deviation_with_a_zero_gradient() -> None:
    members = torch.zeros(2, 3, 1, 2, 2, requires_grad=True)
    _, sd = member_mean_sd(members)
    sd.sum().backward()
    assert (sd == 0).all() and members.grad is not None and (members.grad == 0).all()


def test_a_record_edited_by_hand_is_refused_naming_the_file_and_the_option(
    kelvin_run: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "edited"
    (run).mkdir()
    for path in kelvin_run["run"].iterdir():
        (run / path.name).write_bytes(path.read_bytes())
    record = run / "weather_run.json"
    record.write_text(record.read_text().replace('"members": 2,', '"members": "2",', 1))
    data = kelvin_run["folder"] / "kelvin.nc"
    err = _refused(["weather", "evaluate", "--run-dir", str(run), str(data)], capsys, run, data)
    assert f"{record}, the run record of --run-dir {run}" in err
    assert "members must be an integer >= 2, got '2'" in err


def test_a_run_recorded_before_units_resumes_and_reads_data_as_before(
    kelvin_run: dict[str, Path], tmp_path: Path
) -> None:
    run, folder = tmp_path / "older", kelvin_run["folder"]
    run.mkdir()
    for path in kelvin_run["run"].iterdir():
        (run / path.name).write_bytes(path.read_bytes())
    record = json.loads((run / "weather_run.json").read_text())
    del record["config"]["missing"], record["config"]["data"]["units"]
    (run / "weather_run.json").write_text(json.dumps(record, indent=2) + "\n")
    before = digests(run / "weather_run.json")
    argv = ["weather", "train", "--model", "emos", "--members", "2", "--run-dir", str(run)]
    assert main([*argv, str(folder / "train.nc")]) == 0  # resumed, not another configuration
    assert digests(run / "weather_run.json") == before
    with xr.open_dataset(folder / "metres.nc") as metres:  # no units recorded: none compared
        assert set(predict_run(run, metres.load())) == {"psi"}


def test_a_static_field_the_run_reads_is_asked_of_the_data_naming_both(
    kelvin_run: dict[str, Path],
) -> None:
    run = kelvin_run["folder"] / "mlp"
    with pytest.raises(KeyError, match=rf"lack \['topography'\], which the run in {run}"):
        predict_run(run, _ensemble(seed=1).drop_vars("topography"))


def test_files_in_other_units_are_combined_in_the_first_file_s(tmp_path: Path) -> None:
    ds = _ensemble(dates=4)
    ds.isel(time=slice(2)).to_netcdf(tmp_path / "a.nc")
    _celsius(ds.isel(time=slice(2, None))).to_netcdf(tmp_path / "b.nc")
    opened = open_ensemble([tmp_path / "a.nc", tmp_path / "b.nc"])
    assert opened["psi"].attrs["units"] == "K"
    bound = 4 * np.finfo(np.float64).eps * 300.0
    np.testing.assert_allclose(opened["psi"], ds["psi"], atol=bound, rtol=0)
