"""What fit tells the person running it: epoch lines, the closing summary, the bar."""

import functools
import logging
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from tqdm.auto import tqdm

from sciml.distributed import spawn
from sciml.progress import bar_visible, status_lines
from sciml.training import batches as train_batches
from sciml.training import loop as training
from sciml.training import trainer
from sciml.training.config import TrainConfig
from tests.scripts.train_job import make_problem, mse
from tests.training.test_loop import CONFIG, _rows, _train

# Values are shown with 5 significant digits: rounding moves one by at most half a unit
# of its 5th digit, 5e-5 of it.
SHOWN = 5e-5
NUMBER = r"([-+0-9.e]+|nan|inf)"


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sciml.training"]


def _epoch_values(run_dir: Path) -> dict[int, dict[str, float]]:
    """metrics.csv's epoch rows, by epoch counted from 1 as the lines count."""
    values: dict[int, dict[str, float]] = {}
    for row in _rows(run_dir):
        if row["split"] == "epoch":
            values.setdefault(int(row["epoch"]) + 1, {})[row["metric"]] = float(row["value"])
    return values


@pytest.fixture
def info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="sciml")
    return caplog


def test_one_line_per_epoch_with_the_logged_losses_and_a_summary(
    tmp_path: Path, info: pytest.LogCaptureFixture
) -> None:
    _, result = _train(tmp_path)
    lines = _lines(info)
    assert (
        lines[0]
        == f"training in {tmp_path}: 4 epochs of 7 steps, 32 training samples, 8 validation"
    )
    logged = _epoch_values(tmp_path)
    epoch_lines = [line for line in lines if line.startswith("epoch ")]
    assert len(epoch_lines) == 4
    for epoch, line in enumerate(epoch_lines, start=1):
        found = re.fullmatch(
            rf"epoch {epoch}/4: train_loss {NUMBER}, val_loss {NUMBER}( \(best\))?, "
            rf"[0-9.]+ s, {NUMBER} samples/s",
            line,
        )
        assert found, line
        assert float(found[1]) == pytest.approx(logged[epoch]["train_loss"], rel=SHOWN)
        assert float(found[2]) == pytest.approx(logged[epoch]["val_loss"], rel=SHOWN)
    best = min(logged, key=lambda epoch: logged[epoch]["val_loss"])
    assert "(best)" in epoch_lines[best - 1]
    assert re.fullmatch(
        rf"completed 4 epochs \(28 steps\) in [0-9.]+ s; "
        rf"last checkpoint {tmp_path}/checkpoints/last.pt",
        lines[-2],
    ), lines[-2]
    found = re.fullmatch(
        rf"best epoch {best}: val_loss {NUMBER}, checkpoint {tmp_path}/checkpoints/best.pt",
        lines[-1],
    )
    assert found, lines[-1]
    assert float(found[1]) == pytest.approx(result.best, rel=SHOWN)


def test_an_interrupted_run_says_where_it_stopped_and_the_resumed_one_where_it_goes_on(
    tmp_path: Path, info: pytest.LogCaptureFixture
) -> None:
    _train(tmp_path, preempt_after=9)  # epoch 2 (7 steps each), after its second step
    stopped = _lines(info)
    assert stopped[-2].startswith("interrupted by a signal in epoch 2/4 after step 2 of 7 (step 9")
    assert f"checkpoint {tmp_path}/checkpoints/last.pt; run the same command again" in stopped[-2]
    assert stopped[-1].startswith("best epoch 1: val_loss ")
    info.clear()
    _train(tmp_path)
    resumed = _lines(info)
    assert resumed[0] == (
        f"resuming the run in {tmp_path} from checkpoints/last.pt: epoch 2/4 after step 2 "
        "of 7 (step 9 of the run)"
    )
    assert [line.split(":")[0] for line in resumed[1:-2]] == ["epoch 2/4", "epoch 3/4", "epoch 4/4"]
    assert resumed[-2].startswith("completed 4 epochs (28 steps) in ")
    logged = _epoch_values(tmp_path)
    best = min(logged, key=lambda epoch: logged[epoch]["val_loss"])
    assert resumed[-1].startswith(f"best epoch {best}: val_loss ")


