"""A run folder belongs to one run: its lock and the record a resumed run must match.

:func:`lock_run_dir` holds ``run_dir/run.lock`` (an exclusive ``flock``, released
by the kernel when the process dies) so that two processes never write one
run folder; :func:`run_record` describes a run, and :func:`differences` lists
what a resumed run changed, so that :func:`sciml.training.fit` can refuse it.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import Any, TypeAlias

import torch
from torch import nn

from sciml.checkpoint import model_signature
from sciml.distributed import all_reduce_cpu

__all__ = [
    "LOCK_NAME",
    "PlainValue",
    "RunDirError",
    "RunLock",
    "differences",
    "lock_run_dir",
    "plain",
    "run_record",
]

#: Name of the lock file inside a run folder.
LOCK_NAME = "run.lock"


class RunDirError(RuntimeError):
    """A run folder is in use by another process, or holds a run with another configuration."""


#: JSON-like data: what :func:`plain` returns.
PlainValue: TypeAlias = "None | bool | int | float | str | list[PlainValue] | dict[str, PlainValue]"


def plain(value: Any) -> PlainValue:
    """``value`` as plain Python data that compares by value and loads with ``weights_only``."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def run_record(
    config: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    sizes: tuple[int, int | None],
    replicas: int,
) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote the checkpoint.

    Args:
        config: The loop options that must not change on resume.
        model: The model (class and parameter shapes).
        optimizer: The optimiser (class and hyperparameters, before any step).
        scheduler: The learning-rate scheduler (class) or ``None``.
        sizes: Lengths of the training and validation sets (``None``: no validation).
        replicas: Number of data-parallel replicas.
    """
    groups = [
        {k: plain(v) for k, v in group.items() if k != "params"}
        | {"parameters": len(group["params"])}
        for group in optimizer.param_groups
    ]
    return {
        "config": config,
        "model": type(model).__qualname__,
        "parameters": model_signature(model),
        "optimizer": type(optimizer).__qualname__,
        "param_groups": groups,
        "scheduler": None if scheduler is None else type(scheduler).__qualname__,
        "train_samples": sizes[0],
        "val_samples": sizes[1],
        "replicas": replicas,
    }


def differences(saved: Any, current: Any, *, where: str = "") -> list[str]:
    """``where: saved -> current`` for every leaf that differs."""
    if isinstance(saved, dict) and isinstance(current, dict):
        return [
            line
            for key in sorted(set(saved) | set(current), key=str)
            for line in differences(
                saved.get(key), current.get(key), where=f"{where}.{key}".strip(".")
            )
        ]
    groups = isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current)
    if groups and all(isinstance(v, dict) for v in saved + current):
        return [
            line
            for i, (a, b) in enumerate(zip(saved, current, strict=True))
            for line in differences(a, b, where=f"{where}[{i}]")
        ]
    return [] if saved == current else [f"{where}: {saved!r} in the run, {current!r} now"]


class RunLock:
    """An exclusive ``flock`` on ``run_dir/<name>`` that names its holder's pid.

    Also a context manager: ``with RunLock(run_dir, name="model.json.lock"): ...``
    creates the folder, acquires and releases.
    """

    def __init__(self, run_dir: Path, *, name: str = LOCK_NAME) -> None:
        """The lock file ``run_dir/name``, not yet acquired."""
        self.path = run_dir / name
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        """Create the folder and acquire the lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        """Release the lock."""
        self.release()

    def acquire(self) -> None:
        """Lock without waiting; :class:`RunDirError` naming the holder if it is taken."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirError(
                f"{self.path.parent} is in use by another training run ({holder}); wait for it "
                "to finish, or give this run another run_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Unlock (the file stays: removing it would race with a new holder)."""
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def lock_run_dir(run_dir: Path, rank: int) -> RunLock:
    """Rank 0 locks the run folder; every rank learns whether it could."""
    lock = RunLock(run_dir)
    error: RunDirError | None = None
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire()
        except RunDirError as err:
            error = err
    if all_reduce_cpu(torch.tensor([int(error is not None)])).item():
        raise error or RunDirError(f"rank 0 could not lock {run_dir / LOCK_NAME}; see its error")
    return lock
