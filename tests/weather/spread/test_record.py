"""A spread run's configuration file: written once, read back, older formats refused by name."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sciml.datasets.channels import NormStats
from sciml.training import TrainConfig
from sciml.training.runs.record import check_run_record, config_record, record_text
from sciml.weather.spread.config import SpreadConfig
from sciml.weather.spread.record import (
    SPREAD_RECORD,
    SPREAD_VERSION,
    read_spread_data,
    read_spread_run,
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
    train=TrainConfig(epochs=5, batch_size=8, seed=0, tensorboard=False),
    lr=1e-3,
    base_channels=8,
    depth=2,
)


DATA = {"members": 10, "spatial": ["lat", "lon"], "coords": {"lat": {"size": 4}}}


STATS = NormStats(channels=("a", "b"), mean=(0.0, 1.0), std=(1.0, 2.0))


def _record(config: SpreadConfig) -> dict[str, object]:
    return config_record(config) | {"data": DATA}


def _run(folder: Path) -> Path:
    folder.mkdir()
    assert not check_run_record(folder, SPREAD_RECORD, _record(CONFIG))  # a new run
    record = _record(CONFIG) | {"data": DATA | {"stats": STATS.record()}}
    (folder / "spread_run.json").write_text(record_text(SPREAD_RECORD, record))
    return folder


def test_a_run_reads_back_its_configuration_and_refuses_another(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    config, stats = read_spread_run(run)
    assert config == CONFIG and SPREAD_VERSION == 7
    assert stats == STATS and read_spread_data(run) == DATA | {"stats": STATS.record()}
    model = config.build()
    assert (model.members, model.ensemble, model.history) == (5, 10, 3)
    assert check_run_record(run, SPREAD_RECORD, _record(CONFIG))  # the same: resumed
    with pytest.raises(ValueError, match=r"another configuration \(ensemble: 10 in the run, 20"):
        check_run_record(run, SPREAD_RECORD, _record(replace(CONFIG, ensemble=20)))


def test_older_or_other_formats_are_refused_by_name(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    saved = json.loads((run / "spread_run.json").read_text())
    flat = saved["config"]  # the layout before format 5
    config = {k: v for k, v in flat.items() if k != "ensemble"}
    unnested = {**flat, **flat["train"]}  # format 5: the loop's options beside the others
    del unnested["train"]
    cases = [
        ({**flat, "version": 2}, r"format 2; .* reads format 7 \(the head now keeps the k members"),
        (flat, r"format 1; .* \(periodic dims now"),
        ({**flat, "version": 3}, r"format 3; .* format 7 \(a run now records the grid"),
        ({**flat, "version": 4}, r"format 4; .* format 7 \(the record now names its kind"),
        ({**saved, "version": 5, "config": unnested}, r"format 5; .* format 7 \(the config"),
        ({**saved, "version": 6}, r"format 6; .* format 7 \(.* no stats.json\)"),
        ({**saved, "version": 8}, r"format 8; .* format 7 \(another format\); retrain"),
        ({**saved, "config": config}, r"missing \['ensemble'\], unknown"),
    ]
    for raw, message in cases:
        (run / "spread_run.json").write_text(json.dumps(raw))
        with pytest.raises(ValueError, match=message):
            read_spread_run(run)
    with pytest.raises(FileNotFoundError, match="spread_run.json not found"):
        read_spread_run(tmp_path)
    # format 6 kept the statistics in stats.json: read as one record
    before = {**saved, "version": 6}
    before["config"] = {**saved["config"], "data": DATA}
    (run / "spread_run.json").write_text(json.dumps(before))
    STATS.to_json(run / "stats.json")
    assert read_spread_run(run) == (CONFIG, STATS)
