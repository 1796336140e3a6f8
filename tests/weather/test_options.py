"""The weather training commands' options are their configurations' fields, and only those."""

import argparse

import pytest

from sciml.cli import build_parser
from sciml.cli_args import add_config_arguments, config_from_args
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.spread.config import SpreadConfig

#: Each command, its configuration, and its required options with their fields' values.
COMMANDS = [
    pytest.param(("weather", "train"), PostprocessConfig, {"model": "mlp"}, id="weather train"),
    pytest.param(("weather", "spread", "train"), SpreadConfig, {}, id="weather spread train"),
]
#: What a command adds by hand: the data, the run folder, the progress bar (how a run
#: shows, not what it computes), a sweep's seeds (how many runs, each with one seed) and
#: the memory limit (how the data are read, a runtime option).
BY_HAND = {"help", "data", "run_dir", "quiet", "seeds", "memory_limit"}
#: Options of each command that take a sweep's comma-separated values (a tuple of one
#: by default).
SWEPT = {("weather", "train"): {"lr"}, ("weather", "spread", "train"): {"lr"}}


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
    for name in SWEPT.get(path, set()):
        value = getattr(args, name)
        assert isinstance(value, tuple) and len(value) == 1, (name, value)
        setattr(args, name, value[0])
    assert config_from_args(config, args) == config(**required)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PostprocessConfig(model="gbm"), r"PostprocessConfig.model must be one of"),
        (lambda: PostprocessConfig(model="mlp", members=1), r"members must be an integer >= 2"),
        (lambda: PostprocessConfig(model="mlp", validation=1.5), r"validation must be a fract"),
        (lambda: PostprocessConfig(model="mlp", validation=0), r"validation must be a fraction"),
        (lambda: PostprocessConfig(model="mlp", lr=float("nan")), r"lr must be a finite number"),
        (lambda: PostprocessConfig(model="mlp", choice="last"), r"choice must be None, 'first'"),
        (lambda: PostprocessConfig(model="mlp", variables=()), r"variables must be None or a"),
        (lambda: SpreadConfig(history=0), r"SpreadConfig.history must be an integer >= 1"),
        (lambda: SpreadConfig(periodic=("time",)), r"periodic must be None or a tuple of"),
        (lambda: SpreadConfig(depth=-1), r"SpreadConfig.depth must be an integer >= 0"),
    ],
)
def test_a_bad_option_is_refused_by_name_when_the_configuration_is_made(
    make: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_emos_records_no_validation_dates() -> None:
    assert PostprocessConfig(model="emos", validation=0).validation == 0
