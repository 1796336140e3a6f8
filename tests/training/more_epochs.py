"""A finished run trained on for more epochs: the check each workflow's test makes."""

import csv
from collections.abc import Callable
from pathlib import Path

#: The row ``metrics.csv`` writes once at every epoch's end.
ENDS = ("epoch", "train_loss")


def epochs_logged(run_dir: Path) -> list[int]:
    """The epochs (1-based) whose end ``metrics.csv`` records, in order, once each."""
    with open(run_dir / "metrics.csv", newline="") as handle:
        rows = csv.DictReader(handle)
        return [int(r["epoch"]) + 1 for r in rows if (r["split"], r["metric"]) == ENDS]


def assert_trains_on(run: Callable[[list[str]], int], run_dir: Path) -> None:
    """``run(["--epochs", "1"])`` then ``run(["--epochs", "2"])`` in ``run_dir``: epoch 2 trains.

    The second command continues the finished run (it is not refused as another
    configuration, nor started again): ``metrics.csv`` shows epochs 1 and 2, each once.
    """
    assert run(["--epochs", "1"]) == 0
    assert epochs_logged(run_dir) == [1]
    first = (run_dir / "checkpoints" / "last.pt").read_bytes()
    assert run(["--epochs", "2"]) == 0
    assert epochs_logged(run_dir) == [1, 2]
    assert (run_dir / "checkpoints" / "last.pt").read_bytes() != first
