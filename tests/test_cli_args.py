"""Command-line options generated from configuration dataclasses (``sciml.cli_args``)."""

import argparse
from dataclasses import dataclass, field

import pytest

from sciml.cli_args import (
    add_config_arguments,
    config_from_args,
    nested,
    not_an_option,
    option,
    positive_float,
    positive_int,
)


@dataclass(frozen=True)
class Loop:
    epochs: int = 10
    batch_size: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"Loop.epochs must be >= 1, got {self.epochs}")


@dataclass(frozen=True)
class Run:
    model: str = field(metadata=option("model to train", choices=("a", "b")))
    history: int = field(
        default=1, metadata=option("lead times stacked", flag="--temporal", type=int, metavar="N")
    )
    variables: tuple[str, ...] | None = field(default=None, metadata=option("variables", nargs="+"))
    lr: float = field(default=1e-3, metadata=option("learning rate", type=positive_float))
    loop: Loop = field(
        default_factory=lambda: Loop(batch_size=4),
        metadata=nested(epochs=option("epochs", type=positive_int), seed=option("seed", type=int)),
    )
    quiet: bool = field(default=False, metadata=option("no progress bar"))
    derived: str = field(default="from the data", metadata=not_an_option())


def _parser(config: type = Run) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run")
    add_config_arguments(parser, config)
    return parser


def test_round_trip_builds_the_nested_config_with_typed_values() -> None:
    args = _parser().parse_args(
        [
            "--model",
            "b",
            "--temporal",
            "3",
            "--variables",
            "t",
            "z",
            "--lr",
            "0.5",
            "--epochs",
            "4",
            "--seed",
            "7",
            "--quiet",
        ]
    )
    assert config_from_args(Run, args) == Run(
        model="b", history=3, variables=("t", "z"), lr=0.5, loop=Loop(4, 4, 7), quiet=True
    )


def test_defaults_are_the_config_defaults_and_nested_fields_not_exposed_keep_theirs() -> None:
    config = config_from_args(Run, _parser().parse_args(["--model", "a"]))
    assert config == Run(model="a")
    assert config.loop.batch_size == 4  # from the field's default, not Loop's own


def test_options_are_exactly_the_exposed_fields() -> None:
    dests = {a.dest for a in _parser()._actions if a.dest != "help"}
    assert dests == {"model", "history", "variables", "lr", "epochs", "seed", "quiet"}
    flags = {s for a in _parser()._actions for s in a.option_strings}
    assert "--temporal" in flags and "--history" not in flags and "--derived" not in flags


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "c"], "argument --model: invalid choice: 'c'"),
        (["--model", "a", "--epochs", "0"], "argument --epochs: expected an integer >= 1"),
        (["--model", "a", "--lr", "-1"], "argument --lr: expected a finite number > 0"),
        ([], "the following arguments are required: --model"),
    ],
)
def test_bad_values_are_refused_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(argv)
    assert message in capsys.readouterr().err


def test_a_field_without_metadata_is_an_error_not_skipped() -> None:
    @dataclass(frozen=True)
    class Bare:
        lr: float = field(default=1.0, metadata=option("learning rate"))
        width: int = 16

    with pytest.raises(TypeError, match=r"Bare\.width has no command-line metadata"):
        _parser(Bare)


def test_two_options_of_one_name_are_an_error() -> None:
    @dataclass(frozen=True)
    class Clash:
        epochs: int = field(default=1, metadata=option("epochs"))
        loop: Loop = field(default_factory=Loop, metadata=nested(epochs=option("epochs")))

    with pytest.raises(TypeError, match="Clash has two options named 'epochs'"):
        _parser(Clash)


def test_a_field_off_the_command_line_needs_a_default() -> None:
    @dataclass(frozen=True)
    class Hidden:
        grid: str = field(metadata=not_an_option())

    with pytest.raises(TypeError, match=r"Hidden\.grid is not an option but has no default"):
        _parser(Hidden)


def test_the_config_still_validates_what_it_is_given() -> None:
    @dataclass(frozen=True)
    class Loose:
        loop: Loop = field(default_factory=Loop, metadata=nested(epochs=option("epochs", type=int)))

    args = _parser(Loose).parse_args(["--epochs", "0"])
    with pytest.raises(ValueError, match="Loop.epochs must be >= 1, got 0"):
        config_from_args(Loose, args)


def test_a_bool_option_defaulting_to_true_is_a_flag_pair_not_a_text_value() -> None:
    @dataclass(frozen=True)
    class Plot:
        figures: bool = field(default=True, metadata=option("write figures"))

    assert config_from_args(Plot, _parser(Plot).parse_args([])) == Plot(figures=True)
    assert config_from_args(Plot, _parser(Plot).parse_args(["--no-figures"])) == Plot(False)
    with pytest.raises(SystemExit):
        _parser(Plot).parse_args(["--figures", "False"])
