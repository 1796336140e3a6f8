"""A spread run's configuration and its file, ``spread_run.json``.

:class:`SpreadConfig` holds what a spread run was trained on and how; the file holds it
with the training data's record (:func:`sciml.weather.grid.data_record`: grid labels, lead
times, start dates), as :func:`spread_run_text` writes it. :func:`check_spread_run` tells a
resumed run from a new one and refuses a folder that holds another run (reading only:
the caller writes once every check has passed), and :func:`read_spread_run` reads the
configuration back with the run's channel statistics (:func:`read_spread_data` the data's
record). A run folder records :data:`SPREAD_VERSION`; folders of another version are
refused by name (retrain in a new folder).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from sciml.datasets.channels import NormStats
from sciml.training.run_dir import check_record
from sciml.weather.spread.model import SpreadPredictor

__all__ = [
    "RUN_CONFIG",
    "SPREAD_VERSION",
    "SpreadConfig",
    "check_spread_run",
    "read_spread_data",
    "read_spread_run",
    "spread_run_text",
]

RUN_CONFIG = "spread_run.json"
#: Format of ``spread_run.json``; 4: it records the training data's grid, lead times and
#: start dates; 3: the head estimates the underlying variance and keeps the k members' own
#: part of the ``ensemble``-member spread (2: a free log-residual on the sample spread; 1:
#: periodic dims padded by ``2**depth`` points and cropped): other networks.
SPREAD_VERSION = 4
#: Key of the training data's record in the file.
DATA_KEY = "data"
_CHANGES = {
    1: "periodic dims now wrap exactly, another network",
    2: "the head now keeps the k members' own part of the full spread, another network",
    3: "a run now records the grid, lead times and start dates it was trained on",
}


@dataclass(frozen=True)
class SpreadConfig:
    """What a spread run was trained on and how (``spread_run.json``).

    ``ensemble`` is the size of the ensemble whose spread the run predicts (the training
    data's member count).
    """

    members: int
    ensemble: int
    history: int
    lead_days: tuple[float, ...]
    loss: str
    variables: tuple[str, ...]
    levels: int
    periodic: tuple[str, ...]
    choice: str
    validation: float
    epochs: int
    batch_size: int
    lr: float
    seed: int
    base_channels: int
    depth: int
    version: int = SPREAD_VERSION

    def build(self) -> SpreadPredictor:
        """A new model of this configuration."""
        return SpreadPredictor(
            len(self.variables),
            members=self.members,
            ensemble=self.ensemble,
            levels=self.levels,
            history=self.history,
            periodic=self.periodic,
            base_channels=self.base_channels,
            depth=self.depth,
        )


def spread_run_text(config: SpreadConfig, data: dict[str, Any]) -> str:
    """The text of ``spread_run.json``: the configuration and the training data's record."""
    return json.dumps(asdict(config) | {DATA_KEY: data}, indent=2) + "\n"


def check_spread_run(run_dir: Path, text: str) -> bool:
    """Whether ``run_dir`` holds this run already (``text``: :func:`spread_run_text`).

    Raises:
        ValueError: ``run_dir`` holds a spread run of another configuration, version or
            training data; nothing is written.
    """
    return check_record(run_dir / RUN_CONFIG, text, what="a spread run")


def _read(run_dir: Path) -> dict[str, Any]:
    """``spread_run.json`` of a spread run folder of this format, as plain data."""
    path = run_dir / RUN_CONFIG
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found; is {run_dir} a 'sciml weather spread train' run?"
        )
    raw: dict[str, Any] = json.loads(path.read_text())
    version = raw.get("version", 1)
    if version != SPREAD_VERSION:
        why = _CHANGES.get(version, "another network")
        raise ValueError(
            f"{run_dir} holds a spread run of format {version}; this version of sciml reads "
            f"format {SPREAD_VERSION} ({why}): retrain it in a new --run-dir"
        )
    return raw


def read_spread_run(run_dir: Path | str) -> tuple[SpreadConfig, NormStats]:
    """The configuration and channel statistics of a spread run folder.

    Raises:
        FileNotFoundError: Not a spread run folder.
        ValueError: A run folder of another format (another version, or other
            configuration fields).
    """
    run_dir = Path(run_dir)
    path = run_dir / RUN_CONFIG
    raw = _read(run_dir)
    raw.pop(DATA_KEY, None)
    expected = {f.name for f in fields(SpreadConfig)}
    if set(raw) != expected:
        raise ValueError(
            f"{path} is a spread run of another format (missing {sorted(expected - set(raw))}, "
            f"unknown {sorted(set(raw) - expected)}); this version of sciml cannot rebuild it"
        )
    for key in ("variables", "periodic", "lead_days"):
        raw[key] = tuple(raw[key])
    return SpreadConfig(**raw), NormStats.from_json(run_dir / "stats.json")


def read_spread_data(run_dir: Path | str) -> dict[str, Any]:
    """What a spread run recorded of its training data (:func:`sciml.weather.grid.data_record`).

    Raises:
        FileNotFoundError: Not a spread run folder.
        ValueError: A run folder of another format.
    """
    record: dict[str, Any] = _read(Path(run_dir))[DATA_KEY]
    return record
