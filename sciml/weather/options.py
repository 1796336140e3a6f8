"""The names and shared option pieces of the weather commands, kept free of heavy imports.

``sciml weather ... --help`` lists them without importing torch, xarray or pandas; the
modules that implement each option import their names from here, and the run folders'
readers a configuration back from its record (:func:`config_from_record`; the record itself
is :func:`sciml.training.runs.record.run_records`'s).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, TypeVar

from sciml.cli_args import (
    byte_size,
)
from sciml.training.config import TrainConfig

__all__ = [
    "LOSS_SCALES",
    "MISSING",
    "SPREAD_LOSSES",
    "add_memory_limit",
    "block_dates",
    "config_from_record",
]

#: ``"raw-crps"``: each channel's and lead time's CRPS divided by the raw ensemble's;
#: ``"none"``: the plain mean CRPS in normalised units (:mod:`.postprocess.loss_scale`).
LOSS_SCALES = ("raw-crps", "none")

#: What a post-processing run does with points missing (NaN) in a forecast, its truth or a
#: static field: ``"refuse"`` the data before anything is written, or ``"mask"`` them
#: (left out of the loss and the scores, predicted as missing).
MISSING = ("refuse", "mask")

#: The spread predictor's losses against the full ensemble's spread (:mod:`sciml.weather.spread`).
SPREAD_LOSSES = ("l1", "mse", "log_l1", "crps")


_Config = TypeVar("_Config")


def config_from_record(config: type[_Config], record: dict[str, Any], where: str) -> _Config:
    """The ``config`` dataclass of a run record's configuration.

    The record is one :func:`~sciml.training.runs.record.config_record` wrote.

    Args:
        config: The configuration's dataclass.
        record: The record's configuration.
        where: The record's file (in its run folder), for messages.

    Raises:
        ValueError: The record's fields are not ``config``'s (a run of another format), or
            a value ``config`` refuses (a record edited by hand): the file and ``--run-dir``
            named.
    """
    expected = {f.name for f in dataclasses.fields(config)}  # type: ignore[arg-type]
    if set(record) != expected:
        raise ValueError(
            f"{where} holds a run of another format (missing {sorted(expected - set(record))}, "
            f"unknown {sorted(set(record) - expected)}); this version of sciml cannot rebuild it"
        )
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items()}
    try:
        loop = TrainConfig(tensorboard=False, **record["train"])
        return config(**values | {"train": loop})
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{where}, the run record of --run-dir {Path(where).parent}, holds a value this "
            f"version of sciml refuses ({err}); it was edited or damaged: restore the file "
            "as the run wrote it, or retrain in a new --run-dir"
        ) from None


def block_dates(text: str) -> int:
    """``--block-dates``: start dates read at a time, a number >= 0 (0: all at once)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of start dates >= 0, got {text!r}")
    return value


def add_memory_limit(parser: argparse.ArgumentParser) -> None:
    """``--memory-limit`` on a training command: data up to it are read into memory.

    A runtime option (not part of the run's record): a resumed run may change it.
    """
    parser.add_argument(
        "--memory-limit",
        type=byte_size,
        default="1GiB",
        metavar="SIZE",
        help="training (and validation) dates up to this size are read into memory, larger "
        "ones streamed a chunk of the file at a time, read ahead (e.g. 512MiB, 2GiB; 0: always "
        "stream); the run says which path it took and why (its reads.json keeps it); a "
        "resumed run may change it",
    )
