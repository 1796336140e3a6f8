"""The raw ensembles of the toy presets: bias, spread-skill ratio and CRPS on the test dates.

Usage: python benchmarks/weather_preset.py [--start-dates N] [--threads T] [--out PATH]

Generates each preset of :mod:`sciml.weather.toy.presets` (``--start-dates`` takes the
first N start dates only, for a quicker look), splits it by start date and scores the raw
10-member ensemble on the test dates, per variable, level and lead time: the mean error
of the ensemble mean (bias), the RMS over grid points of the per-point mean error across
test dates (systematic error; for pure noise it is about RMSE / sqrt(test dates)), the
RMSE of the ensemble mean, the corrected spread-skill ratio and the standard and fair CRPS.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import xarray as xr
from _report import write_report

from sciml.cli_args import positive_int
from sciml.weather import metrics
from sciml.weather.split import split_start_dates
from sciml.weather.toy.presets import PRESETS, generate_preset

DIMS = ["time", "lat", "lon"]


def raw_scores(test: xr.Dataset, preset: str) -> list[dict[str, object]]:
    """One row per variable, level and lead time of the raw ensemble's scores."""
    rows = []
    for var in ("psi", "q"):
        truth, ens = test[f"{var}_truth"], test[var]
        error = ens.mean("member") - truth
        scores = {
            "bias": error.mean(DIMS),
            "systematic_error": np.sqrt((error.mean("time") ** 2).mean(["lat", "lon"])),
            "rmse": metrics.ensemble_mean_rmse(truth, ens, dim=DIMS),
            "spread_skill": metrics.spread_skill_ratio(truth, ens, dim=DIMS),
            "crps": metrics.crps_ensemble(truth, ens, dim=DIMS),
            "crps_fair": metrics.crps_ensemble(truth, ens, dim=DIMS, fair=True),
        }
        table = xr.Dataset({k: v.drop_attrs() for k, v in scores.items()}).to_dataframe()
        for (lead, level), row in table.iterrows():
            days = pd.Timedelta(lead) / pd.Timedelta(days=1)
            base = {"preset": preset, "variable": var, "level": int(level), "lead_days": days}
            rows.append({**base, **{k: float(row[k]) for k in scores}})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Generate, split, score and print each preset; write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start-dates", type=positive_int, help="first N start dates only")
    parser.add_argument("--threads", type=positive_int, default=2, help="worker threads")
    parser.add_argument("--out", default="runs/bench/weather_preset.json", help="JSON report")
    args = parser.parse_args(argv)
    rows, timings = [], {}
    for name in PRESETS:
        start = time.perf_counter()
        ds = generate_preset(name, start_dates=args.start_dates, threads=args.threads)
        timings[name] = time.perf_counter() - start
        _, _, test = split_start_dates(ds)
        print(
            f"{name}: {ds.sizes['time']} start dates, {test.sizes['time']} for testing, "
            f"generated in {timings[name]:.0f} s"
        )
        rows += raw_scores(test, name)
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        print(frame.round(4).to_string(index=False))
    write_report(args.out, "weather_preset", rows, generation_seconds=timings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
