"""A coordinate's labels recorded by a run, and a new input's labels matched to them.

:func:`coordinate_record` records a coordinate's labels (or, for a long one, a fingerprint
of them) as plain JSON data, and :func:`match_labels` finds a recorded coordinate's labels
in a new input's: the same labels in another order, or another longitude convention, are
aligned; other labels are an error naming both sides (:class:`LabelMismatch`, in the
user's terms: the option and the file). :mod:`sciml.weather.grid` records a weather run's
grid with them and aligns new data to it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd

from sciml.training.runs.record import PlainValue

__all__ = ["VALUES_UP_TO", "LabelMismatch", "coordinate_record", "match_labels"]


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
