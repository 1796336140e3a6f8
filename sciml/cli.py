"""The ``sciml`` command line: parses arguments and calls the library.

Each workflow adds its own subcommand group through a ``register(subparsers)``
function in its ``cli`` module, listed in :data:`WORKFLOW_CLIS`; heavy imports
stay inside the handlers so that ``sciml --help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

#: Modules whose ``register(subparsers)`` adds a workflow's subcommands.
WORKFLOW_CLIS: tuple[str, ...] = (
    "sciml.weather.cli",
    "sciml.geo.cli",
    "sciml.spatial_parallel.cli",
)


def _cmd_info(args: argparse.Namespace) -> int:
    from sciml.info import environment_report

    print(environment_report())
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from sciml.demo import run_demo

    report = run_demo(Path(args.out), quick=args.quick, only=args.only)
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    info = sub.add_parser("info", help="versions, devices and distributed backends")
    info.set_defaults(func=_cmd_info)

    demo = sub.add_parser(
        "demo", help="run every workflow end to end on the bundled data and write a report"
    )
    demo.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    demo.add_argument(
        "--quick", action="store_true", help="smallest sizes (seconds, for smoke tests)"
    )
    demo.add_argument(
        "--only", action="append", metavar="SECTION", help="run only this section (repeatable)"
    )
    demo.set_defaults(func=_cmd_demo)

    for module in WORKFLOW_CLIS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sciml`` command."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