def test_a_completed_run_run_again_says_it_is_complete(
    tmp_path: Path, info: pytest.LogCaptureFixture
) -> None:
    _train(tmp_path)
    info.clear()
    _train(tmp_path)  # the same call again, as a second `make demo` makes it
    again = _lines(info)
    assert again[0] == (
        f"the run in {tmp_path} is complete: 4 epochs (28 steps) in checkpoints/last.pt, "
        "nothing left to train (more epochs train on)"
    )
    assert not any(line.startswith(("resuming", "epoch 5/4")) for line in again)
    assert again[-2].startswith("completed 4 epochs (28 steps) in ")


def test_an_early_stop_names_the_monitor_and_the_kept_epoch(
    tmp_path: Path, info: pytest.LogCaptureFixture
) -> None:
    # val_loss falls every epoch, so in "max" mode epoch 1 stays the best
    _train(tmp_path, epochs=10, patience=2, mode="max")
    lines = _lines(info)
    assert lines[-2].startswith(
        "stopped early after epoch 3/10: val_loss did not improve for 2 epochs"
    )
    assert lines[-1].startswith("best epoch 1: val_loss ")


def test_the_library_prints_nothing_unless_asked(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _train(tmp_path / "quiet", progress=True)  # stderr is no terminal here: no bar
    assert capfd.readouterr().err == ""
    with status_lines():
        _train(tmp_path / "shown", epochs=1)
    err = capfd.readouterr().err
    assert err.startswith("training in ") and "\nepoch 1/1: train_loss " in err
    assert not logging.getLogger("sciml").handlers  # the handler goes with the block


def test_the_bar_shows_the_running_loss_on_a_terminal_or_when_asked(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # redraw at every step, however fast
    monkeypatch.setattr(train_batches, "tqdm", functools.partial(tqdm, mininterval=0))
    _train(tmp_path / "asked", epochs=1, progress="always")
    err = capfd.readouterr().err
    assert "epoch 1/1" in err and "7/7" in err and re.search(rf"loss={NUMBER}", err)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert bar_visible(True) and bar_visible("always") and not bar_visible(False)
    _train(tmp_path / "terminal", epochs=1, progress=True)
    assert "loss=" in capfd.readouterr().err


def test_a_bad_progress_option_is_named() -> None:
    with pytest.raises(
        ValueError, match=r"TrainConfig.progress must be True, False or 'always', got 'yes'"
    ):
        TrainConfig(progress="yes")  # type: ignore[arg-type]


def _epoch_samples(run_dir: str, replica: tuple[int, int] | None) -> list[int]:
    """The training samples each epoch line counts, on 2 ranks (DDP when each is a replica)."""
    counted: list[int] = []

    def spy(*args: object, samples: int, **kwargs: object) -> str:
        counted.append(samples)
        return "an epoch"

    trainer.epoch_line = spy  # type: ignore[assignment]  # this spawned process only
    model, train, _ = make_problem()
    model[2].p = 0.0
    wrapped = nn.parallel.DistributedDataParallel(model) if replica is None else model
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.05)
    config = TrainConfig(**(CONFIG | {"epochs": 2, "batch_size": 4}))
    training.fit(wrapped, optimizer, train, mse, run_dir=run_dir, config=config, replica=replica)
    return counted


@pytest.mark.parametrize(
    ("replica", "name"), [(None, "two replicas"), ((0, 1), "one replica on two ranks")]
)
def test_the_epoch_line_counts_each_training_sample_once(
    tmp_path: Path, replica: tuple[int, int] | None, name: str
) -> None:
    # 32 training samples an epoch, however the ranks share them
    assert spawn(_epoch_samples, 2, str(tmp_path / "run"), replica) == [[32, 32], [32, 32]], name
