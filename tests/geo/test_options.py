"""``sciml geo train``'s options are SegmenterConfig's fields, and only those."""

import argparse
import re

import pytest

from sciml.cli import build_parser
from sciml.cli_args import add_config_arguments, config_from_args
from sciml.geo.config import SegmenterConfig
from sciml.training import TrainConfig
from tests.weather.test_options import _dests, _subparser

#: What ``geo train`` adds by hand: the three rasters and the run folder.
BY_HAND = {"help", "image", "mask", "labels", "run_dir"}
DATA = ["image.tif", "mask.tif", "labels.tif", "--run-dir", "r"]


def test_the_options_are_exactly_the_configuration_fields() -> None:
    generated = argparse.ArgumentParser()
    add_config_arguments(generated, SegmenterConfig)
    assert _dests(_subparser(("geo", "train"))) - BY_HAND == _dests(generated) - {"help"}


def test_the_command_line_builds_the_configuration() -> None:
    assert config_from_args(
        SegmenterConfig, build_parser().parse_args(["geo", "train", *DATA])
    ) == (SegmenterConfig())
    given = ["--epochs", "3", "--seed", "5", "--lr", "0.01", "--unmasked", "--loss", "dice"]
    args = build_parser().parse_args(["geo", "train", *DATA, *given])
    loop = TrainConfig(epochs=3, batch_size=8, seed=5, tensorboard=False)
    expected = SegmenterConfig(train=loop, lr=0.01, unmasked=True, loss="dice")
    assert config_from_args(SegmenterConfig, args) == expected


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lr": float("nan")}, "SegmenterConfig.lr must be a finite number > 0, got nan"),
        ({"lr": True}, "SegmenterConfig.lr must be a finite number > 0, got True"),
        ({"depth": 2.0}, "SegmenterConfig.depth must be an integer >= 1, got 2.0"),
        ({"overlap": -1}, "SegmenterConfig.overlap must be an integer >= 0, got -1"),
        ({"loss": "focal"}, "SegmenterConfig.loss must be one of ('bce', 'dice'"),
        ({"unmasked": 1}, "SegmenterConfig.unmasked must be True or False, got 1"),
        ({"train": {"epochs": 2}}, "SegmenterConfig.train must be a TrainConfig"),
        ({"tile": 64, "overlap": 64}, "--overlap (64) must be smaller than --tile (64)"),
        ({"tile": 36, "overlap": 8}, "--tile (36) must be divisible by 2**depth = 8 (--depth 3)"),
    ],
)
def test_a_bad_configuration_is_refused_by_name(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        SegmenterConfig(**changes)  # type: ignore[arg-type]
