"""sciml.distributed.spawn: what its ranks leave behind when they exit."""

import multiprocessing
import subprocess
import sys
from multiprocessing.synchronize import Lock
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from sciml.training import TrainConfig, fit

pytestmark = pytest.mark.xdist_group("spawn_cleanup")

ROOT = Path(__file__).resolve().parents[2]

#: The process-wide lock a reading process makes at its first read.
_LOCK: list[Lock] = []


class _LockedReads(Dataset[torch.Tensor]):
    """Reads under a lock made at the first read, as numcodecs' Blosc makes its mutex."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        if not _LOCK:
            _LOCK.append(multiprocessing.Lock())
        with _LOCK[0]:
            return torch.full((2,), float(index))


def _square(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).square().mean()


def _train_with_a_loader_worker(run_dir: str) -> str:
    """Rank function: one epoch of ``fit`` read by one loader worker."""
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    config = TrainConfig(epochs=1, batch_size=2, num_workers=1, progress=False, tensorboard=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return fit(model, optimizer, _LockedReads(), _square, run_dir=run_dir, config=config).status


def test_a_rank_with_loader_workers_leaves_no_semaphore(tmp_path: Path) -> None:
    # A rank's default start method is its own (forkserver or spawn, not fork), so a
    # lock made in its loader worker is registered with the resource tracker; before,
    # fit left the worker running and the rank's exit killed it before it could
    # unregister the lock:
    # "resource_tracker: There appear to be 1 leaked semaphore objects"
    code = (
        "from sciml.distributed.spawn import spawn\n"
        "from tests.distributed.test_spawn import _train_with_a_loader_worker\n"
        f"print(spawn(_train_with_a_loader_worker, 1, {str(tmp_path / 'run')!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['completed']"
    assert "resource_tracker" not in done.stderr, done.stderr
