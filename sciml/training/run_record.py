"""The one run record every workflow keeps in its run folder: claim, compare, write, read.

A record is a JSON file of one layout, ``{"kind": ..., "version": ..., "config": ...}``:
the workflow that wrote it (:class:`RecordKind`), the format of its configuration and the
configuration itself (a dataclass or a plain JSON-able mapping). :func:`claim_run_dir`
takes the folder's lock (:class:`~sciml.training.run_dir.RunLock` on ``run.lock``, so two
processes never write one run), compares the configuration about to be written with the
folder's and refuses another one **before anything is written**; a run that passes its own
checks then writes the record atomically (:meth:`RunClaim.write`). :func:`read_run_record`
reads the configuration back for the commands that consume the run.

A record may bind from a run's first checkpoint on (:attr:`RecordKind.binding`,
:data:`LAST_CHECKPOINT`): a run that failed before it (bad inputs found late, a crash in
its first epoch) left nothing to resume, so the same folder takes a corrected configuration
and its record is replaced.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sciml.io_utils import atomic_write_text
from sciml.training.config import RESUMABLE_FIELDS
from sciml.training.run_dir import LOCK_NAME, RunDirError, RunLock, differences

__all__ = [
    "LAST_CHECKPOINT",
    "RecordKind",
    "RunClaim",
    "RunRecordError",
    "check_run_record",
    "claim_run_dir",
    "claim_run_dirs",
    "read_run_record",
    "record_binds",
    "record_text",
]

#: Differences named in a refusal before the rest are counted.
_SHOWN = 8
#: The checkpoint :func:`sciml.training.fit` writes in a run folder at every epoch's end (and
#: on a signal): once it exists the run has something to resume.
LAST_CHECKPOINT = "checkpoints/last.pt"


class RunRecordError(RunDirError, ValueError):
    """A run record that cannot be used: another configuration, kind or format, or damaged."""


@dataclass(frozen=True)
class RecordKind:
    """Which record a workflow keeps, and how its messages name it.

    Attributes:
        name: The kind written in the record (e.g. ``"weather-postprocess"``).
        version: The format of the configuration this version of sciml writes and reads.
        file: The record's file in the run folder (e.g. ``"weather_run.json"``).
        what: What the folder holds, for messages (e.g. ``"a weather run"``).
        advice: What to do when the folder is refused, in the command line's terms.
        changes: For an older format, why this version cannot read it.
        sole: The record is a run's first file: a folder that holds other files but not
            the record is refused (``False``: the workflow checks those files itself).
        option: How the run folder is given, for messages (``"--run-dir"`` on the
            command line, ``"run_dir"`` for a library call).
        binding: The file of the run folder (e.g. :data:`LAST_CHECKPOINT`) from which on
            the record binds; before it exists, another configuration replaces the record
            (``None``: the record binds as soon as it is written).
        loop: The key of the configuration that holds the training loop's options (a
            :class:`~sciml.training.TrainConfig`): their :data:`RESUMABLE_FIELDS` may
            differ when the run is resumed (a finished run trains on with more epochs),
            and the record then takes the new values.
    """

    name: str
    version: int
    file: str
    what: str
    advice: str = "give this run another --run-dir"
    changes: Mapping[int, str] = field(default_factory=dict)
    sole: bool = True
    option: str = "--run-dir"
    binding: str | None = None
    loop: str = "train"


def record_binds(run_dir: Path | str, kind: RecordKind) -> bool:
    """Whether a record of ``kind`` in ``run_dir`` binds a new run (:attr:`RecordKind.binding`)."""
    return kind.binding is None or (Path(run_dir) / kind.binding).exists()


def record_text(kind: RecordKind, config: Any) -> str:
    """The record's text: ``config`` (a dataclass or a JSON-able mapping) of ``kind``."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        plain = dataclasses.asdict(config)
    else:
        plain = dict(config)
    record = {"kind": kind.name, "version": kind.version, "config": plain}
    return json.dumps(record, indent=2) + "\n"


def _load(run_dir: Path, kind: RecordKind, advice: str) -> dict[str, Any] | None:
    """The configuration in ``run_dir``'s record, ``None`` without one; refuse a bad record."""
    path = run_dir / kind.file
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunRecordError(f"{path} is not valid JSON ({err})", advice) from None
    if not isinstance(raw, dict):
        raise RunRecordError(f"{path} holds no run record", advice)
    if "kind" in raw and raw["kind"] != kind.name:
        raise RunRecordError(
            f"{path} is the record of a {raw['kind']!r} run, not {kind.what} ({kind.name!r})",
            advice,
        )
    version = raw.get("version", 1) if "kind" in raw else _legacy_version(raw)
    if version != kind.version or not isinstance(raw.get("config"), dict):
        known = isinstance(version, int) and version in kind.changes
        why = kind.changes[version] if known else "another format"
        raise RunRecordError(
            f"{run_dir} holds {kind.what} of format {version}; this version of sciml reads "
            f"format {kind.version} ({why})",
            advice,
        )
    config: dict[str, Any] = raw["config"]
    return config


