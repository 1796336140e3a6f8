"""The ``sciml`` command line: parses arguments and calls the library.

Each workflow adds its own subcommand group through a ``register(subparsers)``
function in its ``cli`` module, listed in :data:`WORKFLOW_CLIS`; heavy imports
stay inside the handlers so that ``sciml --help`` is fast.

Conventions every subcommand follows:

- every option has help text; ``--help`` shows its default (the formatter adds it);
- numeric options use the validating types below (:func:`positive_int`,
  :func:`non_negative_float`, ...), so that a bad value is a usage error before
  any work starts;
- a handler returns the exit code: 0 done, :data:`EXIT_FAILURE` for a failed
  check, :data:`sciml.training.EXIT_REQUEUE` (3) after checkpointing on
  SIGUSR1/SIGTERM;
- an exception from the library becomes one line ``sciml: error: ...`` and
  exit code 1 (``sciml --debug ...`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeAlias

#: What a workflow's ``register`` receives: the ``sciml`` parser's subcommands.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: The type of every workflow's ``register(subparsers)``.
Register: TypeAlias = Callable[[Subparsers], None]

#: Modules whose ``register(subparsers)`` adds a workflow's subcommands.
WORKFLOW_CLIS: tuple[str, ...] = (
    "sciml.weather.cli",
    "sciml.geo.cli",
    "sciml.spatial_parallel.cli",
    "sciml.volumes.cli",
)


#: Exit code of a command whose library call raised (usage errors exit with 2).
EXIT_FAILURE = 1


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


def _cmd_info(args: argparse.Namespace) -> int:
    from sciml.info import environment_report

    print(environment_report())
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from sciml.demos import DemoInterrupted, run_demo
    from sciml.training import EXIT_REQUEUE

    try:
        report = run_demo(Path(args.out), quick=args.quick, only=args.only)
    except DemoInterrupted as stop:
        print(
            f"sciml: {stop}; checkpointed, run the same command again to resume",
            file=sys.stderr,
        )
        print(f"partial report: {stop.report}", file=sys.stderr)
        return EXIT_REQUEUE
    print(f"demo report: {report}")
    print(f"figures and data: {report.parent}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Build the ``sciml`` argument parser with every subcommand."""
    from sciml import __version__

    parser = argparse.ArgumentParser(
        prog="sciml",
        description="Scientific machine learning: spatially parallel 3D CNNs, "
        "ensemble weather post-processing and OSM road masks.",
    )
    parser.add_argument("--version", action="version", version=f"sciml {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback when a command fails"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    info = sub.add_parser("info", help="versions, devices and distributed backends")
    info.set_defaults(func=_cmd_info)

    demo = sub.add_parser(
        "demo", help="run every workflow end to end on the bundled data and write a report"
    )
    demo.add_argument("--out", default="runs/demo", help="output folder")
    demo.add_argument(
        "--quick", action="store_true", help="smallest sizes (seconds, for smoke tests)"
    )
    demo.add_argument(
        "--only", action="append", metavar="SECTION", help="run only this section (repeatable)"
    )
    demo.set_defaults(func=_cmd_demo)

    for module in WORKFLOW_CLIS:
        register: Register = importlib.import_module(module).register
        register(sub)
    _show_defaults(parser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every subcommand below it a help that shows defaults."""
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _show_defaults(subparser)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sciml`` command.

    Returns the command's exit code. A library error is printed as one line
    on stderr (exit code :data:`EXIT_FAILURE`); with ``--debug`` it propagates
    with its traceback.
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as err:
        if args.debug:
            raise
        print(f"sciml: error: {type(err).__name__}: {err}", file=sys.stderr)
        print("sciml: run with --debug for the full traceback", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
