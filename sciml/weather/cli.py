"""``sciml weather ...``: score, split and rechunk ensembles; the sub-packages' commands.

``train`` and ``evaluate`` are :mod:`sciml.weather.postprocess.cli`'s, ``spread``
:mod:`sciml.weather.spread.cli`'s and ``toy`` :mod:`sciml.weather.toy.cli`'s.
"""

from __future__ import annotations

import argparse

from sciml.cli_args import Subparsers, fraction
from sciml.weather.options import block_dates
from sciml.weather.postprocess.cli import register_postprocess
from sciml.weather.spread.cli import register_spread
from sciml.weather.toy.cli import register_toy


def _cmd_score(args: argparse.Namespace) -> int:
    from sciml.datasets.cf import conform_units, units_of
    from sciml.io_utils import atomic_write_text
    from sciml.weather.data import asked_for, check_calendars, open_ensemble
    from sciml.weather.verify import score_ensemble, scores_table

    # lazy: only what is scored is read
    forecasts = open_ensemble(args.forecasts, checked=asked_for([args.variable]))
    observations = None
    if args.observations:
        sides = (
            f"the forecasts ({', '.join(args.forecasts)})",
            f"the observations ({' '.join(args.observations)})",
        )
        observations = open_ensemble(args.observations, variables=[args.variable])
        check_calendars(dict(zip(sides, (forecasts, observations), strict=True)))
        if args.variable in forecasts:  # the observations in the forecasts' units
            observations, _ = conform_units(
                observations,
                {args.variable: units_of(forecasts[args.variable])},
                what=sides[1],
                reference=sides[0],
            )
    scores = score_ensemble(
        forecasts,
        args.variable,
        observations=observations,
        by=args.by,
        member_dim=args.member_dim,
        lat_weights=args.lat_weights,
        block_dates=args.block_dates,
        missing=args.missing,
    )
    table = scores_table(scores)
    print(
        f"{args.variable} from {' '.join(args.forecasts)}, against "
        f"{scores.attrs['verified_against']}, averaged over {scores.attrs['averaged_over']}:"
    )
    print(table.to_string(index=False))
    if args.json:
        atomic_write_text(args.json, table.to_json(orient="records", date_format="iso", indent=1))
        print(f"wrote {args.json}")
    return 0


def _cmd_split(args: argparse.Namespace) -> int:
    from sciml.datasets.cf import date_text
    from sciml.weather.data import open_ensemble
    from sciml.weather.split import write_splits

    paths = write_splits(
        open_ensemble(args.data),
        args.out,
        inputs=args.data,
        overwrite=args.overwrite,
        validation=args.validation,
        test=args.test,
        val_start=args.val_start,
        test_start=args.test_start,
    )
    for name, path in paths.items():
        with open_ensemble(path) as part:
            times = part["time"].values
        first, last = date_text(times[0]), date_text(times[-1])
        print(f"{name}: {times.size} start date(s), {first} .. {last} -> {path}")
    return 0


def _register_split(sub: Subparsers) -> None:
    split = sub.add_parser(
        "split",
        help="split an ensemble file by start date into train.nc, validation.nc and test.nc",
        description="Whole start dates in time order: training first, then validation, then "
        "test. By fractions of the start dates (default: the last 20% test, the 20% before "
        "validate) or by the first validation and test dates. The three files appear "
        "together, written to temporary names first.",
    )
    split.add_argument("data", nargs="+", help="ensemble file(s) with a time dimension")
    split.add_argument("--out", required=True, help="output folder")
    split.add_argument("--validation", type=fraction, help="fraction of start dates (0.2)")
    split.add_argument("--test", type=fraction, help="fraction of the last start dates (0.2)")
    split.add_argument(
        "--val-start", help="first validation date, e.g. 2000-06-01 (with --test-start)"
    )
    split.add_argument("--test-start", help="first test date (with --val-start)")
    split.add_argument("--overwrite", action="store_true", help="replace existing split files")
    split.set_defaults(func=_cmd_split)


def _cmd_rechunk(args: argparse.Namespace) -> int:
    from sciml.weather.store import write_training_store

    out = write_training_store(args.data, args.out, overwrite=args.overwrite)
    print(f"wrote {out} (one start date per chunk, with its manifest)")
    return 0


def _register_rechunk(sub: Subparsers) -> None:
    rechunk = sub.add_parser(
        "rechunk",
        help="convert ensemble files once to a Zarr training store (one start date per chunk)",
        description="For files whose chunks do not serve training (a chunk of many start "
        "dates, far larger than the trainers' shuffle buffer; GRIB; many files): the data "
        "as 'sciml weather train' opens them, written to a Zarr store with one start date per "
        "chunk (the layout of ECMWF's anemoi-datasets) and a manifest of its files, checked "
        "whenever the store is opened. Each chunk of the input is read once.",
    )
    rechunk.add_argument("data", nargs="+", help="ensemble file(s): netCDF, Zarr or GRIB")
    rechunk.add_argument("out", help="the Zarr store to write, e.g. train.zarr")
    rechunk.add_argument("--overwrite", action="store_true", help="replace an existing store")
    rechunk.set_defaults(func=_cmd_rechunk)


def register(subparsers: Subparsers) -> None:
    """Add the ``weather`` subcommand group to the ``sciml`` parser."""
    weather = subparsers.add_parser("weather", help="ensemble weather data, toy model, scores")
    sub = weather.add_subparsers(dest="weather_command", metavar="COMMAND", required=True)

    register_toy(sub)

    score = sub.add_parser(
        "score",
        help="CRPS, fair CRPS, spread, RMSE and spread-skill of an ensemble file",
        description="Scores against --observations (taken at the forecasts' valid times when "
        "they have no lead_time), else against the file's <variable>_truth, else each member "
        "against the ensemble of the others.",
    )
    score.add_argument("forecasts", nargs="+", help="ensemble file(s): netCDF, Zarr, GRIB")
    score.add_argument("--variable", required=True, help="variable to score")
    score.add_argument("--observations", nargs="+", help="file(s) with the verifying values")
    score.add_argument(
        "--member-dim", default="member", help="name of the member dimension after reading"
    )
    score.add_argument(
        "--by",
        nargs="*",
        default=None,
        help="dimensions to keep (none given: lead_time if present)",
    )
    score.add_argument("--lat-weights", action="store_true", help="cos-latitude weighting")
    score.add_argument(
        "--block-dates",
        type=block_dates,
        metavar="N",
        help="start dates read and scored at a time (the same scores; memory set by the "
        "block); default: about 32 MiB of ensemble in float64 per block; 0: all at once",
    )
    score.add_argument(
        "--missing",
        choices=("refuse", "mask"),
        default="refuse",
        help="missing (NaN) forecasts or verifying values: refuse them (default), or mask: "
        "leave them out, each score averaged over the points present",
    )
    score.add_argument("--json", help="also write the table as JSON here")
    score.set_defaults(func=_cmd_score)
    _register_split(sub)
    _register_rechunk(sub)
    register_postprocess(sub)
    register_spread(sub)