def _legacy_version(raw: dict[str, Any]) -> int:
    """The format of a record written before records named their kind (1 when unnamed)."""
    version = raw.get("version", 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else 1


def _binding(config: dict[str, Any], kind: RecordKind) -> dict[str, Any]:
    """``config`` without what a resumed run may change (its loop's resumable fields)."""
    loop = config.get(kind.loop)
    if not isinstance(loop, dict):
        return config
    return config | {kind.loop: {k: v for k, v in loop.items() if k not in RESUMABLE_FIELDS}}


def check_run_record(run_dir: Path | str, kind: RecordKind, config: Any) -> bool:
    """Whether ``run_dir`` holds this record already (a resumed run) or none yet; reads only.

    Args:
        run_dir: The run folder (it need not exist).
        kind: The workflow's record.
        config: The configuration about to be written.

    Returns:
        True if the folder holds the same record, False if it holds none (a new run) or
        one that does not bind yet (:func:`record_binds`: it is replaced).

    Raises:
        RunRecordError: The folder holds a binding record of another configuration (each
            differing field named, the folder's value first), kind or format, a damaged
            record, or (a :attr:`RecordKind.sole` record) other files but no record.
    """
    run_dir = Path(run_dir)
    advice = f"nothing was written: {kind.advice}"
    saved = _load(run_dir, kind, advice)
    if saved is None:
        found = sorted(p.name for p in run_dir.glob("*") if p.suffix != ".lock")
        if kind.sole and found:
            shown = ", ".join(found[:5]) + (" ..." if len(found) > 5 else "")
            raise RunRecordError(
                f"{kind.option} {run_dir} holds {shown} but no {kind.file}, so not {kind.what}",
                advice,
            )
        return False
    current = json.loads(record_text(kind, config))["config"]
    changed = differences(_binding(saved, kind), _binding(current, kind))
    if changed and not record_binds(run_dir, kind):
        return False
    if changed:
        more = f" and {len(changed) - _SHOWN} more" if len(changed) > _SHOWN else ""
        raise RunRecordError(
            f"{kind.option} {run_dir} holds {kind.what} with another configuration "
            f"({'; '.join(changed[:_SHOWN])}{more})",
            advice,
        )
    return True


@dataclass
class RunClaim:
    """A run folder held by this process (see :func:`claim_run_dir`).

    Attributes:
        run_dir: The folder.
        kind: Its record.
        text: The record this run writes.
        resumed: The folder held this record already (but perhaps for the loop's
            resumable fields).
    """

    run_dir: Path
    kind: RecordKind
    text: str
    resumed: bool

    def write(self) -> None:
        """Write the record atomically (a resumed run's only if a resumable field changed)."""
        path = self.run_dir / self.kind.file
        if not (self.resumed and path.read_text() == self.text):
            atomic_write_text(path, self.text)


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
        RunRecordError: As :func:`check_run_record`.
        sciml.training.run_dir.RunDirError: Another process holds the folder (the advice
            in the terms of :attr:`RecordKind.advice`).

    Examples:
        >>> import tempfile
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
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock.acquire()
    except RunDirError as err:  # in use: the advice in the workflow's terms
        raise err.with_advice(f"wait for it to finish, or {kind.advice}") from None
    try:
        resumed = check_run_record(run_dir, kind, config)
        yield RunClaim(run_dir, kind, record_text(kind, config), resumed)
    finally:
        lock.release()


def read_run_record(run_dir: Path | str, kind: RecordKind) -> dict[str, Any]:
    """The configuration a run folder recorded, as plain JSON data.

    Raises:
        FileNotFoundError: No such folder, or no record in it.
        RunRecordError: A damaged record, or one of another kind or format.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} (--run-dir) not found: no such run folder")
    config = _load(run_dir, kind, "retrain it in a new --run-dir")
    if config is None:
        raise FileNotFoundError(
            f"{run_dir / kind.file} not found: {run_dir} (--run-dir) is not a run folder "
            f"holding {kind.what}"
        )
    return config


@contextmanager
def claim_run_dirs(
    run_dirs: Sequence[Path | str], kind: RecordKind, configs: Sequence[Any]
) -> Iterator[list[RunClaim]]:
    """:func:`claim_run_dir` for the runs of a sweep, every folder checked before any is held.

    One refused run leaves all of the folders as they were.

    Raises:
        ValueError: Not one configuration per folder.
        RunRecordError, sciml.training.run_dir.RunDirError: As :func:`claim_run_dir`.
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
