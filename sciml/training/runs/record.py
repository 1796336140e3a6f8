"""The one record of a run folder: what it holds, compared with a new run, read back.

The principle every workflow follows: **every artefact a later command consumes** (a run
folder, statistics, a store, a mask, a checkpoint, a model) **records what is needed to
check that the next input fits it** -- dimension names and order, shapes, dtype and
scaling, coordinate values or a fingerprint of them (:mod:`sciml.weather.labels`), CRS
and transform, versions -- **and the consumer aligns that input by label or refuses it,
naming both sides** (the artefact and the input, in the user's terms: the option and the
file). Every check happens before the first byte is written, so a refused run leaves its
folder as it was.

A record is a JSON file of one layout, ``{"kind": ..., "version": ..., "config": ...}``:
the workflow that wrote it (:class:`RecordKind`), the format of its configuration and the
configuration itself (a dataclass or a plain JSON-able mapping): the workflow's options,
its training loop's (:class:`~sciml.training.TrainConfig`, under :attr:`RecordKind.loop`)
and what the data decided. :func:`check_run_record` compares the configuration about to be
written with the folder's and refuses another one, each difference named
(:func:`differences`), but for :data:`RESUMABLE_FIELDS`: the one list of the loop's fields
that a resumed run may change, in every workflow (a finished run trains on with more
epochs). :func:`read_run_record` reads the configuration back for the commands that
consume the run; the folder holding it is claimed with
:func:`sciml.training.runs.folder.claim_run_dir`.

A record may bind from a run's first checkpoint on (:attr:`RecordKind.binding`,
:data:`LAST_CHECKPOINT`): a run that failed before it (bad inputs found late, a crash in
its first epoch) left nothing to resume, so the same folder takes a corrected configuration
and its record is replaced.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import torch

__all__ = [
    "ANY",
    "DATA_KEY",
    "LAST_CHECKPOINT",
    "RESUMABLE_FIELDS",
    "PlainValue",
    "SHOWN_FIELDS",
    "RecordKind",
    "RunDirError",
    "RunRecordError",
    "check_run_record",
    "config_record",
    "derived_value",
    "differences",
    "plain",
    "read_run_record",
    "record_binds",
    "record_text",
    "run_records",
    "with_value",
]

#: :class:`~sciml.training.TrainConfig` fields that change only what a run shows: no run
#: record keeps them.
SHOWN_FIELDS = ("progress", "tensorboard", "handle_signals")
#: :class:`~sciml.training.TrainConfig` fields that a resumed run may change, in every
#: workflow: they change how long it runs and what it shows, never what it computes.
RESUMABLE_FIELDS = ("epochs", "checkpoint_every", *SHOWN_FIELDS)
#: The key of a workflow run's record under which it keeps what the data decided.
DATA_KEY = "data"
#: In :attr:`RecordKind.added`: runs of an older format had the field with any value.
ANY: Any = type("Any", (), {"__repr__": lambda self: "ANY"})()
#: Differences named in a refusal before the rest are counted.
_SHOWN = 8
#: The checkpoint :func:`sciml.training.fit` writes in a run folder at every epoch's end (and
#: on a signal): once it exists the run has something to resume.
LAST_CHECKPOINT = "checkpoints/last.pt"


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
        added: Fields (dotted paths, e.g. ``"data.units"``) that this format records and
            runs of an older one did not, each with the value those runs had (:data:`ANY`:
            whatever it is): :func:`run_records` leaves such a field out of the record of
            a folder whose record lacks it, so the run resumes as it was recorded.
        derived: Fields (dotted paths, e.g. ``"data.stats"``) that the run computes from
            its data once its folder is claimed (the channels' statistics): a resumed run
            is compared without them and reads them back (:func:`derived_value`), and
            :meth:`~sciml.training.runs.folder.RunClaim.write` sets them.
        upgrade: Reads a record of an older format as this one:
            ``upgrade(run_dir, version, config)`` gives the configuration in this format
            (from the folder's other files where that format kept parts of it elsewhere),
            or ``None`` when it cannot (the record is then refused, :attr:`changes` saying
            why). The next write of the record is in this format.
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
    added: Mapping[str, Any] = field(default_factory=dict)
    derived: tuple[str, ...] = ()
    upgrade: Callable[[Path, int, dict[str, Any]], dict[str, Any] | None] | None = None


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
    older = isinstance(raw.get("config"), dict) and version != kind.version
    if older and kind.upgrade is not None:
        upgraded = kind.upgrade(run_dir, version, raw["config"])
        if upgraded is not None:
            return upgraded
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
    """``config`` without what a resumed run may change or derives (module docstring)."""
    for path in kind.derived:
        config = _without(config, path)
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


def config_record(config: Any, loop: str = "train") -> dict[str, Any]:
    """A workflow's configuration (a dataclass) as its run record keeps it.

    Its loop's options (``config.<loop>``, a :class:`~sciml.training.TrainConfig`) without
    what they only show (:data:`SHOWN_FIELDS`); their other resumable fields (epochs,
    checkpoint_every) are kept, and a resumed run may change them (the record takes them).
    """
    record: dict[str, Any] = dataclasses.asdict(config)
    record[loop] = {k: v for k, v in record[loop].items() if k not in SHOWN_FIELDS}
    return record


def derived_value(record: Mapping[str, Any], path: str) -> Any:
    """The value of the dotted ``path`` in ``record`` (``None`` where it has none)."""
    return _lookup(record, path)[1]


def with_value(record: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``record`` with the dotted ``path`` set to ``value`` (a copy of each level on the way)."""
    head, _, rest = path.partition(".")
    if not rest:
        return record | {head: value}
    inner = record.get(head)
    return record | {head: with_value(inner if isinstance(inner, dict) else {}, rest, value)}


def _lookup(record: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """Whether the dotted ``path`` is in ``record``, and its value there."""
    value: Any = record
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value


def _without(record: dict[str, Any], path: str) -> dict[str, Any]:
    """``record`` without the dotted ``path`` (a copy of each level on the way)."""
    head, _, rest = path.partition(".")
    if not rest or not isinstance(record.get(head), dict):
        return {k: v for k, v in record.items() if k != head}
    return record | {head: _without(record[head], rest)}


def run_records(
    configs: Sequence[Any], data: dict[str, Any], run_dirs: Sequence[Path], kind: RecordKind
) -> list[dict[str, Any]]:
    """Each run's one record: its configuration (:func:`config_record`) and ``data``.

    ``data`` (what the data decided) is kept under :data:`DATA_KEY`. A folder whose record
    lacks a field of :attr:`RecordKind.added` gets a record without it, as long as the
    run's value is the one such runs had; a folder without a readable record gets the full
    record (its claim refuses a damaged one, or one of another kind or format, in its own
    terms).

    Args:
        configs: The runs' configurations (dataclasses that nest their loop's options).
        data: What the data decided, the same for every run.
        run_dirs: The runs' folders.
        kind: Their record.
    """
    records = []
    for config, run_dir in zip(configs, run_dirs, strict=True):
        record = config_record(config, kind.loop) | {DATA_KEY: data}
        try:
            saved = read_run_record(run_dir, kind)
        except (FileNotFoundError, RunRecordError):
            saved = None
        for path, before in kind.added.items() if saved is not None else ():
            found, value = _lookup(record, path)
            if found and not _lookup(saved or {}, path)[0] and before in (ANY, value):
                record = _without(record, path)
        records.append(record)
    return records
