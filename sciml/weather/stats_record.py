"""The channels' statistics in a weather or spread run's record, and the format before it.

A run computes its channels' statistics from its training dates once its folder is claimed
and keeps them in its record (:data:`STATS`, a derived field:
:attr:`sciml.training.runs.record.RecordKind.derived`). Runs of the format before kept them
in ``stats.json`` beside the record; :func:`stats_upgrade` reads such a folder as one
record, and the run's next write of its record (when it resumes) removes the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sciml.datasets.channels import NormStats
from sciml.training.runs.record import with_value

__all__ = ["STATS", "STATS_FILE", "recorded_stats", "stats_upgrade"]

#: Where a run's record holds its channels' statistics.
STATS = "data.stats"
#: The file of a run folder that held them before.
STATS_FILE = "stats.json"


def recorded_stats(data: dict[str, Any], record: Path) -> NormStats:
    """The statistics in a run record's data (:data:`STATS`), read from the file ``record``.

    Raises:
        ValueError: The data hold no statistics (naming the file).
    """
    return NormStats.from_record(data.get("stats"), f"{record} ({STATS})")


def stats_upgrade(
    version: int,
) -> Callable[[Path, int, dict[str, Any]], dict[str, Any] | None]:
    """Reads a record of format ``version`` with the statistics of its ``stats.json``.

    For :attr:`sciml.training.runs.record.RecordKind.upgrade`: a record of another format,
    or a folder without a readable ``stats.json``, is not upgraded (``None``).
    """

    def upgrade(run_dir: Path, found: int, config: dict[str, Any]) -> dict[str, Any] | None:
        path = run_dir / STATS_FILE
        if found != version or not path.exists():
            return None
        try:
            stats = NormStats.from_json(path)
        except (OSError, ValueError):
            return None
        return with_value(config, STATS, stats.record())

    return upgrade
