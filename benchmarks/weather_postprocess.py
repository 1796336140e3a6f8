"""Post-processing 5 members of a toy preset: CRPS of EMOS and the deep models vs the raw ensemble.

Usage: python benchmarks/weather_postprocess.py DATA [--members 5] [--epochs 10]
       [--models emos mlp unet] [--work DIR] [--out PATH]

DATA is a preset written by ``generate_preset`` + ``write_ensemble`` (or any ensemble with
a truth). Its start dates are split with ``split_start_dates`` (60/20/20): the models train
on the first 60 % and validate on the next 20 % (``train_postprocessor`` holds out the last
quarter of what it is given), and every score is on the last 20 %, never seen in training.
EMOS is fitted on ``--members`` and on all members. Prints the mean CRPS and skill against
the raw full ensemble per model (over variables, levels and lead times) and per lead time,
the training time and the peak resident memory of the process; writes every row as JSON.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import pandas as pd
import xarray as xr
from _report import write_report

from sciml.cli import positive_int
from sciml.weather.data import split_start_dates
from sciml.weather.evaluate import evaluate_runs
from sciml.weather.train import MODELS, train_postprocessor


def main(argv: list[str] | None = None) -> int:
    """Train, evaluate on held-out dates, print the tables, write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="ensemble netCDF with <variable>_truth")
    parser.add_argument("--members", type=positive_int, default=5, help="members the models see")
    parser.add_argument("--epochs", type=positive_int, default=10, help="deep model epochs")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="models")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument("--work", default="weather_postprocess_runs", help="run folders here")
    parser.add_argument("--out", default="weather_postprocess.json", help="JSON report path")
    args = parser.parse_args(argv)
    ds = xr.open_dataset(args.data).load()
    train, val, test = split_start_dates(ds)
    seen = ds.sel(time=slice(None, val["time"].values[-1]))  # static fields stay static
    full = ds.sizes["member"]
    plan = [(m, args.members) for m in args.models]
    if "emos" in args.models and full != args.members:
        plan.append(("emos", full))
    runs, timings = [], {}
    for model, members in plan:
        run = Path(args.work) / f"{model}_{members}_seed{args.seed}"
        start = time.perf_counter()
        status = train_postprocessor(
            seen,
            model=model,
            run_dir=run,
            members=members,
            validation=0.25,
            epochs=args.epochs,
            seed=args.seed,
            progress=False,
        )
        timings[run.name] = time.perf_counter() - start
        print(f"{run.name}: {status} in {timings[run.name]:.0f} s")
        runs.append(run)
    start = time.perf_counter()
    table = evaluate_runs(runs, test)
    timings["evaluate"] = time.perf_counter() - start
    summary = table.groupby("model")[["crps", "crps_skill", "spread_skill"]].mean()
    by_lead = table.pivot_table(index="lead_days", columns="model", values="crps_skill")
    with pd.option_context("display.width", 160):
        print(f"test dates: {test.sizes['time']}, evaluation {timings['evaluate']:.1f} s")
        print(summary.sort_values("crps").round(4).to_string())
        print("\nCRPS skill against the raw full ensemble, by lead time (days):")
        print(by_lead.round(3).to_string())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory {peak:.0f} MiB")
    write_report(
        args.out,
        "weather_postprocess",
        table.to_dict("records"),
        seconds=timings,
        peak_rss_mib=peak,
        data=str(args.data),
        test_dates=int(test.sizes["time"]),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
