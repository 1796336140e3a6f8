"""A spread run's configuration file: written once, read back, older formats refused by name."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sciml.datasets.channels import NormStats
from sciml.weather.spread.config import (
    SPREAD_VERSION,
    SpreadConfig,
    check_spread_run,
    read_spread_data,
    read_spread_run,
    spread_run_text,
)

CONFIG = SpreadConfig(
    members=5,
    ensemble=10,
    history=3,
    lead_days=(0.0, 1.0, 2.0),
    loss="log_l1",
    variables=("psi", "q"),
    levels=2,
    periodic=("lat", "lon"),
    choice="random",
    validation=0.25,
    epochs=5,
    batch_size=8,
    lr=1e-3,
    seed=0,
    base_channels=8,
    depth=2,
)


DATA = {"members": 10, "spatial": ["lat", "lon"], "coords": {"lat": {"size": 4}}}


def _run(folder: Path) -> Path:
    folder.mkdir()
    assert not check_spread_run(folder, spread_run_text(CONFIG, DATA))  # a new run
    (folder / "spread_run.json").write_text(spread_run_text(CONFIG, DATA))
    NormStats(channels=("a", "b"), mean=(0.0, 1.0), std=(1.0, 2.0)).to_json(folder / "stats.json")
    return folder


def test_a_run_reads_back_its_configuration_and_refuses_another(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    config, stats = read_spread_run(run)
    assert config == CONFIG and config.version == SPREAD_VERSION == 4
    assert stats.std == (1.0, 2.0) and read_spread_data(run) == DATA
    model = config.build()
    assert (model.members, model.ensemble, model.history) == (5, 10, 3)
    assert check_spread_run(run, spread_run_text(CONFIG, DATA))  # the same: resumed
    with pytest.raises(ValueError, match=r"another configuration \(ensemble: 10 in the run, 20"):
        check_spread_run(run, spread_run_text(replace(CONFIG, ensemble=20), DATA))


def test_older_or_other_formats_are_refused_by_name(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    saved = json.loads((run / "spread_run.json").read_text())
    cases = [
        (
            {**saved, "version": 2},
            r"format 2; .* reads format 4 \(the head now keeps the k members",
        ),
        ({k: v for k, v in saved.items() if k != "version"}, r"format 1; .* \(periodic dims now"),
        ({**saved, "version": 3}, r"format 3; .* format 4 \(a run now records the grid"),
        ({**saved, "version": 7}, r"format 7; .* format 4 \(another network\): retrain"),
        ({k: v for k, v in saved.items() if k != "ensemble"}, r"missing \['ensemble'\], unknown"),
    ]
    for raw, message in cases:
        (run / "spread_run.json").write_text(json.dumps(raw))
        with pytest.raises(ValueError, match=message):
            read_spread_run(run)
    with pytest.raises(FileNotFoundError, match="spread_run.json not found"):
        read_spread_run(tmp_path)
