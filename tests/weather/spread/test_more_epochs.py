"""``sciml weather spread train --epochs N`` in a finished run's folder trains it on."""

from pathlib import Path

from tests.training.more_epochs import assert_trains_on
from tests.weather.spread.test_data import write_tiny
from tests.weather.spread.test_train import _spread_cli


def test_spread_train_continues_a_finished_run(tmp_path: Path) -> None:
    data = write_tiny(tmp_path / "train.nc", dates=5)
    run = tmp_path / "run"
    command = ["train", "--members", "2", "--quiet", "--run-dir", str(run), str(data)]
    assert_trains_on(lambda more: _spread_cli([*command, *more]), run)
