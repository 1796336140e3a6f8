"""Weather runs record their grid: data aligned by label or refused; refused runs write nothing."""

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciml.cli import main
from sciml.spatial_parallel.testing import error_bound
from sciml.training import TrainConfig
from sciml.training.runs.folder import RunLock
from sciml.weather.labels import LabelMismatch
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.predict import predict_run
from sciml.weather.postprocess.train import train_postprocessor
from sciml.weather.spread.config import SpreadConfig
from sciml.weather.spread.predict import predict_spread
from sciml.weather.spread.train import train_spread

#: One quiet epoch of the loop.
LOOP = TrainConfig(epochs=1, progress=False, tensorboard=False)
#: A small spread run of that loop.
SPREAD = SpreadConfig(members=2, base_channels=4, depth=1, train=LOOP)


def _ensemble(dates: int, seed: int) -> xr.Dataset:
    """4 members of 2 variables on 2 levels, 8 x 8 points (latitudes north to south, as
    ERA5's, longitudes 0..315 closing the circle), 2 lead times, a static topography."""
    rng = np.random.default_rng(seed)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    shape = (4, dates, 2, 2, 8, 8)
    signal = rng.standard_normal(shape[1:])
    data = {}
    for name in ("psi", "q"):
        data[name] = (dims, signal + 0.5 * rng.standard_normal(shape))
        data[f"{name}_truth"] = (dims[1:], 1.3 * signal + 0.2 * rng.standard_normal(shape[1:]))
    data["topography"] = (("lat", "lon"), rng.standard_normal((8, 8)))
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(dates) * np.timedelta64(2, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "level": [500, 850],
        "lat": np.linspace(70.0, -70.0, 8),
        "lon": np.arange(8) * 45.0,
    }
    return xr.Dataset(data, coords=coords)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A mixed (weights per point), U-Net, EMOS and spread run on one 6-date ensemble."""
    folder = tmp_path_factory.mktemp("grid")
    train = _ensemble(6, seed=0)
    found = {}
    for model in ("mixed", "unet", "emos"):
        found[model] = folder / model
        train_postprocessor(
            train, PostprocessConfig(model=model, members=2, train=LOOP), found[model]
        )
    found["spread"] = folder / "spread"
    train_spread(train, SPREAD, found["spread"])
    return found


def _predict(run: Path, test: xr.Dataset) -> dict[str, xr.DataArray]:
    """Every array a run predicts on ``test``."""
    if run.name == "spread":
        return predict_spread(run, test)
    return {
        f"{var}_{part}": array
        for var, pair in predict_run(run, test).items()
        for part, array in zip(("mu", "sigma"), pair, strict=True)
    }


def _other_convention(ds: xr.Dataset) -> xr.Dataset:
    """Longitudes in -180..180, sorted: the same points in another order and other labels."""
    return ds.assign_coords(lon=(ds["lon"] + 180) % 360 - 180).sortby("lon")


# each case: the data in another layout, and where each of its points was in the original
LAYOUTS = {
    "latitudes south to north": (lambda ds: ds.isel(lat=slice(None, None, -1)), {"lat": "flip"}),
    "longitudes -180..180": (_other_convention, {"lon": "convention"}),
    "levels reordered": (lambda ds: ds.isel(level=[1, 0]), {"level": "flip"}),
    "dims lon before lat": (lambda ds: ds.transpose(..., "lon", "lat"), {}),
}


@pytest.mark.parametrize("model", ["mixed", "unet", "emos", "spread"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_data_in_another_layout_get_the_predictions_of_the_same_points(
    runs: dict[str, Path], model: str, layout: str
) -> None:
    test = _ensemble(2, seed=1)
    change, _ = LAYOUTS[layout]
    moved = change(test)
    reference = _predict(runs[model], test)
    for name, predicted in _predict(runs[model], moved).items():
        # the same points in the data's own layout and labels; the model saw the same
        # tensors, so the values are the same bits
        assert predicted.dims == moved[name.split("_")[0]].dims[1:]  # without member
        expected = reference[name].transpose(*predicted.dims)
        if layout == "longitudes -180..180":
            expected = expected.isel(lon=(predicted["lon"].values % 360 / 45).astype(int))
        else:
            expected = expected.sel({d: predicted[d] for d in ("lat", "level")})
        np.testing.assert_array_equal(predicted.values, expected.values)
        for dim in predicted.dims:
            assert np.array_equal(predicted[dim].values, moved[dim].values), dim


REFUSED = {
    "another grid": (lambda ds: ds.assign_coords(lat=ds["lat"] + 1.0), r"'lat': the run in"),
    "a level the run never saw": (
        lambda ds: ds.assign_coords(level=[500, 700]),
        r"'level': .* lacks the labels \[850\]",
    ),
    "a lead time the run never saw": (
        lambda ds: ds.assign_coords(lead_time=ds["lead_time"] + np.timedelta64(12, "h")),
        r"'lead_time': .* its labels \['0 days 12:00:00', '1 days 12:00:00'\] are not among",
    ),
    "no latitude labels": (
        lambda ds: ds.drop_vars("lat"),
        r"'lat': .* only one side is labelled",
    ),
}


@pytest.mark.parametrize("model", ["mixed", "unet", "emos", "spread"])
@pytest.mark.parametrize("case", list(REFUSED))
def test_data_on_other_labels_are_refused_naming_both_sides(
    runs: dict[str, Path], model: str, case: str
) -> None:
    change, message = REFUSED[case]
    with pytest.raises(LabelMismatch, match=message) as caught:
        _predict(runs[model], change(_ensemble(2, seed=1)))
    assert f"the run in {runs[model]} (--run-dir)" in str(caught.value)


def _in_float64(run: Path, test: xr.Dataset, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The run's predictions with its model in float64 (the inputs cast on the way in)."""
    import sciml.weather.postprocess.predict as predict

    load = predict.load_postprocessor

    def double(run_dir: Path) -> torch.nn.Module:
        model = load(run_dir).double()
        forward = model.forward
        model.forward = lambda *xs: forward(*(x if x is None else x.double() for x in xs))
        return model

    with monkeypatch.context() as patch:
        patch.setattr(predict, "load_postprocessor", double)
        return _predict(run, test)


