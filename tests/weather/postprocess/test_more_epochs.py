"""``sciml weather train --epochs N`` in a finished run's folder trains it on (not refused)."""

from pathlib import Path

import pytest

from sciml.cli import main
from tests.training.more_epochs import assert_trains_on
from tests.weather.postprocess.test_train_evaluate import _write


@pytest.mark.parametrize("model", ["mlp", "unet"])
def test_weather_train_continues_a_finished_run(tmp_path: Path, model: str) -> None:
    data = _write(tmp_path / "train.nc", dates=6, seed=0)
    run = tmp_path / "run"
    command = ["weather", "train", "--model", model, "--members", "3", "--quiet"]
    assert_trains_on(lambda more: main([*command, *more, "--run-dir", str(run), str(data)]), run)


def test_a_seed_sweep_continues_each_run(tmp_path: Path) -> None:
    data = _write(tmp_path / "train.nc", dates=6, seed=0)
    run = tmp_path / "sweep"
    command = ["weather", "train", "--model", "mlp", "--members", "3", "--quiet", "--seeds", "1,2"]
    assert main([*command, "--epochs", "1", "--run-dir", str(run), str(data)]) == 0
    assert main([*command, "--epochs", "2", "--run-dir", str(run), str(data)]) == 0
    from tests.training.more_epochs import epochs_logged

    assert [epochs_logged(run / f"seed{s}") for s in (1, 2)] == [[1, 2], [1, 2]]
