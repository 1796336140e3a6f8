"""The run folder: claimed by one run at a time, locked, its record written atomically.

:func:`claim_run_dir` holds a folder for a workflow's run: it compares the run's record
(:mod:`sciml.training.runs.record`) with the folder's and refuses another run **before
anything is written**, then takes the folder's lock; a run that passes its own checks then
writes the record atomically (:meth:`RunClaim.write`). :class:`RunLock` is that lock, an
exclusive ``flock`` on a file of the folder (released by the kernel when the process dies)
that names its holder while held and is emptied on release, so two processes never write
one run; :func:`lock_run_dir` takes ``run_dir/run.lock`` on rank 0 for a training run,
and every rank learns whether it could.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sciml.distributed import all_reduce_cpu
from sciml.io_utils import atomic_write_text
from sciml.training.runs.record import (
    RecordKind,
    RunDirError,
    check_run_record,
    record_text,
    with_value,
)

__all__ = ["LOCK_NAME", "RunClaim", "RunLock", "claim_run_dir", "claim_run_dirs", "lock_run_dir"]

#: Name of the lock file inside a run folder.
LOCK_NAME = "run.lock"


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
                f"{self.path.parent} is in use by another training run ({holder})",
                "wait for it to finish, or give this run another run_dir",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Empty the file and unlock (it stays: removing it would race with a new holder).

        Emptied, a free lock names no holder, and a run that took it and was refused
        leaves the folder's bytes as they were.
        """
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
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


@dataclass
class RunClaim:
    """A run folder held by this process (see :func:`claim_run_dir`).

    Attributes:
        run_dir: The folder.
        kind: Its record.
        config: The record this run writes (plain JSON data), but for its derived fields.
        resumed: The folder held this record already (but perhaps for the loop's
            resumable fields).
    """

    run_dir: Path
    kind: RecordKind
    config: dict[str, Any]
    resumed: bool

    def write(self, derived: Mapping[str, Any] | None = None) -> None:
        """Write the record atomically (a resumed run's only if a field changed).

        Args:
            derived: The values of the kind's :attr:`~RecordKind.derived` fields.
        """
        config = self.config
        for path, value in (derived or {}).items():
            config = with_value(config, path, value)
        text = record_text(self.kind, config)
        file = self.run_dir / self.kind.file
        if not (self.resumed and file.read_text() == text):
            atomic_write_text(file, text)


@contextmanager
def claim_run_dir(run_dir: Path | str, kind: RecordKind, config: Any) -> Iterator[RunClaim]:
    """Hold ``run_dir`` for a run of ``config``: refuse another one before writing anything.

    The record is checked before the lock is taken (a refused run creates no lock file)
    and again under it; the caller does its own checks and computations, then calls
    :meth:`RunClaim.write` and writes the rest of the folder. The lock is released on
    leaving (:func:`sciml.training.fit` takes it again to train).

    Args:
        run_dir: The run folder (created under the lock).
        kind: The workflow's record.
        config: The run's configuration (a dataclass or a JSON-able mapping).

    Raises:
        sciml.training.runs.record.RunRecordError: As
            :func:`~sciml.training.runs.record.check_run_record`.
        sciml.training.runs.record.RunDirError: Another process holds the folder (the advice
            in the terms of :attr:`RecordKind.advice`).

    Examples:
        >>> import tempfile
        >>> from sciml.training.runs.record import read_run_record
        >>> kind = RecordKind("demo", 1, "demo_run.json", "a demo run")
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     with claim_run_dir(folder, kind, {"lr": 0.1}) as claim:
        ...         claim.write()
        ...     read_run_record(folder, kind)
        {'lr': 0.1}
    """
    run_dir = Path(run_dir)
    check_run_record(run_dir, kind, config)
    lock = RunLock(run_dir, name=LOCK_NAME)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock.acquire()
    except RunDirError as err:  # in use: the advice in the workflow's terms
        raise err.with_advice(f"wait for it to finish, or {kind.advice}") from None
    try:
        resumed = check_run_record(run_dir, kind, config)
        plain = json.loads(record_text(kind, config))["config"]
        yield RunClaim(run_dir, kind, plain, resumed)
    except BaseException:
        if created:  # refused by the caller's checks: no folder left that was not there
            _remove_if_bare(lock)
        raise
    finally:
        lock.release()


def _remove_if_bare(lock: RunLock) -> None:
    """Remove the lock's folder, held, if it holds nothing but the lock file."""
    folder = lock.path.parent
    if [entry.name for entry in folder.iterdir()] != [lock.path.name]:
        return
    try:
        lock.path.unlink()
        folder.rmdir()
    except OSError:  # another process opened the folder meanwhile: it stays
        pass


@contextmanager
def claim_run_dirs(
    run_dirs: Sequence[Path | str], kind: RecordKind, configs: Sequence[Any]
) -> Iterator[list[RunClaim]]:
    """:func:`claim_run_dir` for the runs of a sweep, every folder checked before any is held.

    One refused run leaves all of the folders as they were.

    Raises:
        ValueError: Not one configuration per folder.
        sciml.training.runs.record.RunRecordError, RunDirError: As :func:`claim_run_dir`.
    """
    if len(run_dirs) != len(configs):
        raise ValueError(
            f"one configuration per run folder: {len(configs)} for {len(run_dirs)} folder(s)"
        )
    for run_dir, config in zip(run_dirs, configs, strict=True):
        check_run_record(Path(run_dir), kind, config)
    with ExitStack() as stack:
        yield [
            stack.enter_context(claim_run_dir(run_dir, kind, config))
            for run_dir, config in zip(run_dirs, configs, strict=True)
        ]
