"""A post-processing run's record, ``weather_run.json``.

The run record (:data:`RUN_RECORD`, kept by :mod:`sciml.training.runs.record`) holds the
run's :class:`~sciml.weather.postprocess.config.PostprocessConfig` with the training data's
record (:func:`sciml.weather.grid.data_record`: grid labels, lead times, start dates) and
the channels' statistics (``data.stats``). :func:`read_run` reads the configuration back
with the statistics (:func:`read_data_record` the data's record). A run folder records
:data:`RUN_VERSION`; one of format 5 (its statistics in ``stats.json``) is read as one
record, and its next write makes it one; folders of other versions are refused by name
(retrain in a new folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciml.datasets.channels import NormStats
from sciml.training.runs.record import ANY, DATA_KEY, RecordKind, read_run_record
from sciml.weather.options import config_from_record
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.stats_record import STATS, recorded_stats, stats_upgrade

__all__ = ["RUN_CONFIG", "RUN_RECORD", "RUN_VERSION", "read_data_record", "read_run"]

RUN_CONFIG = "weather_run.json"
#: Format of ``weather_run.json``; 6: it holds the channels' statistics (``stats.json``
#: before); 5: the configuration nests the loop's options (``train``:
#: epochs, batch size, seed); 4: the run record's layout (kind, version, config); 3: it
#: records the training data's grid, lead times and start dates (2: the deep models read the
#: lead time, a 4-output head).
RUN_VERSION = 6
_GRID = "a run now records the grid, lead times and start dates it was trained on"
_CHANGES = {
    1: _GRID,
    2: _GRID,
    3: "the record now names its kind and format",
    4: "the configuration now nests the training loop's options (train)",
    5: "the record now holds the channels' statistics, and this folder has no stats.json",
}
#: The run record of a weather post-processing run.
RUN_RECORD = RecordKind(
    "weather-postprocess",
    RUN_VERSION,
    RUN_CONFIG,
    "a weather run",
    changes=_CHANGES,
    added={"missing": "refuse", "data.units": ANY},  # before runs recorded them
    derived=(STATS,),
    upgrade=stats_upgrade(5),
)


def read_run(run_dir: Path | str) -> tuple[PostprocessConfig, NormStats]:
    """The configuration and channel statistics of a weather run folder.

    Raises:
        FileNotFoundError: Not a weather run folder.
        ValueError: A run folder of another format.
    """
    run_dir = Path(run_dir)
    raw = read_run_record(run_dir, RUN_RECORD)
    data = raw.pop(DATA_KEY, {})
    raw.setdefault("missing", "refuse")  # a run recorded before the policy refused them
    config = config_from_record(PostprocessConfig, raw, str(run_dir / RUN_CONFIG))
    return config, recorded_stats(data, run_dir / RUN_CONFIG)


def read_data_record(run_dir: Path | str) -> dict[str, Any]:
    """What a weather run recorded of its training data (:func:`sciml.weather.grid.data_record`).

    Raises:
        FileNotFoundError: Not a weather run folder.
        ValueError: A run folder of another format.
    """
    record: dict[str, Any] = read_run_record(run_dir, RUN_RECORD)[DATA_KEY]
    return record