def test_fewer_lead_times_are_predicted_for_the_ones_there(
    runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lead time kept gets its own prediction, to the float32 rounding of the batch shape.

    A batch of another shape may round otherwise (oneDNN picks kernels by shape):
    each side is compared with the float64 model, and the part may be off by
    FACTOR times the whole's float32 error plus a floor of a few roundings.
    """
    test = _ensemble(2, seed=1)
    last = test.isel(lead_time=[1])
    for model in ("mixed", "emos"):
        whole, part = _predict(runs[model], test), _predict(runs[model], last)
        exact = _in_float64(runs[model], test, monkeypatch)
        for name, predicted in part.items():
            expected = exact[name].isel(lead_time=[1]).values
            scale = np.abs(expected).max()
            whole_error = np.abs(whole[name].isel(lead_time=[1]).values - expected).max() / scale
            bound = error_bound(whole_error, dtype=torch.float32, size=expected.size)
            assert np.abs(predicted.values - expected).max() / scale <= bound, name


def test_the_command_line_names_the_run_folder_and_the_test_file(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "shifted.nc"
    _ensemble(2, seed=1).assign_coords(lat=np.linspace(71.0, -69.0, 8)).to_netcdf(path)
    for command, run in (("evaluate", runs["mixed"]), ("spread evaluate", runs["spread"])):
        argv = [*command.split(), "--run-dir", str(run), str(path)]
        assert main(["weather", *argv]) == 1
        err = capsys.readouterr().err
        assert f"the run in {run} (--run-dir)" in err and f"the test data ({path})" in err


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _train(kind: str, ds: xr.Dataset, run: Path) -> None:
    if kind == "spread":
        train_spread(ds, SPREAD, run)
    else:
        train_postprocessor(ds, PostprocessConfig(model=kind, members=2, train=LOOP), run)


@pytest.mark.parametrize("kind", ["mlp", "emos", "spread"])
def test_a_refused_rerun_leaves_the_run_folder_byte_identical(kind: str, tmp_path: Path) -> None:
    run = tmp_path / kind
    data = _ensemble(6, seed=0)
    _train(kind, data, run)
    before = _hashes(run)
    assert not any(name.endswith("stats.json") for name in before)  # in the run's one record
    others = {
        "fewer start dates": (data.isel(time=slice(5)), r"data\.time\.size: 6 in the run, 5"),
        "another grid": (_other_convention(data).isel(lon=slice(4)), r"data\.coords\.lon"),
        "other levels": (data.assign_coords(level=[500, 700]), r"data\.coords\.level\.values"),
    }
    for other, message in others.values():
        with pytest.raises(ValueError, match=message) as caught:
            _train(kind, other, run)
        assert f"--run-dir {run}" in str(caught.value) and "nothing was written" in str(
            caught.value
        )
        assert _hashes(run) == before
    # a run of the other kind (a spread run's folder for a post-processing run, and back)
    with pytest.raises(ValueError, match=r"holds .* but no (weather|spread)_run\.json"):
        _train("mlp" if kind == "spread" else "spread", data, run)
    assert _hashes(run) == before


def test_a_folder_in_use_is_refused_in_the_command_line_s_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, data = tmp_path / "mlp", tmp_path / "train.nc"
    _ensemble(6, seed=0).to_netcdf(data)
    argv = ["weather", "train", "--model", "mlp", "--members", "2", "--epochs", "1", "--quiet"]
    assert main([*argv, "--run-dir", str(run), str(data)]) == 0
    with RunLock(run):  # another process training in the folder
        before = _hashes(run)
        assert main([*argv, "--run-dir", str(run), str(data)]) == 1
        assert _hashes(run) == before
    err = capsys.readouterr().err
    assert "is in use by another training run" in err
    assert "give this run another --run-dir" in err and "run_dir" not in err
