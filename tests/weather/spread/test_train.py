"""``sciml weather spread train|evaluate`` end to end on a tiny toy-shaped ensemble."""

import argparse
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

import sciml.weather.spread.train as spread_train
from sciml.training import TrainConfig
from sciml.weather.spread.cli import register_spread
from sciml.weather.spread.config import SpreadConfig
from sciml.weather.spread.evaluate import evaluate_spread
from sciml.weather.spread.predict import load_spread_model, predict_spread
from sciml.weather.spread.record import read_spread_run
from sciml.weather.spread.train import train_spread
from tests.weather.spread.test_data import write_tiny
from tests.weather.test_grid import _hashes

EPS = float(np.finfo(np.float64).eps)
TINY = ["--epochs", "1", "--quiet"]
#: A small, quiet spread run of one epoch.
SMALL = SpreadConfig(
    base_channels=4, depth=1, train=TrainConfig(epochs=1, progress=False, tensorboard=False)
)


def _spread_cli(argv: list[str]) -> int:
    """Run ``sciml weather spread ...`` through its own parser."""
    parser = argparse.ArgumentParser()
    register_spread(parser.add_subparsers())
    args = parser.parse_args(["spread", *argv])
    return args.func(args)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A temporal run (2 lead times, CRPS loss) on 5 dates; a 2-date test file."""
    folder = tmp_path_factory.mktemp("spread")
    data = write_tiny(folder / "train.nc", dates=5)
    test = write_tiny(folder / "test.nc", dates=2, seed=1)
    run = folder / "run"
    train_spread(xr.open_dataset(data), replace(SMALL, members=2, history=2, loss="crps"), run)
    return data, test, run


def _corr_rmse(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(np.corrcoef(a, b)[0, 1]), float(np.sqrt(np.mean((a - b) ** 2)))


def test_evaluate_table_against_a_numpy_reference(
    trained: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, test, run = trained
    out = tmp_path / "spread.json"
    # the test file after the run folders of --run-dir (nargs="+") is the test data
    assert _spread_cli(["evaluate", "--json", str(out), "--run-dir", str(run), str(test)]) == 0
    rows = json.loads(out.read_text())
    assert {r["model"] for r in rows} == {"sample_2", "spread_2_crps_t2"}
    assert len(rows) == 2 * 2 * 2 * 3  # models x variables x levels x lead times
    ds = xr.open_dataset(test)
    predicted = predict_spread(run, ds)
    for row in rows:
        at = {"lead_time": int(row["lead_days"]), "level": row["level"] - 1}
        members = ds[row["variable"]].values.transpose(1, 2, 3, 0, 4, 5)  # time, lead, level
        full = members.std(3, ddof=1)[:, at["lead_time"], at["level"]]
        if row["model"] == "sample_2":
            guess = members[:, :, :, :2].std(3, ddof=1)[:, at["lead_time"], at["level"]]
        else:
            guess = predicted[row["variable"]].isel(at).values
        corr, rmse = _corr_rmse(guess, full)
        # float64 sums of 128 terms in another order (< 128 eps relative), written with 15
        # decimals (abs 5e-16)
        assert row["corr"] == pytest.approx(corr, rel=128 * EPS, abs=1e-15)
        assert row["rmse"] == pytest.approx(rmse, rel=128 * EPS, abs=1e-15)
    assert "spread_2_crps_t2" in capsys.readouterr().out


def test_another_configuration_is_refused_before_anything_is_written(
    trained: tuple[Path, Path, Path],
) -> None:
    data, _, run = trained
    before = _hashes(run)
    message = f"--run-dir {run} holds a spread run with another configuration \\(lr: 0.001"
    with pytest.raises(ValueError, match=message) as caught:
        config = replace(SMALL, members=2, history=2, loss="crps", lr=0.01)
        train_spread(xr.open_dataset(data), config, run)
    assert str(caught.value).endswith("nothing was written: give this run another --run-dir")
    assert _hashes(run) == before


def test_train_from_the_command_line_and_refusals(
    trained: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    data, test, run = trained
    ds = xr.open_dataset(data)
    assert load_spread_model(run, checkpoint="last").history == 2
    with pytest.raises(ValueError, match=r"another configuration \(history: 2 in the run, 1 now"):
        train_spread(ds, replace(SMALL, members=2, history=1, loss="crps"), run)
    with pytest.raises(ValueError, match=r"members must be an integer in \[2, 4\] \(the ens"):
        train_spread(ds, SpreadConfig(members=5), tmp_path / "a")
    with pytest.raises(ValueError, match=r"history .* in \[1, 3\] \(the data have 3 lead times"):
        train_spread(ds, SpreadConfig(members=2, history=4), tmp_path / "a")
    with pytest.raises(ValueError, match=r"SpreadConfig.loss must be one of \('l1'"):
        SpreadConfig(loss="huber")
    with pytest.raises(KeyError, match=r"variables \['psi_truth'\] or their truth"):
        train_spread(ds, SpreadConfig(members=2, variables=("psi_truth",)), tmp_path / "a")
    with pytest.raises(ValueError, match=r"lat and lon must divide by 2\*\*depth = 16"):
        train_spread(ds, SpreadConfig(members=2, depth=4), tmp_path / "a")
    with pytest.raises(ValueError, match=r"ensemble, lead_days and levels come from the data"):
        train_spread(ds, SpreadConfig(members=2, ensemble=4), tmp_path / "a")
    with pytest.raises(RuntimeError, match="device type at start of device string: tpu"):
        train_spread(ds, SpreadConfig(members=2), tmp_path / "a", device="tpu")
    regional = ds.isel(lon=slice(4))  # 0 to 135 degrees east: no wrap-around
    with pytest.raises(ValueError, match=r"periodic 'lon' needs .* closing 360 degrees"):
        train_spread(regional, SpreadConfig(members=2, periodic=("lon",)), tmp_path / "a")
    assert not (tmp_path / "a").exists()  # nothing written for a bad input
    # unset, lon wraps exactly when the longitudes close the circle
    assert load_spread_model(run, checkpoint="last").periodic == ("lon",)
    train_spread(regional, replace(SMALL, members=2), tmp_path / "regional")
    assert load_spread_model(tmp_path / "regional", checkpoint="last").periodic == ()
    with pytest.raises(ValueError, match="use more members than the test data have"):
        evaluate_spread([run], xr.open_dataset(test).isel(member=[0]))
    assert read_spread_run(run)[0].ensemble == 4  # the training data's members
    with pytest.raises(ValueError, match=r"other sizes \(\{'.*run': 4\} members\) than the test"):
        evaluate_spread([run], xr.open_dataset(test).isel(member=[0, 1, 2]))
    with pytest.raises(FileNotFoundError, match="spread_run.json not found"):
        evaluate_spread([tmp_path], xr.open_dataset(test))
    with pytest.raises(ValueError, match=r"history .*\(the data have 1 lead times"):
        evaluate_spread([run], xr.open_dataset(test).isel(lead_time=[0]))
    later = xr.open_dataset(test).isel(lead_time=[0, 2])  # steps two days apart, not one
    with pytest.raises(ValueError, match=r"trained on lead times \[0.0, 1.0, 2.0\] days; the"):
        evaluate_spread([run], later)
    old = tmp_path / "old"
    old.mkdir()
    saved = json.loads((run / "spread_run.json").read_text())["config"]
    (old / "spread_run.json").write_text(json.dumps(saved))  # format 1 (formats: test_config.py)
    with pytest.raises(ValueError, match=r"spread run of format 1; .* reads format 7"):
        train_spread(ds, replace(SMALL, members=2, history=2, loss="crps"), old)
    with pytest.raises(ValueError, match="no test data given"):
        _spread_cli(["evaluate", "--run-dir", str(run)])
    new = tmp_path / "cli"
    argv = ["train", "--members", "3", "--run-dir", str(new), "--periodic", "lat", "lon"]
    assert _spread_cli([*argv, *TINY, str(data)]) == 0
    assert load_spread_model(new).periodic == ("lat", "lon")


def test_an_interrupted_run_resumes_to_the_uninterrupted_one(
    trained: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = xr.open_dataset(trained[0])
    loop = replace(SMALL.train, epochs=2, batch_size=4)
    config = replace(SMALL, members=2, history=2, choice="random", train=loop)
    assert train_spread(ds, config, tmp_path / "whole") == "completed"
    loss, calls = spread_train.spread_loss, []

    def stopping(model: torch.nn.Module, batch: dict[str, torch.Tensor], **kw: str) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 4:  # the first training step of epoch 1 (3 steps an epoch)
            os.kill(os.getpid(), signal.SIGUSR1)
        return loss(model, batch, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(spread_train, "spread_loss", stopping)
    assert train_spread(ds, config, tmp_path / "split") == "interrupted"
    monkeypatch.setattr(spread_train, "spread_loss", loss)
    assert train_spread(ds, config, tmp_path / "split") == "completed"
    metrics = [pd.read_csv(tmp_path / r / "metrics.csv") for r in ("whole", "split")]
    pd.testing.assert_frame_equal(*metrics)
    whole, split = (load_spread_model(tmp_path / r, checkpoint="last") for r in ("whole", "split"))
    assert all(
        torch.equal(a, b) for a, b in zip(whole.parameters(), split.parameters(), strict=True)
    )


def _data_parallel_run(data: Path, run: Path, batch_size: int) -> list[float]:
    """The first three logged step losses of a spread run, on every rank of the group."""
    import torch.distributed as dist

    config = replace(
        SMALL, members=2, loss="mse", train=replace(SMALL.train, batch_size=batch_size)
    )
    assert train_spread(xr.open_dataset(data), config, run) == "completed"
    if dist.is_initialized():
        dist.barrier()  # rank 0 has written and closed the run's files
    assert load_spread_model(run, checkpoint="last").members == 2  # the plain model's weights
    log = pd.read_csv(run / "metrics.csv")
    return log[(log.split == "train_step") & (log.metric == "loss")]["value"].tolist()[:3]


@pytest.mark.xdist_group("weather_spread_ddp")
def test_two_ranks_train_one_spread_model_on_the_batches_of_one_process(
    trained: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    from sciml.distributed import spawn

    data = trained[0]
    two = spawn(_data_parallel_run, 2, data, tmp_path / "dp", 2)[0]
    one = _data_parallel_run(data, tmp_path / "single", 4)
    # step 1: the global loss of the same 4 samples; steps 2 and 3: after updates from the
    # gradient averaged over both ranks. Adam's first step is about lr * sign(gradient), so
    # step 2 barely tells; at step 3 one rank's own gradients are off by 1.5e-4 relative
    # (measured), 5x the bound below. Each loss is a mean of 1,024 float32 terms (4 samples,
    # 4 channels, 8 x 8 points), which torch sums pairwise (error ~ log2(1024) = 10 eps),
    # and the replicas' means are averaged once more; 256 eps bounds that with room.
    assert two == pytest.approx(one, rel=256 * torch.finfo(torch.float32).eps)


def test_a_seed_sweep_trains_fused_into_folders_of_their_own(
    trained: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _, _ = trained
    options = ["--members", "2", *TINY]
    sweep = tmp_path / "sweep"
    assert (
        _spread_cli(["train", str(data), "--run-dir", str(sweep), "--seeds", "3,4", *options]) == 0
    )
    assert f"run folder {sweep / 'seed4'}" in capsys.readouterr().out
    alone = tmp_path / "alone"
    assert _spread_cli(["train", str(data), "--run-dir", str(alone), "--seed", "4", *options]) == 0
    for name in ("spread_run.json",):
        assert (sweep / "seed4" / name).read_text() == (alone / name).read_text(), name
    assert sorted(p.name for p in (sweep / "seed4").rglob("*")) == sorted(
        p.name for p in alone.rglob("*")
    )
    assert read_spread_run(sweep / "seed3")[0].train.seed == 3
