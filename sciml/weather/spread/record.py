"""A spread run's record, ``spread_run.json``.

The run record (:data:`SPREAD_RECORD`, kept by :mod:`sciml.training.runs.record`) holds the
run's :class:`~sciml.weather.spread.config.SpreadConfig` with the training data's record
(:func:`sciml.weather.grid.data_record`: grid labels, lead times, start dates) and the
channels' statistics (``data.stats``). :func:`read_spread_run` reads the configuration back
with the statistics (:func:`read_spread_data` the data's record). A run folder records
:data:`SPREAD_VERSION`; one of format 6 (its statistics in ``stats.json``) is read as one
record, and its next write makes it one; folders of other versions are refused by name
(retrain in a new folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciml.datasets.channels import NormStats
from sciml.training.runs.record import ANY, DATA_KEY, RecordKind, read_run_record
from sciml.weather.options import config_from_record
from sciml.weather.spread.config import SpreadConfig
from sciml.weather.stats_record import STATS, recorded_stats, stats_upgrade

__all__ = [
    "DATA_KEY",
    "RUN_CONFIG",
    "SPREAD_RECORD",
    "SPREAD_VERSION",
    "read_spread_data",
    "read_spread_run",
]

RUN_CONFIG = "spread_run.json"
#: Format of ``spread_run.json``; 7: it holds the channels' statistics (``stats.json``
#: before); 6: the configuration nests the loop's options (``train``:
#: epochs, batch size, seed); 5: the run record's layout (kind, version, config); 4: it
#: records the training data's grid, lead times and start dates; 3: the head estimates the
#: underlying variance and keeps the k members' own part of the ``ensemble``-member spread
#: (2: a free log-residual on the sample spread; 1: periodic dims padded by ``2**depth``
#: points and cropped): other networks.
SPREAD_VERSION = 7
_CHANGES = {
    1: "periodic dims now wrap exactly, another network",
    2: "the head now keeps the k members' own part of the full spread, another network",
    3: "a run now records the grid, lead times and start dates it was trained on",
    4: "the record now names its kind and format",
    5: "the configuration now nests the training loop's options (train)",
    6: "the record now holds the channels' statistics, and this folder has no stats.json",
}
#: The run record of a spread run.
SPREAD_RECORD = RecordKind(
    "weather-spread",
    SPREAD_VERSION,
    RUN_CONFIG,
    "a spread run",
    changes=_CHANGES,
    added={"data.units": ANY},  # before runs recorded them
    derived=(STATS,),
    upgrade=stats_upgrade(6),
)


def read_spread_run(run_dir: Path | str) -> tuple[SpreadConfig, NormStats]:
    """The configuration and channel statistics of a spread run folder.

    Raises:
        FileNotFoundError: Not a spread run folder.
        ValueError: A run folder of another format (another version, or other
            configuration fields).
    """
    run_dir = Path(run_dir)
    raw = read_run_record(run_dir, SPREAD_RECORD)
    data = raw.pop(DATA_KEY, {})
    config = config_from_record(SpreadConfig, raw, str(run_dir / RUN_CONFIG))
    return config, recorded_stats(data, run_dir / RUN_CONFIG)


def read_spread_data(run_dir: Path | str) -> dict[str, Any]:
    """What a spread run recorded of its training data (:func:`sciml.weather.grid.data_record`).

    Raises:
        FileNotFoundError: Not a spread run folder.
        ValueError: A run folder of another format.
    """
    record: dict[str, Any] = read_run_record(run_dir, SPREAD_RECORD)[DATA_KEY]
    return record
