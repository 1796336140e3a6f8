"""What every ``sciml`` subcommand module shares: types, checks and generated options.

The subparsers type, validating number types, and command-line options generated from
configuration dataclasses.

A configuration field carries its option in ``dataclasses.field(metadata=option(...))``;
:func:`add_config_arguments` adds one option per field and :func:`config_from_args` builds the
configuration back from the parsed arguments, so each option is written once. The workflow
``cli`` modules import these, never :mod:`sciml.cli` (which imports the workflows), so the
command line has no import cycle.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

__all__ = [
    "Option",
    "Register",
    "Subparsers",
    "add_config_arguments",
    "byte_size",
    "comma_list",
    "config_from_args",
    "finite_float",
    "fraction",
    "non_negative_float",
    "non_negative_int",
    "not_an_option",
    "option",
    "positive_float",
    "positive_int",
    "nested",
    "runs_and_test_data",
    "sweep_option",
]

#: What a workflow's ``register`` receives: the ``sciml`` parser's subcommands.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: The type of every workflow's ``register(subparsers)``.
Register: TypeAlias = Callable[[Subparsers], None]


def _number(kind: type, test: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse type converting to ``kind`` and rejecting values failing ``test``."""

    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not (math.isfinite(value) and test(value)):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    convert.__name__ = expected  # argparse names the type in its messages
    return convert


#: Validating argparse types for numeric options.
positive_int = _number(int, lambda v: v > 0, "an integer >= 1")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _number(float, lambda v: v > 0, "a finite number > 0")
non_negative_float = _number(float, lambda v: v >= 0, "a finite number >= 0")
finite_float = _number(float, lambda v: True, "a finite number")
fraction = _number(float, lambda v: 0 < v < 1, "a fraction between 0 and 1, exclusive")


_BYTE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_BYTE_UNITS |= {f"{prefix}ib": 2 ** (10 * power) for power, prefix in enumerate("kmgt", 1)}


