"""The volumes a run trains on, recorded in ``RUN_DIR/volumes.json`` and checked on resume.

:func:`describe` says what a store holds as the model sees it (the volume's
``(channel, z, y, x)`` shape and channel names, the transform, the target
and its shape) and how the file holds it (its path, its dims by name, its
dtype). :func:`check_val` refuses validation volumes that do not fit the
training ones; :func:`check_resume` (collective) refuses a resumed run whose
volumes differ from those recorded when it started, naming both, before the
run writes anything; :func:`record_volumes` writes the record once a run's
inputs are checked (:func:`sciml.volumes.train.train_volumes` calls all three).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from sciml.distributed.collectives import on_rank0, world
from sciml.io_utils import atomic_write_text
from sciml.training.run_dir import PlainValue, differences

if TYPE_CHECKING:
    from sciml.volumes.dataset import ShardedVolumes

__all__ = ["COMPARED", "RECORD", "check_resume", "check_val", "describe", "record_volumes"]

#: The file of a run folder that records its volumes.
RECORD = "volumes.json"
#: What must be the same for a resumed run and for validation volumes (the rest is recorded
#: for the reader: the path, the file's dims and dtype, which the reading aligns).
COMPARED = ("shape", "channels", "transform", "target", "target_shape")


def describe(data: ShardedVolumes) -> dict[str, PlainValue]:
    """What ``data`` holds: the compared fields of :data:`COMPARED`, its path, dims and dtype."""
    return {
        "store": str(data.path),
        "variable": data.variable,
        "dims": dict(data.dims),
        "dtype": data.file_dtype,
        "shape": [len(data.channels()), *data.shape],
        "channels": list(data.channels()),
        "transform": data.transform,
        "target": data.target,
        "target_shape": list(data.target_shape),
    }


def _compared(record: dict[str, PlainValue]) -> dict[str, PlainValue]:
    return {key: record.get(key) for key in COMPARED}


def check_val(train: dict[str, PlainValue], val: dict[str, PlainValue]) -> None:
    """Refuse validation volumes (``--val``) that the model trained on ``train`` cannot take.

    Raises:
        ValueError: Naming both stores and every field of :data:`COMPARED` that differs.
    """
    lines = [
        f"{key}: {train.get(key)!r} in the training data, {val.get(key)!r} in --val"
        for key in COMPARED
        if train.get(key) != val.get(key)
    ]
    if lines:
        raise ValueError(
            f"--val {val['store']} does not fit the training data {train['store']}: "
            f"{'; '.join(lines)} (shape is (channel, z, y, x)); validate on volumes of the "
            "same shape, channels, transform and target"
        )


def _read(run_dir: Path) -> dict[str, PlainValue] | None:
    path = run_dir / RECORD
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the run's volumes from {path}: {err}") from None
    if not isinstance(record, dict) or not isinstance(record.get("train"), dict):
        raise ValueError(f"{path} does not record a run's volumes: {record!r}")
    return record


def _compare(run_dir: Path, record: dict[str, PlainValue]) -> None:
    """Rank 0: refuse ``record`` unless it matches the one of ``run_dir`` (if any)."""
    saved = _read(run_dir)
    if saved is None:
        return
    lines = []
    for split, option in (("train", "DATA"), ("val", "--val")):
        before, now = saved.get(split), record.get(split)
        if not isinstance(before, dict) or not isinstance(now, dict):
            if before != now:
                lines.append(f"{option}: {_store(before)} in the run, {_store(now)} now")
            continue
        lines += [
            f"{option} {line} (run: {before['store']}, now: {now['store']})"
            for line in differences(_compared(before), _compared(now))
        ]
    if lines:
        raise ValueError(
            f"--run-dir {run_dir} was started on other volumes ({run_dir / RECORD}): "
            + "; ".join(lines)
            + "; resume with the volumes it was started on, or start a new --run-dir"
        )


def _store(record: PlainValue) -> str:
    return str(record["store"]) if isinstance(record, dict) else "none"


def check_resume(run_dir: Path | str, record: dict[str, PlainValue]) -> None:
    """Refuse a resumed run whose volumes differ from the recorded ones (collective).

    Args:
        run_dir: The run folder.
        record: ``{"train": describe(train), "val": describe(val) or None}``.

    Raises:
        ValueError: On every rank, naming each difference with both stores.
    """
    on_rank0(lambda: _compare(Path(run_dir), record))


def record_volumes(run_dir: Path | str, record: dict[str, PlainValue]) -> None:
    """Record ``record`` in ``run_dir`` on rank 0 unless the volumes are recorded already."""
    path = Path(run_dir) / RECORD
    if world()[0] == 0 and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record, indent=1) + "\n")
