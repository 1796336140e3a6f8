"""The run record: what a run folder (or any artefact) holds so that its next input can be checked.

The principle every workflow follows: **every artefact a later command consumes** (a run
folder, statistics, a store, a mask, a checkpoint, a model) **records what is needed to
check that the next input fits it** -- dimension names and order, shapes, dtype and
scaling, coordinate values or a fingerprint of them, CRS and transform, versions -- **and
the consumer aligns that input by label or refuses it, naming both sides** (the artefact
and the input, in the user's terms: the option and the file). Every check happens before
the first byte is written, so a refused run leaves its folder as it was.

This module holds the generic parts:

* :func:`lock_run_dir` holds ``run_dir/run.lock`` (an exclusive ``flock``, released by
  the kernel when the process dies) so that two processes never write one run folder;
  :class:`RunLock` is that lock for any file (it names its holder while held and is
  emptied on release);
* :func:`run_record` describes a training run and :func:`differences` lists what a
  resumed run changed, so that :func:`sciml.training.fit` can refuse it (a workflow's own
  record of its run folder is kept by :mod:`sciml.training.run_record`);
* :func:`coordinate_record` records a coordinate's labels (or, for a long one, a
  fingerprint of them) as plain JSON data, and :func:`match_labels` finds a recorded
  coordinate's labels in a new input's (the same labels in another order, or another
  longitude convention, are aligned; other labels are an error naming both sides).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
import torch
from torch import nn

from sciml.distributed import all_reduce_cpu
from sciml.training.checkpoint import model_signature

__all__ = [
    "LOCK_NAME",
    "LabelMismatch",
    "PlainValue",
    "RunDirError",
    "RunLock",
    "coordinate_record",
    "differences",
    "lock_run_dir",
    "match_labels",
    "plain",
    "run_record",
]

#: Name of the lock file inside a run folder.
LOCK_NAME = "run.lock"


class RunDirError(RuntimeError):
    """A run folder is in use by another process, or holds a run with another configuration.

    The message is ``"<problem>; <advice>"``: a command-line caller replaces the advice
    (given in library terms, ``run_dir`` and ``resume=False``) by its own options with
    :meth:`with_advice`.
    """

    def __init__(self, problem: str, advice: str = "") -> None:
        """The problem (what and which folder) and what to do about it."""
        super().__init__(f"{problem}; {advice}" if advice else problem)
        self.problem, self.advice = problem, advice

    def with_advice(self, advice: str) -> RunDirError:
        """The same problem with other advice (e.g. the command line's options)."""
        return RunDirError(self.problem, advice)


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
    return (
        [] if saved == current else [f"{where}: {_short(saved)} in the run, {_short(current)} now"]
    )


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to about ``limit`` characters (a grid's labels are long)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]} ...{text[-1]}"


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


class LabelMismatch(ValueError):
    """An input's coordinate labels are not those an artefact recorded."""


#: Coordinates longer than this are recorded by a fingerprint instead of their values
#: by :func:`coordinate_record` when ``values_up_to`` is left at its default.
VALUES_UP_TO = 100_000


def _plain_labels(values: np.ndarray) -> tuple[str, np.ndarray]:
    """The dtype name and the labels as numbers or strings (times as int64 nanoseconds)."""
    if np.issubdtype(values.dtype, np.datetime64) or np.issubdtype(values.dtype, np.timedelta64):
        unit = "datetime64[ns]" if values.dtype.kind == "M" else "timedelta64[ns]"
        return unit, values.astype(unit).astype(np.int64)
    if values.dtype.kind in "biuf":
        return "float" if values.dtype.kind == "f" else "int", values
    return "str", values.astype(str)


def coordinate_record(
    values: np.ndarray | None, *, size: int, values_up_to: int = VALUES_UP_TO
) -> dict[str, PlainValue]:
    """What a consumer needs to check a coordinate: its size, kind and labels.

    Args:
        values: The coordinate's labels (``None``: the dimension has no coordinate, its
            points are known by position only).
        size: The dimension's length.
        values_up_to: Longer coordinates keep their first and last labels and a SHA-256
            fingerprint of them all instead of every label (0: always a fingerprint).

    Returns:
        ``{"size", "kind", "values"}``, ``{"size", "kind", "first", "last", "sha256"}``,
        or ``{"size"}`` for a dimension without labels; times are in int64 nanoseconds.
    """
    if values is None:
        return {"size": size}
    kind, labels = _plain_labels(np.asarray(values).ravel())
    record: dict[str, PlainValue] = {"size": size, "kind": kind}
    if labels.size <= values_up_to:
        return record | {"values": labels.tolist()}
    digest = hashlib.sha256(np.ascontiguousarray(labels).tobytes()).hexdigest()
    return record | {"first": labels[0].item(), "last": labels[-1].item(), "sha256": digest}


def _readable(kind: str, labels: list[Any]) -> list[Any]:
    """Labels as a user reads them (times back from int64 nanoseconds)."""
    if kind.startswith("datetime64"):
        return [str(pd.Timestamp(v)) for v in labels]
    if kind.startswith("timedelta64"):
        return [str(pd.Timedelta(v)) for v in labels]
    return labels


def _describe(record: dict[str, Any]) -> str:
    """A coordinate record in words: its size and labels (the first and last of long ones)."""
    size, kind = record["size"], record.get("kind")
    if kind is None:
        return f"{size} points without labels"
    if "values" not in record:
        first, last = _readable(kind, [record["first"], record["last"]])
        return f"{size} labels {first} .. {last} (fingerprint {record['sha256'][:12]})"
    shown = _readable(kind, list(record["values"]))
    if len(shown) <= 6:
        return f"{size} labels {shown}"
    return f"{size} labels {shown[0]}, {shown[1]} .. {shown[-1]}"


def match_labels(
    recorded: dict[str, Any],
    found: np.ndarray | int,
    *,
    dim: str,
    sides: tuple[str, str],
    period: float | None = None,
    subset: bool = False,
) -> np.ndarray:
    """Where the labels a :func:`coordinate_record` holds are in an input's ``found`` ones.

    Float labels match when they differ by at most two float32 roundings of the larger
    magnitude on the axis (``2 * 2**-24 * max|label|``: one rounding on each side, so a
    float32 copy of a float64 grid matches it, while grid spacings are many orders of
    magnitude wider); other labels match exactly. With ``period`` (360 for longitudes)
    labels are compared modulo it, so a -180..180 grid matches its 0..360 copy.

    Args:
        recorded: The artefact's :func:`coordinate_record` (with its values).
        found: The input's labels, or its size when its dimension has no coordinate.
        dim: The dimension's name, for messages.
        sides: How messages name the artefact and the input, e.g. ``("the run in R
            (--run-dir)", "the test data (test.nc)")``.
        period: The labels' period, or ``None``.
        subset: The input may hold only some of the recorded labels (in its own order).

    Returns:
        Positions in ``found``: ``found[positions]`` are the recorded labels in the recorded
        order, or (``subset``) every position of ``found``, in its own order.

    Raises:
        LabelMismatch: Labelled on one side only, other sizes (unless ``subset``), labels
            the other side lacks, or a record that keeps only a fingerprint but labels
            in another order; the message names both sides.
    """
    artefact, data = sides
    size = int(recorded["size"])
    labels = recorded.get("values")
    if isinstance(found, int):
        count, described = found, coordinate_record(None, size=found)
    else:
        count = int(np.asarray(found).size)
        described = coordinate_record(found, size=count)

    def refuse(why: str) -> LabelMismatch:
        return LabelMismatch(
            f"{dim!r}: {artefact} has {_describe(recorded)}, {data} has "
            f"{_describe(described)}: {why}"
        )

    if "kind" not in recorded and isinstance(found, int):
        if count != size:
            raise refuse("another grid")
        return np.arange(count)
    if "kind" not in recorded or isinstance(found, int):
        raise refuse("only one side is labelled, so they cannot be aligned by label")
    kind, have = _plain_labels(np.asarray(found).ravel())
    if kind != recorded["kind"] and {kind, recorded["kind"]} != {"int", "float"}:
        raise refuse(f"labels of another kind ({recorded['kind']} against {kind})")
    if labels is None:  # a fingerprint: the labels must be the recorded ones, in order
        if recorded == coordinate_record(np.asarray(found), size=count, values_up_to=0):
            return np.arange(count)
        raise refuse("other labels (their fingerprints differ)")
    want, numeric = np.asarray(labels), kind in ("int", "float")
    if subset:
        back = _positions(have, want, period=period, numeric=numeric)
        if (back < 0).any():
            extra = _readable(kind, have[back < 0][:6].tolist())
            raise refuse(f"its labels {extra} are not among the recorded ones")
        return np.arange(count)
    if want.size != have.size:
        raise refuse("another number of points")
    positions = _positions(want, have, period=period, numeric=numeric)
    if (positions < 0).any() or np.unique(positions).size != positions.size:
        missing = _readable(kind, want[positions < 0][:6].tolist())
        raise refuse(f"it lacks the labels {missing} (another grid)")
    return positions


def _positions(
    want: np.ndarray, have: np.ndarray, *, period: float | None, numeric: bool
) -> np.ndarray:
    """For each of ``want``, its one matching position in ``have``, or -1."""
    if not numeric:
        lookup = {label: k for k, label in enumerate(have.tolist())}
        return np.asarray([lookup.get(label, -1) for label in want.tolist()], dtype=np.int64)
    a, b = want.astype(np.float64), have.astype(np.float64)
    scale = max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0))
    tolerance = 2 * 2.0**-24 * scale
    gap = a[:, None] - b[None, :]
    if period is not None:
        gap = (gap + period / 2) % period - period / 2
    close = np.abs(gap) <= tolerance
    single = close.sum(axis=1) == 1
    return np.where(single, close.argmax(axis=1), -1)
