"""The ``sciml`` command line: parses arguments and calls the library.

Each workflow adds its own subcommand group through a ``register(subparsers)``
function in its ``cli`` module, listed in :data:`WORKFLOW_COMMANDS`. A command
line imports only the workflow it names (``sciml --help`` imports none, so it
is fast); heavy imports stay inside the handlers.

Conventions every subcommand follows:

- every option has help text; ``--help`` shows its default (the formatter adds
  it, except for required options and those without one);
- numeric options use the validating types of :mod:`sciml.cli_args`
  (:func:`~sciml.cli_args.positive_int`, ...), so that a bad value is a usage error before
  any work starts;
- a usage error prints the usage of the (sub)command it concerns and one line
  ``sciml ...: error: ...``, exit code 2 (argparse's);
- a handler returns the exit code: 0 done, :data:`EXIT_FAILURE` for a failed
  check, :data:`sciml.training.EXIT_REQUEUE` (3) after checkpointing on
  SIGUSR1/SIGTERM;
- an exception from the library becomes one line ``sciml: error: ...`` and
  exit code 1 (``sciml --debug ...`` shows the traceback);
- a job shows each error once (every rank exits with
  the code): under srun rank 0 prints it; under torchrun each rank writes it
  to its elastic error file and torchrun's failure summary shows it as the
  root cause (torchrun's own exit code is 1 for any failure).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NoReturn, cast

from sciml.cli_args import Register, Subparsers
from sciml.io_utils import atomic_write_text

#: Top-level workflow commands: name -> (module whose ``register(subparsers)``
#: adds it, its one-line help in ``sciml --help``).
WORKFLOW_COMMANDS: dict[str, tuple[str, str]] = {
    "weather": ("sciml.weather.cli", "ensemble weather data, toy model, scores"),
    "geo": ("sciml.geo.cli", "OSM road masks and tree segmentation"),
    "spatial": ("sciml.spatial_parallel.cli", "spatially parallel 3D CNNs"),
    "cosmoflow": (
        "sciml.volumes.cli",
        "CosmoFlow: regress cosmological parameters from 3D volumes",
    ),
    "unet3d": ("sciml.volumes.cli", "3D U-Net: segment volumes into voids, sheets and halos"),
}

#: Modules whose ``register(subparsers)`` adds a workflow's subcommands.
WORKFLOW_CLIS: tuple[str, ...] = tuple(
    dict.fromkeys(module for module, _ in WORKFLOW_COMMANDS.values())
)


#: The sections of ``sciml demo``, in order: :data:`sciml.demos.SECTIONS` names their modules.
#: ``--only`` takes these alone, so an unknown name is a usage error before any import.
DEMO_SECTIONS: tuple[str, ...] = ("spine", "spatial", "weather", "geo", "volumes")

#: Exit code of a command whose library call raised.
EXIT_FAILURE = 1

#: Exit code of a usage error (argparse's).
EXIT_USAGE = 2

#: The variable naming the file torchrun's agent reads a failed worker's error from.
ELASTIC_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"


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
    print(f"demo report: {report} (and {report.with_suffix('.html').name} beside it)")
    print(f"figures and data: {report.parent}")
    return 0


def _prints_errors() -> bool:
    """Whether this process prints error lines: rank 0 of a launch, or a lone process."""
    from sciml.distributed.launch import detect_launch

    try:
        return detect_launch().rank == 0
    except ValueError:  # malformed launcher variables: say what failed rather than nothing
        return True


def _report_error(line: str) -> None:
    """Show the one-line error ``line`` once per job.

    Under torchrun every rank writes it to its elastic error file
    (:data:`ELASTIC_ERROR_FILE`) and none prints it: torchrun's failure summary
    shows it as the root cause (the first rank to fail), also when the agent
    stopped the other ranks, rank 0 included, before they could print. Elsewhere
    rank 0 prints it on stderr (under srun too).
    """
    path = os.environ.get(ELASTIC_ERROR_FILE)
    if path:
        stamp = str(int(time.time()))
        record = {"message": {"message": line, "extraInfo": {"timestamp": stamp}}}
        try:
            atomic_write_text(path, json.dumps(record))
            return
        except OSError as err:
            line = f"{line} (not written to {ELASTIC_ERROR_FILE} {path}: {err})"
    if _prints_errors():
        print(line, file=sys.stderr)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default, except for required options and those without one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        unset = action.default is None or (action.nargs == 0 and action.default is False)
        if action.required or unset:
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose subcommands refuse unknown arguments themselves.

    argparse leaves a subcommand's unknown arguments to the top-level parser,
    which then shows the top-level usage; here the subcommand that received
    them reports them, with its own usage.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse ``args`` and refuse any argument this parser does not know."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        """Show the usage (rank 0) and ``message`` once per job; exit with :data:`EXIT_USAGE`."""
        if _prints_errors():
            self.print_usage(sys.stderr)
        _report_error(f"{self.prog}: error: {message}")
        sys.exit(EXIT_USAGE)


def build_parser(workflows: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """Build the ``sciml`` argument parser.

    Args:
        workflows: Names in :data:`WORKFLOW_COMMANDS` whose subcommands to add
            (importing their modules); the others get a placeholder that only
            lists them in ``sciml --help``. Default: every workflow.

    Raises:
        ValueError: For a name not in :data:`WORKFLOW_COMMANDS`.
    """
    from sciml import __version__

    wanted = list(WORKFLOW_COMMANDS) if workflows is None else list(workflows)
    unknown = [name for name in wanted if name not in WORKFLOW_COMMANDS]
    if unknown:
        raise ValueError(f"unknown workflow command(s) {unknown}; known: {list(WORKFLOW_COMMANDS)}")
    parser = _Parser(
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
        "--only",
        action="append",
        choices=DEMO_SECTIONS,
        metavar="SECTION",
        help="run only this section (repeatable; one of %(choices)s); its report goes to "
        "OUT/only-SECTION",
    )
    demo.set_defaults(func=_cmd_demo)

    for module in dict.fromkeys(WORKFLOW_COMMANDS[name][0] for name in wanted):
        register: Register = importlib.import_module(module).register
        register(cast(Subparsers, sub))
    for name, (_, about) in WORKFLOW_COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=about)
    _show_defaults(parser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every subcommand below it a help that shows defaults."""
    parser.formatter_class = _HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _show_defaults(subparser)


def _command(argv: Sequence[str]) -> str | None:
    """The top-level command of ``argv``: its first argument that is not an option."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sciml`` command.

    Without arguments it prints the help. Returns the command's exit code. A
    library error is printed as one line on stderr (exit code
    :data:`EXIT_FAILURE`); with ``--debug`` it propagates with its traceback.
    While the command runs, the library's status lines (what a phase does, one
    line per training epoch, a run's summary: :mod:`sciml.progress`) show on
    stderr, from rank 0 only under torchrun or srun.
    """
    from sciml.progress import status_lines

    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command(argv)
    parser = build_parser([command] if command in WORKFLOW_COMMANDS else [])
    if not argv:
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    try:
        with status_lines() if _prints_errors() else contextlib.nullcontext():
            return int(args.func(args) or 0)
    except Exception as err:
        if args.debug:
            raise
        from sciml.datasets.store import decode_failure

        shown = decode_failure(err, [arg.split("=", 1)[-1] for arg in argv]) or err
        _report_error(
            f"sciml: error: {type(shown).__name__}: {shown} (--debug shows the traceback)"
        )
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
