"""sciml.training and sciml.checkpoint: exact resume, signals, early stop, bad checkpoints."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from sciml.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from sciml.distributed import spawn
from sciml.training import EXIT_REQUEUE, TrainConfig, epoch_batches, fit
from tests.scripts.train_job import make_problem, mse

SCRIPT = Path(__file__).parent / "scripts" / "train_job.py"
CONFIG = dict(epochs=4, batch_size=5, progress=False, tensorboard=False)


def _train(run_dir: Path, *, interrupt_at: int | None = None, **overrides):
    model, train, val = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    calls = {"n": 0}

    def loss_fn(model, batch):
        calls["n"] += 1
        if calls["n"] == interrupt_at:
            os.kill(os.getpid(), signal.SIGUSR1)  # as Slurm does before the time limit
        return mse(model, batch)

    config = TrainConfig(**(CONFIG | overrides))
    result = fit(model, optimizer, train, loss_fn, run_dir=run_dir, config=config,
                 val_dataset=val, scheduler=scheduler)  # fmt: skip
    return model, result


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_epoch_batches_cover_each_sample_once_per_epoch() -> None:
    batches = epoch_batches(23, 4, epoch=3, seed=7)
    assert sorted(i for b in batches for i in b) == list(range(23))
    assert batches == epoch_batches(23, 4, epoch=3, seed=7)
    assert batches != epoch_batches(23, 4, epoch=4, seed=7)
    halves = [epoch_batches(23, 4, epoch=3, seed=7, replica=(r, 2)) for r in range(2)]
    assert sum(len(b) for h in halves for b in h) == 24  # padded to equal shares
    assert {i for h in halves for b in h for i in b} == set(range(23))


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path: Path) -> None:
    reference, done = _train(tmp_path / "straight")
    assert done.status == "completed" and done.epoch == 4

    _, stopped = _train(tmp_path / "resumed", interrupt_at=11)  # 7 steps, 2 val calls, then
    assert stopped.status == "interrupted" and stopped.global_step == 9
    model, resumed = _train(tmp_path / "resumed")
    assert resumed.status == "completed" and resumed.global_step == done.global_step
    for (name, a), b in zip(reference.state_dict().items(), model.state_dict().values(),
                            strict=True):  # fmt: skip
        assert torch.equal(a, b), name
    assert _rows(tmp_path / "straight") == _rows(tmp_path / "resumed")
    assert resumed.history == done.history


def test_metrics_csv_and_best_checkpoint(tmp_path: Path) -> None:
    _, result = _train(tmp_path)
    rows = _rows(tmp_path)
    steps = [r for r in rows if r["split"] == "train_step"]
    assert len(steps) == result.global_step == 4 * 7  # 32 samples in batches of 5
    epochs = {(r["epoch"], r["metric"]) for r in rows if r["split"] == "epoch"}
    assert {("0", "train_loss"), ("0", "val_loss"), ("3", "lr")} <= epochs
    val = [float(r["value"]) for r in rows if r["metric"] == "val_loss"]
    assert result.best == min(val)
    assert (tmp_path / "checkpoints" / "best.pt").exists()
    assert [h["val_loss"] for h in result.history] == val


def test_early_stop_after_patience(tmp_path: Path) -> None:
    # val_loss falls every epoch, so in "max" mode it never improves after epoch 1
    _, result = _train(tmp_path, epochs=10, patience=2, mode="max")
    assert result.status == "early_stopped"
    assert result.epoch == 3


def test_sigterm_from_outside_checkpoints_and_resume_matches(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    subprocess.run([sys.executable, str(SCRIPT), str(straight)], check=True, timeout=120)
    resumed = tmp_path / "resumed"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(resumed), "--slow", "0.05"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    metrics = resumed / "metrics.csv"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not metrics.exists() or len(_rows(resumed)) < 8):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_REQUEUE, out
    assert "interrupted at step" in out
    subprocess.run([sys.executable, str(SCRIPT), str(resumed)], check=True, timeout=120)
    a = torch.load(straight / "final.pt", weights_only=True)
    b = torch.load(resumed / "final.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_truncated_checkpoint_gives_clear_error(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    path = save_checkpoint(tmp_path / "last.pt", model)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path, model)
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path, model)
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match="not a sciml checkpoint"):
        load_checkpoint(path, model)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt", model)


def test_checkpoint_of_another_model_gives_clear_error(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    path = save_checkpoint(tmp_path / "ckpt.pt", model)
    other = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))
    with pytest.raises(CheckpointError, match=r"another model(.|\n)*0.weight: saved \[16, 6\]"):
        load_checkpoint(path, other)


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    path = save_checkpoint(tmp_path / "last.pt", model)
    before = path.read_bytes()

    class Unsavable(nn.Module):
        def state_dict(self, *args, **kwargs):  # noqa: ANN002, ANN003
            return {"x": torch.zeros(1), "bad": lambda: None}

    with pytest.raises(Exception):  # noqa: B017 - whatever pickling raises
        save_checkpoint(path, Unsavable())
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_non_finite_loss_is_reported(tmp_path: Path) -> None:
    model, train, _ = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(FloatingPointError, match="loss is nan at epoch 0, step 0"):
        fit(model, optimizer, train, lambda m, b: mse(m, b) * float("nan"), run_dir=tmp_path,
            config=TrainConfig(**CONFIG))  # fmt: skip


def _train_ddp(run_dir: str) -> dict[str, torch.Tensor]:
    model, train, _ = make_problem()
    model[2].p = 0.0  # dropout draws differ between replicas; switch it off
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    fit(ddp, optimizer, train, mse, run_dir=run_dir,
        config=TrainConfig(**(CONFIG | {"batch_size": 4})))  # fmt: skip
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_two_data_parallel_replicas_match_one_process(tmp_path: Path) -> None:
    model, train, _ = make_problem()
    model[2].p = 0.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    fit(model, optimizer, train, mse, run_dir=tmp_path / "single",
        config=TrainConfig(**(CONFIG | {"batch_size": 8})))  # fmt: skip
    weights = spawn(_train_ddp, 2, str(tmp_path / "ddp"))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(weights[0][name], value, rtol=1e-5, atol=1e-6)
        assert torch.equal(weights[0][name], weights[1][name])


def test_tensorboard_events_when_installed(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    _train(tmp_path, epochs=1, tensorboard=True)
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 100
