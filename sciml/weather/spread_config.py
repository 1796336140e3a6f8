"""A spread run's configuration and its file, ``spread_run.json``.

:class:`SpreadConfig` holds what a spread run was trained on and how; :func:`claim_spread_run`
writes it into a run folder (a rerun with another one is refused) and
:func:`read_spread_run` reads it back with the run's channel statistics. A run folder
records :data:`SPREAD_VERSION`; folders of another version are refused by name (retrain in
a new folder).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from sciml.io_utils import atomic_write_text
from sciml.run_dir import RunLock, differences
from sciml.weather.spread import SpreadPredictor
from sciml.xrchannels import NormStats

__all__ = [
    "RUN_CONFIG",
    "SPREAD_VERSION",
    "SpreadConfig",
    "claim_spread_run",
    "read_spread_run",
]

RUN_CONFIG = "spread_run.json"
#: Format of ``spread_run.json``; 3: the head estimates the underlying variance and keeps
#: the k members' own part of the ``ensemble``-member spread (2: a free log-residual on the
#: sample spread; 1: periodic dims padded by ``2**depth`` points and cropped): other networks.
SPREAD_VERSION = 3
_CHANGES = {
    1: "periodic dims now wrap exactly",
    2: "the head now keeps the k members' own part of the full spread",
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

    def to_json(self) -> str:
        """The configuration as JSON text."""
        return json.dumps(asdict(self), indent=2) + "\n"

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


def claim_spread_run(run_dir: Path, config: SpreadConfig) -> None:
    """Write ``config`` into ``run_dir``, or refuse a folder that holds another one.

    Raises:
        ValueError: ``run_dir`` holds a spread run of another configuration (or version).
    """
    path = run_dir / RUN_CONFIG
    with RunLock(run_dir, name=f"{RUN_CONFIG}.lock"):
        if path.exists():
            changed = differences(json.loads(path.read_text()), json.loads(config.to_json()))
            if changed:
                raise ValueError(
                    f"{run_dir} holds a spread run with another configuration "
                    f"({'; '.join(changed)}); give this run another --run-dir"
                )
        atomic_write_text(path, config.to_json())


def read_spread_run(run_dir: Path | str) -> tuple[SpreadConfig, NormStats]:
    """The configuration and channel statistics of a spread run folder.

    Raises:
        FileNotFoundError: Not a spread run folder.
        ValueError: A run folder of another format (another version, or other
            configuration fields).
    """
    run_dir = Path(run_dir)
    path = run_dir / RUN_CONFIG
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found; is {run_dir} a 'sciml weather spread train' run?"
        )
    raw: dict[str, Any] = json.loads(path.read_text())
    version = raw.get("version", 1)
    if version != SPREAD_VERSION:
        why = ", ".join([*([_CHANGES[version]] if version in _CHANGES else []), "another network"])
        raise ValueError(
            f"{run_dir} holds a spread run of format {version}; this version of sciml reads "
            f"format {SPREAD_VERSION} ({why}): retrain it in a new --run-dir"
        )
    expected = {f.name for f in fields(SpreadConfig)}
    if set(raw) != expected:
        raise ValueError(
            f"{path} is a spread run of another format (missing {sorted(expected - set(raw))}, "
            f"unknown {sorted(set(raw) - expected)}); this version of sciml cannot rebuild it"
        )
    for key in ("variables", "periodic", "lead_days"):
        raw[key] = tuple(raw[key])
    return SpreadConfig(**raw), NormStats.from_json(run_dir / "stats.json")
