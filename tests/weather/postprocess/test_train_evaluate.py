"""``sciml weather train`` and ``evaluate`` end to end on a tiny toy-shaped ensemble."""

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.cli import main
from sciml.training import TrainConfig
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.evaluate import evaluate_runs
from sciml.weather.postprocess.predict import load_postprocessor
from sciml.weather.postprocess.record import read_run
from sciml.weather.postprocess.train import train_postprocessor


def _write(path: Path, *, dates: int, seed: int) -> Path:
    """A biased 4-member ensemble (truth = 1.3 x signal + 0.2) of 2 variables, 2 levels."""
    rng = np.random.default_rng(seed)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    shape = (4, dates, 2, 2, 8, 8)
    signal = rng.standard_normal(shape[1:])
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(dates) * np.timedelta64(2, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "level": [1, 2],
    }
    data = {}
    for name in ("psi", "q"):
        data[name] = (dims, signal + 0.5 * rng.standard_normal(shape), {"units": "1"})
        truth = 1.3 * signal + 0.2 + 0.5 * rng.standard_normal(shape[1:])
        data[f"{name}_truth"] = (dims[1:], truth, {"units": "1"})
    data["topography"] = (("lat", "lon"), rng.standard_normal((8, 8)))
    xr.Dataset(data, coords=coords).to_netcdf(path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("weather")
    return _write(folder / "train.nc", dates=6, seed=0), _write(folder / "test.nc", dates=2, seed=1)


def test_train_and_evaluate_from_the_command_line(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train, test = files
    for model in ("emos", "mlp"):
        args = ["weather", "train", "--model", model, "--members", "2", "--quiet"]
        assert main([*args, "--epochs", "1", "--run-dir", str(tmp_path / model), str(train)]) == 0
    out = tmp_path / "scores.json"
    runs = [str(tmp_path / "emos"), str(tmp_path / "mlp")]
    assert main(["weather", "evaluate", "--run-dir", *runs, "--json", str(out), str(test)]) == 0
    rows = json.loads(out.read_text())
    models = {row["model"] for row in rows}
    assert models == {"raw_4", "raw_2", "emos_2", "mlp_2"}
    # one row per model, variable, level and lead time
    assert len(rows) == 4 * 2 * 2 * 2
    kinds = {row["model"]: row["crps_kind"] for row in rows}
    assert kinds["raw_4"] == "ensemble standard" and kinds["emos_2"] == "gaussian closed form"
    assert all(row["crps_skill"] == 0 for row in rows if row["model"] == "raw_4")
    # EMOS learns the 1.3 x + 0.2 bias: better than the raw ensembles on new dates
    mean = {m: np.mean([r["crps"] for r in rows if r["model"] == m]) for m in models}
    assert mean["emos_2"] < mean["raw_4"] < mean["raw_2"]
    assert "raw_4" in capsys.readouterr().out


def test_runs_are_checked(files: tuple[Path, Path], tmp_path: Path) -> None:
    train, test = files
    ds = xr.open_dataset(train)
    with pytest.raises(
        ValueError, match=r"members must be at most the ensemble's 4 members, got 5"
    ):
        train_postprocessor(ds, PostprocessConfig(model="emos", members=5), tmp_path / "a")
    with pytest.raises(ValueError, match=r"grid and periodic come from the data; leave them"):
        train_postprocessor(ds, PostprocessConfig(model="mlp", grid=(8, 8)), tmp_path / "a")
    with pytest.raises(ValueError, match=r"PostprocessConfig.members must be an integer >= 2"):
        PostprocessConfig(model="emos", members=1)
    with pytest.raises(ValueError, match=r"PostprocessConfig.model must be one of \('emos'"):
        PostprocessConfig(model="gbm")
    run = tmp_path / "mlp"
    train_postprocessor(
        ds,
        PostprocessConfig(
            model="mlp", members=2, train=TrainConfig(epochs=1, progress=False, tensorboard=False)
        ),
        run,
    )
    config, stats = read_run(run)
    assert config.static == ("topography",) and len(stats.channels) == 4
    assert load_postprocessor(run, checkpoint="last").static == 1
    with pytest.raises(ValueError, match=r"another configuration \(members: 2 in the run, 3 now"):
        train_postprocessor(
            ds,
            PostprocessConfig(
                model="mlp",
                members=3,
                train=TrainConfig(epochs=1, progress=False, tensorboard=False),
            ),
            run,
        )
    with pytest.raises(ValueError, match="is an EMOS run"):
        train_postprocessor(ds, PostprocessConfig(model="emos", members=2), tmp_path / "e")
        load_postprocessor(tmp_path / "e")
    with pytest.raises(ValueError, match="use more members than the test data have"):
        evaluate_runs([run], xr.open_dataset(test).isel(member=[0]))
    with pytest.raises(FileNotFoundError, match="weather_run.json not found"):
        evaluate_runs([tmp_path], xr.open_dataset(test))
