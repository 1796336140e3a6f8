"""A volumes run's one record, ``RUN_DIR/volumes.json``: options, volumes, grid, statistics.

The file is the run record of :mod:`sciml.training.runs.record` (:data:`VOLUMES_RECORD`): the
run's options (those a resume must keep), under ``train`` and ``val`` its volumes, under
``mesh`` the process grid it trains on (:mod:`sciml.volumes.mesh_record`) and under
``norm_stats`` the channels' statistics it normalises with (:mod:`sciml.volumes.stats`).
:func:`describe` says what a store holds as the model sees it (the volume's
``(channel, z, y, x)`` shape and channel names, the transform, the target
and its shape) and how the file holds it (its path, its dims by name, its
dtype). :func:`check_val` refuses validation volumes that do not fit the
training ones; :func:`check_resume` (collective) refuses a resumed run whose
volumes or options differ from those recorded when it started, naming both, before the
run writes anything (from its first checkpoint on: a run that failed before it is rerun
with corrected inputs in the same folder); :func:`record_volumes` writes the record once a run's
inputs are checked (:func:`sciml.volumes.train.train_volumes` calls all three).

A folder of format 2 kept the grid in ``mesh.json`` and the statistics in
``norm_stats.json`` beside its record: it is read as one record, and the run's next write
of the record (on resume) replaces the three files by one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sciml.datasets.channels import NormStats
from sciml.distributed.collectives import on_rank0, world
from sciml.training.runs.folder import claim_run_dir
from sciml.training.runs.record import (
    LAST_CHECKPOINT,
    PlainValue,
    RecordKind,
    check_run_record,
    differences,
    read_run_record,
    record_binds,
)

if TYPE_CHECKING:
    from sciml.volumes.dataset import ShardedVolumes

__all__ = [
    "COMPARED",
    "LEGACY_FILES",
    "RECORD",
    "VOLUMES_RECORD",
    "check_resume",
    "check_val",
    "describe",
    "read_volumes_record",
    "record_volumes",
    "recorded_stats",
]

#: The file of a run folder that records the run.
RECORD = "volumes.json"
#: The files in which a run folder of format 2 kept its grid and its statistics.
LEGACY_FILES = ("mesh.json", "norm_stats.json")
_ADVICE = "resume with the options it was started with, or start a new --run-dir"
_LAYOUT = {
    1: "the record now names its kind and format, and the run's options",
    2: "the record now holds the grid and the statistics, which this folder lacks",
}


def _from_format_2(run_dir: Path, version: int, config: dict[str, Any]) -> dict[str, Any] | None:
    """A format-2 record with its grid (``mesh.json``) and statistics (``norm_stats.json``)."""
    mesh, stats = (run_dir / name for name in LEGACY_FILES)
    if version != 2 or not mesh.exists() or not stats.exists():
        return None
    try:
        grid = json.loads(mesh.read_text())["config"]["mesh"]
        return config | {"mesh": grid, "norm_stats": NormStats.from_json(stats).record()}
    except (ValueError, KeyError, TypeError):
        return None


#: The run record of a CosmoFlow or U-Net run; 2: it names its kind and format and records
#: the run's options beside its volumes; 3: it holds the grid and the statistics too.
VOLUMES_RECORD = RecordKind(
    "volumes-run",
    3,
    RECORD,
    "a CosmoFlow / U-Net run",
    advice=_ADVICE,
    changes=_LAYOUT,
    sole=False,
    binding=LAST_CHECKPOINT,
    loop="config",
    derived=("norm_stats",),
    upgrade=_from_format_2,
)
#: What must be the same for a resumed run and for validation volumes (the rest is recorded
#: for the reader: the path, the file's dims and dtype, which the reading aligns).
COMPARED = ("shape", "channels", "transform", "target", "target_shape")


def read_volumes_record(run_dir: Path | str) -> dict[str, Any] | None:
    """The record of ``run_dir`` (``None``: none yet), a format-2 folder's read as one.

    Raises:
        sciml.training.runs.record.RunRecordError: A damaged record, or one of another
            kind or format.
    """
    if not (Path(run_dir) / RECORD).exists():
        return None
    return read_run_record(run_dir, VOLUMES_RECORD)


def recorded_stats(run_dir: Path | str) -> NormStats | None:
    """The channels' statistics ``run_dir`` recorded (``None``: no record yet).

    Raises:
        ValueError: A record without statistics, or of another format.
    """
    record = read_volumes_record(run_dir)
    if record is None:
        return None
    return NormStats.from_record(record.get("norm_stats"), f"{Path(run_dir) / RECORD} (norm_stats)")


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


def _compare(run_dir: Path, record: dict[str, PlainValue]) -> None:
    """Rank 0: refuse ``record`` unless it matches the one of ``run_dir`` (if it binds)."""
    if not (run_dir / RECORD).exists() or not record_binds(run_dir, VOLUMES_RECORD):
        return
    saved = read_run_record(run_dir, VOLUMES_RECORD)
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
    check_run_record(run_dir, VOLUMES_RECORD, record)  # the options


def _store(record: PlainValue) -> str:
    return str(record["store"]) if isinstance(record, dict) else "none"


def check_resume(run_dir: Path | str, record: dict[str, PlainValue]) -> None:
    """Refuse a resumed run whose volumes or options differ from the recorded ones (collective).

    Args:
        run_dir: The run folder.
        record: The run's options with ``"train": describe(train)``,
            ``"val": describe(val) or None`` and its ``"mesh"``.

    Raises:
        ValueError: On every rank, naming each difference (volumes with both stores), or
            a record of another format.
    """
    on_rank0(lambda: _compare(Path(run_dir), record))


def record_volumes(run_dir: Path | str, record: dict[str, PlainValue]) -> None:
    """Record ``record`` in ``run_dir`` on rank 0 unless it is recorded already.

    The files of a format-2 folder (:data:`LEGACY_FILES`) go once the record holds them.

    Raises:
        sciml.training.runs.record.RunRecordError: ``run_dir`` holds another record.
    """
    if world()[0] == 0:
        with claim_run_dir(run_dir, VOLUMES_RECORD, record) as claim:
            claim.write()
            for name in LEGACY_FILES:
                (Path(run_dir) / name).unlink(missing_ok=True)
