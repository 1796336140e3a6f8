"""train_postprocessors: a seed and learning-rate sweep trained fused, each run as if alone.

That a fused step is the separate runs' step is shown in float64
(``tests/training/test_fused.py``, ``test_fused_loop.py``); these runs are the product's,
in float32, where the fused and separate computations round differently once the
weights move. Before the first update they agree: every model starts at the raw
ensemble's Gaussian (a zero last layer), so the first logged loss of each run differs
only in the order its mean adds ``n`` terms, at most ``(n - 1) u`` relative.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from sciml.cli import main
from sciml.training import TrainConfig
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.record import read_run
from sciml.weather.postprocess.train import train_postprocessor, train_postprocessors
from tests.weather.postprocess.test_train_evaluate import _write

#: A batch's CRPS terms: 4 samples x 4 channels (2 variables x 2 levels) x 8 x 8.
TERMS = 4 * 4 * 8 * 8
FIRST_LOSS = (TERMS - 1) * float(np.finfo(np.float32).eps) / 2
RUNS = [(0, 1e-3), (1, 1e-3), (2, 3e-3)]


def _last(run_dir: Path, metric: str) -> float:
    rows = pd.read_csv(run_dir / "metrics.csv")
    return float(rows[rows["metric"] == metric]["value"].iloc[-1])


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("fused") / "train.nc", dates=6, seed=0)


@pytest.fixture(scope="module")
def data(path: Path) -> xr.Dataset:
    return xr.open_dataset(path)


def _configs(model: str) -> list[PostprocessConfig]:
    loop = TrainConfig(epochs=2, batch_size=4, progress=False, tensorboard=False)
    base = PostprocessConfig(model=model, members=3, train=loop)
    return [replace(base, lr=lr, train=replace(loop, seed=seed)) for seed, lr in RUNS]


@pytest.mark.parametrize("model", ["mlp", "pooled"])
def test_a_fused_sweep_writes_the_separate_runs(
    data: xr.Dataset, tmp_path: Path, model: str
) -> None:
    configs = _configs(model)
    fused = [tmp_path / "fused" / f"run{k}" for k in range(len(configs))]
    assert train_postprocessors(data, configs, fused) == ["completed"] * len(configs)
    for config, run_dir in zip(configs, fused, strict=True):
        alone = tmp_path / "separate" / run_dir.name
        assert train_postprocessor(data, config, alone) == "completed"
        assert sorted(p.name for p in run_dir.rglob("*")) == sorted(
            p.name for p in alone.rglob("*")
        )
        for name in ("weather_run.json",):
            assert (run_dir / name).read_text() == (alone / name).read_text(), name
        assert read_run(run_dir)[0] == read_run(alone)[0]
        ours, theirs = pd.read_csv(run_dir / "metrics.csv"), pd.read_csv(alone / "metrics.csv")
        assert ours.drop(columns="value").equals(theirs.drop(columns="value"))
        first, expected = ours["value"].iloc[0], theirs["value"].iloc[0]
        assert abs(first - expected) <= FIRST_LOSS * abs(expected)
    # the runs are three: their own seeds and rates
    losses = [_last(d, "val_loss") for d in fused]
    assert len(set(losses)) == len(losses)


def test_sweeps_that_cannot_be_fused_are_refused_before_writing(
    data: xr.Dataset, tmp_path: Path
) -> None:
    configs = _configs("mlp")
    dirs = [tmp_path / f"run{k}" for k in range(2)]
    with pytest.raises(ValueError, match="configuration 1 differs from configuration 0"):
        train_postprocessors(data, [configs[0], replace(configs[1], members=2)], dirs)
    with pytest.raises(ValueError, match="EMOS has no seed or learning rate to sweep"):
        emos = PostprocessConfig(model="emos", members=3)
        train_postprocessors(data, [emos, emos], dirs)
    with pytest.raises(ValueError, match="one run folder per configuration"):
        train_postprocessors(data, configs, dirs)
    train_postprocessor(data, replace(configs[1], members=2), dirs[1])
    before = sorted(p.name for p in dirs[1].rglob("*"))
    with pytest.raises(ValueError, match="another"):  # the second folder holds another run
        train_postprocessors(data, configs[:2], dirs)
    assert not dirs[0].exists() and sorted(p.name for p in dirs[1].rglob("*")) == before


def test_the_command_line_sweeps_seeds_and_rates_into_folders_of_their_own(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ["weather", "train", str(path), "--model", "mlp", "--members", "3"]
    command += ["--epochs", "1", "--quiet", "--run-dir", str(tmp_path / "sweep")]
    assert main([*command, "--seeds", "0,1", "--lr", "1e-3,3e-4"]) == 0
    out = capsys.readouterr().out
    for seed in (0, 1):
        for rate in (1e-3, 3e-4):
            run_dir = tmp_path / "sweep" / f"seed{seed}-lr{rate:g}"
            assert f"mlp on 3 members: completed, run folder {run_dir}" in out
            config, _ = read_run(run_dir)
            assert (config.train.seed, config.lr) == (seed, rate)
    assert main([*command[:-1], str(tmp_path / "seeds"), "--seeds", "2,3"]) == 0
    assert sorted(p.name for p in (tmp_path / "seeds").iterdir()) == ["seed2", "seed3"]
    assert main([*command[:-1], str(tmp_path / "both"), "--seed", "4", "--seeds", "2,3"]) == 1
    assert "give --seed (one run) or --seeds (several), not both" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*command, "--seeds", "2,2"])
    assert "'2,2' gives a value twice" in capsys.readouterr().err
