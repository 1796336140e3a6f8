"""train_postprocessor for every model: command line, exact resume, older run folders refused."""

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

import sciml.weather.postprocess.models as postprocess
from sciml.cli import main
from sciml.training import TrainConfig
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.mixed import MixedPostProcessor
from sciml.weather.postprocess.models import PostProcessor
from sciml.weather.postprocess.pooled import PooledPostProcessor
from sciml.weather.postprocess.predict import load_postprocessor, predict_run
from sciml.weather.postprocess.record import RUN_CONFIG, read_run
from sciml.weather.postprocess.train import train_postprocessor
from tests.weather.postprocess.test_train_evaluate import _write
from tests.weather.test_grid import _hashes


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("weather") / "train.nc", dates=6, seed=0)


@pytest.mark.parametrize(
    ("model", "kind"), [("mixed", MixedPostProcessor), ("pooled", PooledPostProcessor)]
)
def test_the_command_line_trains_the_new_models(
    data: Path, tmp_path: Path, model: str, kind: type
) -> None:
    run = tmp_path / model
    args = ["weather", "train", "--model", model, "--members", "3", "--epochs", "1", "--quiet"]
    assert main([*args, "--run-dir", str(run), str(data)]) == 0
    config, _ = read_run(run)
    # pooled draws its members at random unless told otherwise; the grid is recorded
    assert config.choice == ("random" if model == "pooled" else "first")
    assert config.grid == (8, 8) and not config.periodic  # no longitudes in the file
    assert isinstance(load_postprocessor(run), kind)
    if model == "mixed":  # weights per grid point: another grid is refused by name
        smaller = xr.open_dataset(data).isel(lat=slice(4))
        with pytest.raises(ValueError, match=r"'lat': the run in .* has 8 points.*the data has 4"):
            predict_run(run, smaller)


def _metrics(run: Path) -> pd.DataFrame:
    return pd.read_csv(run / "metrics.csv")


