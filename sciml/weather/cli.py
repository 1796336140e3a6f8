"""``sciml weather ...``: make toy ensembles and score ensemble files."""

from __future__ import annotations

import argparse


def _cmd_toy(args: argparse.Namespace) -> int:
    from sciml.weather.toy import generate_ensemble, write_ensemble

    leads = [float(value) for value in args.lead_times.split(",")]
    ds = generate_ensemble(
        members=args.members,
        start_dates=args.start_dates,
        lead_times=leads,
        interval=args.interval,
        spin_up=args.spin_up,
        perturbation=args.perturbation,
        model_error=args.model_error,
        seed=args.seed,
        progress=not args.quiet,
        threads=args.threads,
    )
    path = write_ensemble(ds, args.out)
    print(f"wrote {path}: {dict(ds.sizes)}")
    return 0


def _cmd_score(args: argparse.Namespace) -> int:
    from sciml.io_utils import atomic_write_text
    from sciml.weather import metrics
    from sciml.weather.data import open_ensemble
    from sciml.weather.verify import leave_one_out_scores, score_summary

    ds = open_ensemble(args.forecasts)  # lazy: only what is scored is read
    if args.variable not in ds:
        raise ValueError(f"no variable {args.variable!r} in {args.forecasts}: {list(ds)}")
    forecasts = ds[args.variable]
    if args.observations:
        observations = open_ensemble(args.observations, variables=[args.variable])[args.variable]
        mode = f"against {args.observations}"
    elif f"{args.variable}_truth" in ds:
        observations = ds[f"{args.variable}_truth"]
        mode = f"against {args.variable}_truth"
    else:
        observations = None
        mode = "each member against the others"
    if args.by is None:
        keep = [name for name in ("lead_time",) if name in forecasts.dims]
    else:
        keep = list(args.by)
        missing = [name for name in keep if name not in forecasts.dims]
        if missing:
            raise ValueError(f"--by {missing}: not dimensions of {args.variable} {forecasts.dims}")
    dims = [name for name in forecasts.dims if name not in (*keep, "member")]
    weights = metrics.latitude_weights(forecasts) if args.lat_weights else None
    if observations is None:
        scores = leave_one_out_scores(forecasts, dim=dims, weights=weights)
    else:
        scores = score_summary(observations, forecasts, dim=dims, weights=weights)
    scores = scores.compute()
    print(f"{args.variable} from {args.forecasts}, {mode}, averaged over {dims}:")
    print(scores.to_dataframe().to_string() if keep else scores.to_pandas().to_string())
    if args.json:
        table = scores.to_dataframe().reset_index() if keep else scores.to_pandas().to_frame().T
        atomic_write_text(args.json, table.to_json(orient="records", date_format="iso", indent=1))
        print(f"wrote {args.json}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``weather`` subcommand group to the ``sciml`` parser."""
    weather = subparsers.add_parser("weather", help="ensemble weather data, toy model, scores")
    sub = weather.add_subparsers(dest="weather_command", metavar="COMMAND", required=True)

    toy = sub.add_parser("toy", help="generate a toy QG ensemble (truth + members) as netCDF")
    toy.add_argument("--out", required=True, help="output netCDF path")
    toy.add_argument("--members", type=int, default=10)
    toy.add_argument("--start-dates", type=int, default=20)
    toy.add_argument("--lead-times", default="0,1,2,3,4,5,6", help="days, comma-separated")
    toy.add_argument("--interval", type=float, default=2.0, help="days between start dates")
    toy.add_argument("--spin-up", type=float, default=60.0, help="days of spin-up")
    toy.add_argument("--perturbation", type=float, default=0.02)
    toy.add_argument("--model-error", type=float, default=0.0)
    toy.add_argument("--seed", type=int, default=0)
    toy.add_argument(
        "--threads", type=int, default=1, help="worker threads (2 on a 2-core machine; same result)"
    )
    toy.add_argument("--quiet", action="store_true", help="no progress bar")
    toy.set_defaults(func=_cmd_toy)

    score = sub.add_parser(
        "score",
        help="CRPS, fair CRPS, spread, RMSE and spread-skill of an ensemble file",
        description="Scores against --observations, else against the file's <variable>_truth, "
        "else each member against the ensemble of the others.",
    )
    score.add_argument("forecasts", nargs="+", help="ensemble file(s): netCDF, Zarr, GRIB")
    score.add_argument("--variable", required=True)
    score.add_argument("--observations", nargs="+", help="file(s) with the verifying values")
    score.add_argument(
        "--by", nargs="*", default=None, help="dimensions to keep (default: lead_time when present)"
    )
    score.add_argument("--lat-weights", action="store_true", help="cos-latitude weighting")
    score.add_argument("--json", help="also write the table as JSON here")
    score.set_defaults(func=_cmd_score)
