"""``sciml weather toy`` and ``sciml weather preset``: toy QG ensembles as netCDF."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sciml.cli_args import (
    Subparsers,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["PRESET_NAMES", "lead_times", "register_toy"]

#: The names of :data:`sciml.weather.toy.presets.PRESETS`, for ``--help`` without importing
#: the QG model.
PRESET_NAMES = ("qg-imperfect-v1", "qg-perfect-v1")


def lead_times(text: str) -> list[float]:
    """Argparse type: comma-separated lead times in days, ascending from 0 up, no repeats."""
    try:
        leads = [non_negative_float(value) for value in text.split(",")]
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"lead times: {err}") from None
    if any(later <= earlier for earlier, later in zip(leads[:-1], leads[1:], strict=True)):
        raise argparse.ArgumentTypeError(
            f"lead times must be strictly ascending without repeats, got {text!r}"
        )
    return leads


def _exit_code(result: xr.Dataset | None, out: str, what: str) -> int:
    """Say what was written (0) or that a signal stopped the work (``EXIT_REQUEUE``)."""
    from sciml.training import EXIT_REQUEUE

    if result is None:
        print(f"interrupted: finished batches kept; run the same command again to resume {out}")
        return EXIT_REQUEUE
    print(f"wrote {out}: {what}{dict(result.sizes)}")
    return 0


def _cmd_toy(args: argparse.Namespace) -> int:
    from sciml.weather.toy.ensemble import write_toy_ensemble

    result = write_toy_ensemble(
        args.out,
        members=args.members,
        start_dates=args.start_dates,
        lead_times=args.lead_times,
        interval=args.interval,
        spin_up=args.spin_up,
        perturbation=args.perturbation,
        model_error=args.model_error,
        spread_factor=args.spread_factor,
        seed=args.seed,
        progress=not args.quiet,
        threads=args.threads,
    )
    return _exit_code(result, args.out, "")


def _cmd_preset(args: argparse.Namespace) -> int:
    from sciml.weather.toy.presets import write_preset

    result = write_preset(
        args.out,
        args.name,
        start_dates=args.start_dates,
        seed=args.seed,
        progress=not args.quiet,
        threads=args.threads,
    )
    return _exit_code(result, args.out, f"preset {args.name}, ")


def register_toy(sub: Subparsers) -> None:
    """Add ``toy`` and ``preset`` to the ``sciml weather`` subcommands."""
    toy = sub.add_parser(
        "toy",
        help="generate a toy QG ensemble (truth + members) as netCDF",
        description="On SIGUSR1/SIGTERM the finished batches of start dates are kept next to "
        "--out and the command exits with 3; the same command resumes them.",
    )
    toy.add_argument("--out", required=True, help="output netCDF path")
    toy.add_argument("--members", type=positive_int, default=10, help="ensemble size")
    toy.add_argument("--start-dates", type=positive_int, default=20, help="number of start dates")
    toy.add_argument(
        "--lead-times",
        type=lead_times,
        default=lead_times("0,1,2,3,4,5,6"),
        help="lead times in days, comma-separated, ascending (multiples of the model step)",
    )
    toy.add_argument(
        "--interval", type=positive_float, default=2.0, help="days between start dates"
    )
    toy.add_argument(
        "--spin-up", type=non_negative_float, default=60.0, help="days of spin-up before the first"
    )
    toy.add_argument(
        "--perturbation",
        type=non_negative_float,
        default=0.02,
        help="initial perturbation, relative to the PV standard deviation",
    )
    toy.add_argument(
        "--model-error",
        type=non_negative_float,
        default=0.0,
        help="spread of the members' log bottom drag (0: perfect model)",
    )
    toy.add_argument(
        "--spread-factor",
        type=non_negative_float,
        default=1.0,
        help="members' initial perturbations relative to the analysis error (<1: under-dispersive)",
    )
    toy.add_argument("--seed", type=non_negative_int, default=0, help="seed of every random draw")
    toy.add_argument(
        "--threads", type=positive_int, default=1, help="worker threads (the result is the same)"
    )
    toy.add_argument("--quiet", action="store_true", help="no progress bar")
    toy.set_defaults(func=_cmd_toy)

    preset = sub.add_parser(
        "preset",
        help="generate a named toy preset (fixed truth and forecast models) as netCDF",
        description="The presets of sciml.weather.toy.presets (qg-imperfect-v1 is the "
        "evaluation preset). On SIGUSR1/SIGTERM the finished batches of start dates are kept "
        "next to --out and the command exits with 3; the same command resumes them.",
    )
    preset.add_argument("name", choices=PRESET_NAMES, help="preset name")
    preset.add_argument("--out", required=True, help="output netCDF path")
    preset.add_argument(
        "--start-dates", type=positive_int, help="the preset's first N start dates only"
    )
    preset.add_argument(
        "--seed", type=non_negative_int, help="another seed: an independent draw of the preset"
    )
    preset.add_argument(
        "--threads", type=positive_int, default=1, help="worker threads (the result is the same)"
    )
    preset.add_argument("--quiet", action="store_true", help="no progress bar")
    preset.set_defaults(func=_cmd_preset)
