import csv
from collections.abc import Mapping
from pathlib import Path

import pytest

from sciml.training.run_log import METRIC_COLUMNS, CsvLogger, MetricsLog, open_metrics_log


class _Recorder:
    """A logger of its own, behind the same two methods."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []
        self.closed = False

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.calls.append((dict(metrics), step))

    def close(self) -> None:
        self.closed = True


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def test_every_logger_gets_the_same_metrics_and_rows_are_counted() -> None:
    first, second = _Recorder(), _Recorder()
    log = MetricsLog([first, second], rows=3)
    log.log({"train_step/loss": 0.5, "train_step/acc": 1.0}, 7)
    log.close()
    assert first.calls == second.calls == [({"train_step/loss": 0.5, "train_step/acc": 1.0}, 7)]
    assert first.closed and second.closed and log.rows == 5


def test_csv_is_long_form_and_keeps_only_the_rows_a_checkpoint_saw(tmp_path: Path) -> None:
    epoch = [0]
    log = open_metrics_log(
        tmp_path, rows=0, tensorboard=False, enabled=True, epoch=lambda: epoch[0]
    )
    log.log({"train_step/loss": 0.25}, 1)
    epoch[0] = 1
    log.log({"epoch/train_loss": 0.125, "epoch/lr": 0.01}, 2)
    log.close()
    path = tmp_path / "metrics.csv"
    assert _rows(path) == [
        list(METRIC_COLUMNS),
        ["0", "1", "train_step", "loss", "0.25"],
        ["1", "2", "epoch", "train_loss", "0.125"],
        ["1", "2", "epoch", "lr", "0.01"],
    ]
    CsvLogger(path, rows=1, epoch=lambda: 0).close()  # a resumed run that saw one row
    assert _rows(path) == [list(METRIC_COLUMNS), ["0", "1", "train_step", "loss", "0.25"]]


def test_ranks_other_than_zero_write_nothing_but_count(tmp_path: Path) -> None:
    log = open_metrics_log(tmp_path, rows=2, tensorboard=True, enabled=False, epoch=lambda: 0)
    log.log({"epoch/loss": 1.0}, 1)
    assert log.rows == 3 and not any(tmp_path.iterdir())


@pytest.mark.parametrize("key", ["loss", "/loss", "epoch/"])
def test_metric_names_without_a_split_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="metric names must read '<split>/<name>'"):
        MetricsLog([_Recorder()], rows=0).log({key: 1.0}, 1)
