"""The weather training commands' options are their configurations' fields, and only those."""

import argparse

import pytest

from sciml.cli import build_parser
from sciml.cli_args import add_config_arguments, config_from_args
from sciml.weather.postprocess.config import PostprocessConfig

#: Each command, its configuration, and its required options with their fields' values.
COMMANDS = [
    pytest.param(("weather", "train"), PostprocessConfig, {"model": "mlp"}, id="weather train"),
]
#: What a command adds by hand: the data, the run folder, and the progress bar (how a run
#: shows, not what it computes).
BY_HAND = {"help", "data", "run_dir", "quiet"}


def _subparser(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {action.dest for action in parser._actions}


@pytest.mark.parametrize(("path", "config", "required"), COMMANDS)
def test_the_options_are_exactly_the_configuration_fields(
    path: tuple[str, ...], config: type, required: dict[str, str]
) -> None:
    generated = argparse.ArgumentParser()
    add_config_arguments(generated, config)
    assert _dests(_subparser(path)) - BY_HAND == _dests(generated) - {"help"}


@pytest.mark.parametrize(("path", "config", "required"), COMMANDS)
def test_the_command_line_defaults_are_the_configuration_defaults(
    path: tuple[str, ...], config: type, required: dict[str, str]
) -> None:
    given = [text for name, value in required.items() for text in (f"--{name}", value)]
    args = build_parser().parse_args([*path, *given, "--run-dir", "r", "data.nc"])
    assert config_from_args(config, args) == config(**required)
