"""The driver of K >= 1 runs: fit (K = 1) treats a resumed run as fit_fused does."""

from pathlib import Path

from tests.training.test_loop import _rows, _train


def test_a_run_that_stopped_early_stays_stopped_when_resumed(tmp_path: Path) -> None:
    # val_loss falls every epoch, so in "max" mode it never improves after epoch 1: the run
    # stops after epoch 3; the same call again trains nothing (fit_fused's rule: a run that
    # ended stays ended; before, fit trained one more epoch)
    _, stopped = _train(tmp_path, epochs=10, patience=2, mode="max")
    assert (stopped.status, stopped.epoch) == ("early_stopped", 3)
    rows = _rows(tmp_path)
    _, again = _train(tmp_path, epochs=10, patience=2, mode="max")
    assert (again.status, again.epoch, again.global_step) == (
        "early_stopped",
        3,
        stopped.global_step,
    )
    assert _rows(tmp_path) == rows
