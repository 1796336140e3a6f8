"""Spread prediction from 5 members of a toy preset: correlation and RMSE vs the full spread.

Usage: python benchmarks/weather_spread.py DATA [--members 5] [--epochs 8] [--temporal 1 3]
       [--losses l1] [--choice first|random] [--base-channels 16] [--score-on test|validation]
       [--seeds 0 1 2] [--work DIR] [--out PATH]

DATA is a preset (or any ensemble with a truth). Its start dates are split with
``split_start_dates`` (60/20/20): the runs train on the first 60 % and validate on the next
20 % (``train_spread`` holds out the last quarter of what it is given), and every score is on
the last 20 %, never seen in training (``--score-on validation`` scores on the validation dates
instead: make every choice of settings that way, then score the chosen ones once on the
test dates). One run per ``--temporal`` value, loss and seed; the seeds of each
configuration train together, fused (``train_spreads``: each run what its separate run
writes). The
baseline is the sample spread of the same first ``--members`` members. Prints the
correlation with the full ensemble's spread and the RMSE against it, averaged over
variables, levels and lead times, and by lead time (with several ``--seeds``: per run, then
the mean and standard deviation over seeds of each configuration's means; the tables by
lead time and by variable average over seeds); each sweep's training time (shared by its
runs) and the peak resident memory of the process; writes every row as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import resource
import time
from pathlib import Path

import pandas as pd
import xarray as xr
from _report import write_report

from sciml.cli_args import non_negative_int, positive_int
from sciml.training import TrainConfig
from sciml.weather.split import split_start_dates
from sciml.weather.spread.config import SpreadConfig
from sciml.weather.spread.evaluate import evaluate_spread
from sciml.weather.spread.model import LOSSES
from sciml.weather.spread.train import train_spreads


def _config(table: pd.DataFrame) -> pd.Series:
    """Each row's configuration: the baseline's model name, or a run's loss and lead times."""
    run = table["loss"] + "_t" + table["history"].astype(str)
    return table["model"].where(table["history"] == 0, run)


def _over_seeds(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each configuration's mean scores."""
    per_run = table.groupby(["config", "model"])[["corr", "rmse"]].mean()
    return per_run.groupby("config").agg(["mean", "std", "count"])


def main(argv: list[str] | None = None) -> int:
    """Train, evaluate on held-out dates, print the tables, write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="ensemble netCDF with <variable>_truth")
    parser.add_argument("--members", type=positive_int, default=5, help="members the runs see")
    parser.add_argument("--epochs", type=positive_int, default=8, help="training epochs")
    parser.add_argument(
        "--temporal", type=positive_int, nargs="+", default=[1, 3], help="lead times stacked"
    )
    parser.add_argument("--losses", nargs="+", choices=LOSSES, default=["l1"], help="losses")
    parser.add_argument("--base-channels", type=positive_int, default=16, help="U-Net width")
    parser.add_argument(
        "--choice", choices=("first", "random"), default="first", help="members per sample"
    )
    parser.add_argument(
        "--score-on", choices=("test", "validation"), default="test", help="dates scored"
    )
    parser.add_argument(
        "--seeds", type=non_negative_int, nargs="+", default=[0], help="training seeds"
    )
    parser.add_argument("--work", default="weather_spread_runs", help="run folders here")
    parser.add_argument("--out", default="weather_spread.json", help="JSON report path")
    args = parser.parse_args(argv)
    ds = xr.open_dataset(args.data).load()
    _, val, test = split_start_dates(ds)
    seen = ds.sel(time=slice(None, val["time"].values[-1]))
    scored = test if args.score_on == "test" else val
    runs, timings = [], {}
    for loss, history in itertools.product(args.losses, args.temporal):
        name = f"spread_{args.members}_{loss}_t{history}_{args.choice}_w{args.base_channels}"
        sweep = [Path(args.work) / f"{name}_e{args.epochs}_seed{seed}" for seed in args.seeds]
        configs = [
            SpreadConfig(
                members=args.members,
                history=history,
                loss=loss,
                choice=args.choice,
                periodic=("lat", "lon"),  # the toy QG domain is doubly periodic
                validation=0.25,
                train=TrainConfig(epochs=args.epochs, seed=seed, progress=False, tensorboard=False),
                base_channels=args.base_channels,
            )
            for seed in args.seeds
        ]
        start = time.perf_counter()
        statuses = train_spreads(seen, configs, sweep)
        seconds = time.perf_counter() - start
        for run, status in zip(sweep, statuses, strict=True):
            timings[run.name] = seconds  # the sweep's time, shared by its runs
            print(f"{run.name}: {status} ({len(sweep)} runs fused, {seconds:.0f} s)", flush=True)
        runs.extend(sweep)
    start = time.perf_counter()
    table = evaluate_spread(runs, scored)
    timings["evaluate"] = time.perf_counter() - start
    table["config"] = _config(table)
    summary = table.groupby("model")[["corr", "rmse"]].mean()
    with pd.option_context("display.width", 160):
        print(
            f"{args.score_on} dates: {scored.sizes['time']}, evaluation {timings['evaluate']:.1f} s"
        )
        print("mean over variables, levels and lead times:")
        print(summary.sort_values("rmse").round(4).to_string())
        if len(args.seeds) > 1:
            print(f"\nover seeds {args.seeds}: mean and standard deviation of those means:")
            print(_over_seeds(table).round(4).to_string())
        for score in ("corr", "rmse"):
            print(f"\n{score} by lead time (days), mean over variables, levels and seeds:")
            by_lead = table.pivot_table(index="lead_days", columns="config", values=score)
            print(by_lead.round(4).to_string())
        print("\nrmse by variable and level, mean over lead times and seeds:")
        by_var = table.pivot_table(index=["variable", "level"], columns="config", values="rmse")
        print(by_var.round(4).to_string())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory {peak:.0f} MiB")
    write_report(
        args.out,
        "weather_spread",
        table.to_dict("records"),
        seconds=timings,
        peak_rss_mib=peak,
        data=str(args.data),
        scored_on=args.score_on,
        scored_dates=int(scored.sizes["time"]),
        epochs=args.epochs,
        seeds=args.seeds,
        choice=args.choice,
        base_channels=args.base_channels,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
