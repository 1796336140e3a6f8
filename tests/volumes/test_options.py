"""``sciml cosmoflow|unet3d train``: the training options are VolumeTraining's fields."""

import argparse
import re

import pytest

from sciml.cli import build_parser
from sciml.cli_args import add_config_arguments, config_from_args
from sciml.training import TrainConfig
from sciml.volumes.config import VolumeTraining
from tests.weather.test_options import _dests, _subparser

#: What ``train`` adds by hand: the data, the run folder, and the launch: the grid (or the
#: planner's options that choose it), the batch that depends on it, the collectives'
#: timeout and the progress bar.
BY_HAND = {
    "help",
    "data",
    "run_dir",
    "val",
    "mesh",
    "batch_size",
    "global_batch",
    "profile",
    "memory",
    "timeout",
    "no_progress",
}


@pytest.mark.parametrize("workflow", ["cosmoflow", "unet3d"])
def test_the_options_are_exactly_the_configuration_fields(workflow: str) -> None:
    generated = argparse.ArgumentParser()
    add_config_arguments(generated, VolumeTraining)
    assert _dests(_subparser((workflow, "train"))) - BY_HAND == _dests(generated) - {"help"}


@pytest.mark.parametrize(
    ("workflow", "defaults"),
    [
        ("cosmoflow", {"lr": 0.01, "width": 16, "levels": 4}),
        ("unet3d", {"lr": 0.001, "width": 16, "levels": 3}),
    ],
)
def test_the_command_line_builds_the_configuration(
    workflow: str, defaults: dict[str, object]
) -> None:
    args = build_parser().parse_args([workflow, "train", "data.zarr", "--run-dir", "r"])
    expected = VolumeTraining(config=TrainConfig(num_workers=2), **defaults)  # type: ignore[arg-type]
    assert config_from_args(VolumeTraining, args) == expected
    given = ["--epochs", "3", "--workers", "0", "--decay-epochs", "2,4", "--dtype", "float64"]
    args = build_parser().parse_args([workflow, "train", "data.zarr", "--run-dir", "r", *given])
    loop = TrainConfig(epochs=3, num_workers=0)
    expected = VolumeTraining(config=loop, decay_epochs=(2, 4), dtype="float64", **defaults)  # type: ignore[arg-type]
    assert config_from_args(VolumeTraining, args) == expected


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lr": float("inf")}, "VolumeTraining.lr must be a finite number > 0, got inf"),
        ({"lr": 0}, "VolumeTraining.lr must be a finite number > 0, got 0"),
        ({"width": 2.0}, "VolumeTraining.width must be an integer >= 1, got 2.0"),
        ({"levels": True}, "VolumeTraining.levels must be an integer >= 1, got True"),
        ({"warmup_epochs": -1}, "VolumeTraining.warmup_epochs must be an integer >= 0, got -1"),
        ({"dropout": 1.0}, "VolumeTraining.dropout must be in [0, 1), got 1.0"),
        ({"decay_epochs": (2, 2.5)}, "VolumeTraining.decay_epochs must be increasing epochs"),
        ({"config": {"epochs": 2}}, "VolumeTraining.config must be a TrainConfig"),
    ],
)
def test_a_bad_configuration_is_refused_by_name(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        VolumeTraining(**changes)  # type: ignore[arg-type]