def test_an_interrupted_mixed_run_resumes_to_the_uninterrupted_one(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = xr.open_dataset(data)
    loop = TrainConfig(epochs=2, batch_size=4, progress=False, tensorboard=False)
    config = PostprocessConfig(model="mixed", members=2, train=loop)
    assert train_postprocessor(ds, config, tmp_path / "whole") == "completed"
    loss, calls = postprocess.gaussian_crps_loss, []

    def stopping(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 2:  # the second training step of epoch 1
            os.kill(os.getpid(), signal.SIGUSR1)
        return loss(model, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(postprocess, "gaussian_crps_loss", stopping)
    assert train_postprocessor(ds, config, tmp_path / "split") == "interrupted"
    monkeypatch.setattr(postprocess, "gaussian_crps_loss", loss)
    assert train_postprocessor(ds, config, tmp_path / "split") == "completed"
    pd.testing.assert_frame_equal(_metrics(tmp_path / "split"), _metrics(tmp_path / "whole"))
    whole = load_postprocessor(tmp_path / "whole", checkpoint="last").state_dict()
    split = load_postprocessor(tmp_path / "split", checkpoint="last").state_dict()
    assert all(torch.equal(whole[k], split[k]) for k in whole)


@pytest.mark.parametrize(
    ("version", "why"),
    [
        (None, "records the grid, lead times and start dates"),
        (3, "names its kind and format"),
        (4, "nests the training loop's options"),
    ],
)
def test_a_run_folder_of_an_earlier_format_is_refused(
    data: Path, tmp_path: Path, version: int | None, why: str
) -> None:
    run = tmp_path / "old"
    train_postprocessor(xr.open_dataset(data), PostprocessConfig(model="emos", members=2), run)
    record = json.loads((run / RUN_CONFIG).read_text())
    if version == 4:  # the layout of format 4, the loop's options beside the others
        record["config"] |= record["config"].pop("train")
        old = record | {"version": 4}
    else:  # written flat before format 4
        old = record["config"] | ({} if version is None else {"version": version})
    (run / RUN_CONFIG).write_text(json.dumps(old))
    before = _hashes(run)
    message = f"weather run of format {version or 1}; this version of sciml reads format 6 .*{why}"
    with pytest.raises(ValueError, match=message):
        read_run(run)
    with pytest.raises(ValueError, match=message):
        train_postprocessor(xr.open_dataset(data), PostprocessConfig(model="emos", members=2), run)
    assert _hashes(run) == before


def test_a_run_folder_of_the_format_before_reads_and_trains_on_as_one_record(
    data: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    quiet = TrainConfig(epochs=1, batch_size=4, progress=False, tensorboard=False)
    config = PostprocessConfig(model="mlp", members=2, train=quiet)
    train_postprocessor(xr.open_dataset(data), config, run)
    record = json.loads((run / RUN_CONFIG).read_text())
    stats = record["config"]["data"].pop("stats")
    assert read_run(run)[1].record() == stats
    assert sorted(p.name for p in run.glob("*.json")) == ["reads.json", RUN_CONFIG]
    # format 5 kept the statistics in stats.json
    (run / RUN_CONFIG).write_text(json.dumps(record | {"version": 5}))
    (run / "stats.json").write_text(json.dumps(stats))
    assert read_run(run)[1].record() == stats
    more = replace(config, train=replace(config.train, epochs=2))
    assert train_postprocessor(xr.open_dataset(data), more, run) == "completed"
    assert sorted(p.name for p in run.glob("*.json")) == ["reads.json", RUN_CONFIG]
    saved = json.loads((run / RUN_CONFIG).read_text())
    assert saved["version"] == 6 and saved["config"]["data"]["stats"] == stats
    # without its stats.json, a folder of format 5 is refused, naming what it lacks
    (run / RUN_CONFIG).write_text(json.dumps(record | {"version": 5}))
    with pytest.raises(ValueError, match=r"format 5; .* format 6 \(.*no stats.json"):
        read_run(run)


def test_another_configuration_is_refused_before_anything_is_written(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "mlp"
    args = ["weather", "train", "--model", "mlp", "--members", "2", "--epochs", "1", "--quiet"]
    assert main([*args, "--run-dir", str(run), str(data)]) == 0
    before = _hashes(run)
    assert main([*args, "--lr", "0.01", "--run-dir", str(run), str(data)]) == 1
    err = capsys.readouterr().err
    default = PostprocessConfig().lr
    assert f"{run} holds a weather run with another configuration (lr: {default} in the run" in err
    assert "nothing was written: give this run another --run-dir" in err
    assert _hashes(run) == before


def test_emos_fits_every_date_and_refuses_a_folder_fitted_without_the_validation_dates(
    data: Path, tmp_path: Path
) -> None:
    run = tmp_path / "emos"
    train_postprocessor(xr.open_dataset(data), PostprocessConfig(model="emos", members=2), run)
    assert read_run(run)[0].validation == 0
    saved = json.loads((run / RUN_CONFIG).read_text())
    saved["config"]["validation"] = 0.2  # an older EMOS
    (run / RUN_CONFIG).write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"another configuration \(.*validation: 0.2 in the run"):
        train_postprocessor(xr.open_dataset(data), PostprocessConfig(model="emos", members=2), run)


def test_the_deep_models_need_a_lat_lon_grid(data: Path, tmp_path: Path) -> None:
    ds = xr.open_dataset(data).isel(lat=0)
    with pytest.raises(ValueError, match=r"need 2 spatial dims \(lat, lon\).*'psi' has \['lon'\]"):
        train_postprocessor(ds, PostprocessConfig(model="mlp", members=2), tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_periodic_longitudes_are_detected(data: Path, tmp_path: Path) -> None:
    ds = xr.open_dataset(data).assign_coords(lon=np.arange(8) * 45.0)
    run = tmp_path / "unet"
    train_postprocessor(
        ds,
        PostprocessConfig(
            model="unet", members=2, train=TrainConfig(epochs=1, progress=False, tensorboard=False)
        ),
        run,
    )
    assert read_run(run)[0].periodic


def _data_parallel_run(data: Path, run: Path, batch_size: int) -> list[float]:
    """The first two logged step losses of a run on every rank of the group."""
    import torch.distributed as dist

    status = train_postprocessor(
        xr.open_dataset(data),
        PostprocessConfig(
            model="mlp",  # no batch norm: a rank's batch statistics would differ from the whole's
            members=2,
            train=TrainConfig(epochs=1, batch_size=batch_size, progress=False, tensorboard=False),
        ),
        run,
    )
    assert status == "completed"
    if dist.is_initialized():
        dist.barrier()  # rank 0 has written and closed the run's files
    assert isinstance(load_postprocessor(run, checkpoint="last"), PostProcessor)
    log = pd.read_csv(run / "metrics.csv")
    return log[(log.split == "train_step") & (log.metric == "loss")]["value"].tolist()[:2]


def test_two_ranks_train_one_model_on_the_batches_of_one_process(
    data: Path, tmp_path: Path
) -> None:
    from sciml.distributed import spawn

    two = spawn(_data_parallel_run, 2, data, tmp_path / "dp", 2)[0]
    one = _data_parallel_run(data, tmp_path / "single", 4)
    # step 1: the global loss of the same 4 samples; step 2: after one update from the
    # gradient averaged over both ranks (one rank's own gradient moves it by ~2e-4, some
    # 1,800 eps).
    # Both agree to float32 rounding: each loss is a mean of 1,024 terms (4 samples, 4
    # channels, 8 x 8 points), which torch sums pairwise (error ~ log2(1024) = 10 eps), and
    # the replicas' means are averaged once more; 256 eps bounds that with room.
    assert two == pytest.approx(one, rel=256 * torch.finfo(torch.float32).eps)