def byte_size(text: str) -> int:
    """An argparse type: a size in bytes with its unit (``512MiB``, ``2GiB``, ``1.5GB``), or 0.

    Units: B, kB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (of 1024); the prefix
    may be of either case, the ``B`` is upper case (``2Gb`` would be gigabits). A plain
    ``0`` needs no unit.

    Raises:
        argparse.ArgumentTypeError: No unit, an unknown unit, bits, or a negative size.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if match and float(match.group(1)) == 0 and not match.group(2):
        return 0
    unit = match.group(2) if match else ""
    if unit.endswith("b"):
        raise argparse.ArgumentTypeError(
            f"expected a size in bytes (B), got {text!r}: a lower-case b means bits; write "
            "e.g. 512MiB or 2GiB"
        )
    if not match or unit.lower() not in _BYTE_UNITS:
        raise argparse.ArgumentTypeError(
            f"expected a size with its unit, such as 512MiB, 2GiB or 1.5GB (or 0), got {text!r}"
        )
    value = float(match.group(1)) * _BYTE_UNITS[unit.lower()]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite size, got {text!r}")
    return round(value)


def comma_list(item: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    """An argparse type: comma-separated values, each converted by ``item``, none repeated."""

    def convert(text: str) -> tuple[Any, ...]:
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(
                f"expected comma-separated values, each {item.__name__}, got {text!r}"
            )
        values = tuple(item(part) for part in parts)
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r} gives a value twice")
        return values

    convert.__name__ = f"comma-separated values, each {item.__name__}"
    return convert


def sweep_option(parser: argparse.ArgumentParser, dest: str, item: Callable[[str], Any]) -> None:
    """Let the generated option ``dest`` take comma-separated values: a sweep, one run each.

    Its value becomes a tuple (the default: a tuple of one).

    Raises:
        ValueError: ``parser`` has no option ``dest``.
    """
    for action in parser._actions:
        if action.dest == dest:
            # a string default goes through ``type`` too: a tuple, shown as the value in --help
            action.type, action.default = comma_list(item), str(action.default)
            action.help = f"{action.help} (comma-separated: one run each, trained together)"
            return
    raise ValueError(f"the parser has no option {dest!r}")


def runs_and_test_data(
    runs: list[str], data: list[str], *, marker: str
) -> tuple[list[str], list[str]]:
    """Run folders and test files; ``--run-dir R1 R2 TEST`` puts TEST among the runs.

    A run folder holds ``marker``; a sweep's folder (``--seeds``, ``--lr``) stands for the
    run folders directly in it. Without positional test data, the trailing paths of
    ``--run-dir`` that are neither are the test data.

    Raises:
        ValueError: No test data in either place, no run folder, or a path among the runs
            that holds none.
    """
    found = [_runs_in(Path(path), marker) for path in runs]
    if not data:
        count = len(runs)
        while count and not found[count - 1]:
            count -= 1
        if count == len(runs):
            raise ValueError("no test data given: name the test file(s) after the run folders")
        if count == 0:
            raise ValueError(f"no run folder among --run-dir {runs} (none holds {marker})")
        runs, found, data = runs[:count], found[:count], runs[count:]
    empty = [path for path, inside in zip(runs, found, strict=True) if not inside]
    if empty:
        raise ValueError(
            f"--run-dir {empty}: not a run folder (no {marker}) nor a folder of run folders"
        )
    return [run for inside in found for run in inside], data


def _runs_in(path: Path, marker: str) -> list[str]:
    """``path`` if it is a run folder, else the run folders directly in it (a sweep's)."""
    if (path / marker).exists():
        return [str(path)]
    if not path.is_dir():
        return []
    return sorted(str(sub) for sub in path.iterdir() if (sub / marker).exists())


#: The key of a field's command-line option in its ``dataclasses.field`` metadata.
_KEY = "sciml.cli"
_Config = TypeVar("_Config")


@dataclasses.dataclass(frozen=True)
class Option:
    """How a configuration field appears on the command line (:func:`option`)."""

    help: str
    flag: str | None = None
    type: Callable[[str], Any] | None = None
    choices: Sequence[str] | None = None
    metavar: str | None = None
    nargs: str | None = None


def option(
    help: str,  # noqa: A002 - argparse's own name
    *,
    flag: str | None = None,
    type: Callable[[str], Any] | None = None,  # noqa: A002
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    nargs: str | None = None,
) -> dict[str, Option]:
    """Field metadata making the field a command-line option.

    Args:
        help: The option's help text (``--help`` adds its default).
        flag: The flag, when not ``--`` and the field's name with ``-`` for ``_``.
        type: The argparse type converting the text, e.g. :data:`positive_int`.
        choices: The values allowed.
        metavar: The value's name in ``--help``.
        nargs: argparse's ``nargs``; the values become a tuple in the configuration.
    """
    return {_KEY: Option(help, flag, type, choices, metavar, nargs)}


def not_an_option() -> dict[str, None]:
    """Field metadata keeping the field off the command line (it keeps its default)."""
    return {_KEY: None}


def nested(**options: Mapping[str, Option]) -> dict[str, dict[str, Option]]:
    """Metadata of a nested configuration field exposing ``options`` (name -> :func:`option`).

    The inner fields named appear as options of their own, flattened; the others keep the
    values of the field's default.
    """
    return {_KEY: {name: meta[_KEY] for name, meta in options.items()}}


def _options(config: type) -> Iterator[tuple[str, Option, Any]]:
    """``(name, option, default)`` of each option of ``config``; ``default`` is MISSING if none."""
    for field in dataclasses.fields(config):
        if _KEY not in field.metadata:
            raise TypeError(
                f"{config.__name__}.{field.name} has no command-line metadata: give it "
                "metadata=option(...), nested(...) or not_an_option()"
            )
        spec = field.metadata[_KEY]
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        if isinstance(spec, Option):
            yield field.name, spec, default
        elif isinstance(spec, dict):
            if default is dataclasses.MISSING:
                raise TypeError(f"{config.__name__}.{field.name} is nested but has no default")
            for name, inner in spec.items():
                yield name, inner, getattr(default, name)
        elif default is dataclasses.MISSING:
            raise TypeError(f"{config.__name__}.{field.name} is not an option but has no default")


def add_config_arguments(parser: argparse.ArgumentParser, config: type) -> None:
    """Add one option per field of the dataclass ``config`` (nested fields flattened).

    A field without a default is a required option; a ``bool`` field is a flag
    (``--name`` when it defaults to ``False``, ``--name``/``--no-name`` when to ``True``:
    a text value would make ``--name False`` true).

    Raises:
        TypeError: A field without command-line metadata, or two options of one name.
    """
    seen: set[str] = set()
    for name, spec, default in _options(config):
        if name in seen:
            raise TypeError(f"{config.__name__} has two options named {name!r}")
        seen.add(name)
        flag = spec.flag or "--" + name.replace("_", "-")
        if default is False:
            parser.add_argument(flag, dest=name, action="store_true", help=spec.help)
            continue
        if default is True:
            action = argparse.BooleanOptionalAction
            parser.add_argument(flag, dest=name, action=action, default=True, help=spec.help)
            continue
        settings: dict[str, Any] = {"type": spec.type, "choices": spec.choices}
        settings |= {"metavar": spec.metavar, "nargs": spec.nargs}
        settings = {key: value for key, value in settings.items() if value is not None}
        if default is dataclasses.MISSING:
            settings["required"] = True
        else:
            settings["default"] = default
        parser.add_argument(flag, dest=name, help=spec.help, **settings)


def config_from_args(config: type[_Config], args: argparse.Namespace) -> _Config:
    """The ``config`` dataclass of the options parsed into ``args`` (lists become tuples).

    Examples:
        >>> @dataclasses.dataclass(frozen=True)
        ... class Loop:
        ...     epochs: int = 10
        ...     seed: int = 0
        >>> @dataclasses.dataclass(frozen=True)
        ... class Run:
        ...     model: str = dataclasses.field(metadata=option("model", choices=("a", "b")))
        ...     sizes: tuple[int, ...] = dataclasses.field(
        ...         default=(), metadata=option("sizes", type=positive_int, nargs="*"))
        ...     loop: Loop = dataclasses.field(
        ...         default_factory=Loop, metadata=nested(epochs=option("epochs", type=int)))
        >>> parser = argparse.ArgumentParser()
        >>> add_config_arguments(parser, Run)
        >>> args = parser.parse_args(["--model", "b", "--sizes", "2", "3", "--epochs", "4"])
        >>> run = config_from_args(Run, args)
        >>> run
        Run(model='b', sizes=(2, 3), loop=Loop(epochs=4, seed=0))
    """
    values: dict[str, Any] = {}
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        spec = field.metadata.get(_KEY)
        if isinstance(spec, Option):
            values[field.name] = _value(getattr(args, field.name))
        elif isinstance(spec, dict):
            inner = {name: _value(getattr(args, name)) for name in spec}
            default = field.default_factory()  # type: ignore[operator]
            values[field.name] = dataclasses.replace(default, **inner)
    return config(**values)


def _value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
