"""sciml.training.batches: micro-batches, and loader workers that persist yet resume exactly."""

import csv
import gc
import multiprocessing
import os
import signal
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from sciml.training import TrainConfig, fit
from sciml.training.batches import EpochLoader, batch_seed, micro_batches


def test_micro_batches_split_a_batch_in_order() -> None:
    assert micro_batches([5, 6, 7, 8, 9], 2) == [[5, 6], [7, 8, 9]]
    assert micro_batches([5, 6, 7, 8, 9], 5) == [[5], [6], [7], [8], [9]]
    assert micro_batches([5], 3) == [[5]]
    assert batch_seed(0, 1, 2) == batch_seed(0, 1, 2) != batch_seed(0, 1, 3)


class _Noisy(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A random transform drawn in the loader worker, and the worker's pid."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((2,), float(i)) + torch.rand(2)
        return x, torch.tensor([float(os.getpid())])


def _run(run_dir: Path, *, interrupt_at: int | None = None) -> set[float]:
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    pids: set[float] = set()
    calls = {"n": 0}

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == interrupt_at:
            os.kill(os.getpid(), signal.SIGUSR1)
        pids.update(batch[1].flatten().tolist())
        return model(batch[0]).square().mean()

    config = TrainConfig(epochs=3, batch_size=4, num_workers=1, progress=False, tensorboard=False)
    fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        _Noisy(),
        loss_fn,
        run_dir=run_dir,
        config=config,
    )
    return pids


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_workers_persist_and_random_transforms_resume_exactly(tmp_path: Path) -> None:
    # Before: a new loader (new workers) each epoch, seeded per worker, not per batch.
    assert len(_run(tmp_path / "straight")) == 1  # one worker process for all 3 epochs
    _run(tmp_path / "resumed", interrupt_at=5)  # second step of epoch 1
    _run(tmp_path / "resumed")
    assert _rows(tmp_path / "resumed") == _rows(tmp_path / "straight")
    losses = [r["value"] for r in _rows(tmp_path / "straight") if r["split"] == "train_step"]
    assert len(set(losses)) == len(losses) == 9


def test_fit_stops_its_loader_workers_before_it_returns(tmp_path: Path) -> None:
    # Before: they lived on until the garbage collector freed the loop (a reference
    # cycle), or were killed when the process exited, losing their clean-up at exit
    # (in spawned ranks, the semaphores `sciml demo` was warned about).
    gc.disable()  # the check must not depend on when the collector runs
    try:
        workers = {int(pid) for pid in _run(tmp_path / "run")}
        alive = {child.pid for child in multiprocessing.active_children()}
    finally:
        gc.enable()
    assert len(workers) == 1 and os.getpid() not in workers
    assert not workers & alive


class _LoggedReads(Dataset[torch.Tensor]):
    """A random draw per sample (seeded per batch by the loader); each read logged to a file."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        with self.log.open("a") as out:
            out.write(f"{index}\n")
        return torch.rand(1)


def _reads(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()] if log.exists() else []


def test_the_next_epoch_is_read_ahead_with_the_draws_it_would_have_had(tmp_path: Path) -> None:
    config = TrainConfig(epochs=2, batch_size=1, num_workers=1, seed=3)
    first, second = [[0], [1], [2]], [[5], [6], [7]]
    ahead = EpochLoader(_LoggedReads(tmp_path / "a.log"), config, None, pin_memory=False)
    epoch0 = list(ahead.epoch(first, epoch=0, then=second))
    deadline = time.monotonic() + 60
    while 5 not in _reads(tmp_path / "a.log") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 5 in _reads(tmp_path / "a.log"), "epoch 1's first batch was not read ahead"
    epoch1 = list(ahead.epoch(second, epoch=1))
    assert sorted(_reads(tmp_path / "a.log")) == [0, 1, 2, 5, 6, 7]  # each read once

    plain = EpochLoader(_LoggedReads(tmp_path / "b.log"), config, None, pin_memory=False)
    assert torch.equal(torch.cat(epoch0), torch.cat(list(plain.epoch(first, epoch=0))))
    assert torch.equal(torch.cat(epoch1), torch.cat(list(plain.epoch(second, epoch=1))))
    # batches other than those read ahead are read afresh, in the order asked for
    other = [[4], [3]]
    list(ahead.epoch(second, epoch=1, then=second))
    assert torch.equal(
        torch.cat(list(ahead.epoch(other, epoch=2))),
        torch.cat(list(plain.epoch(other, epoch=2))),
    )
