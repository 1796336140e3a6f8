"""Time of ``sciml weather evaluate`` for test sets of the preset's shape, by number of dates.

Usage: python benchmarks/weather_evaluate.py [--dates 8 32] [--climate-dates 96]
       [--work DIR] [--out PATH] [--quick]

The data are random fields of the shape of the ``qg-imperfect-v1`` preset (10 members,
7 lead times, 2 levels, 32 x 32, ``psi`` and ``q``; the time does not depend on the
values), a biased truth, and a climate of ``--climate-dates`` other start dates. EMOS on 5
and on 10 members and a per-grid-point MLP on 5 (one epoch; training is not timed) are
scored on each test set: the seconds of :func:`sciml.weather.postprocess.evaluate.score_runs` (the
forecasts, every score, the EFI against the climate, the histograms) and of writing the
JSON, CSV and figures (:func:`sciml.weather.postprocess.evaluate_report.write_evaluation`). Prints a
table and writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from _report import write_report

from sciml.cli_args import positive_int
from sciml.training import TrainConfig
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.evaluate import score_runs
from sciml.weather.postprocess.evaluate_report import write_evaluation
from sciml.weather.postprocess.train import train_postprocessor


def _ensemble(dates: int, *, start: int, members: int = 10, seed: int = 0) -> xr.Dataset:
    """Random fields of the preset's shape, a biased truth, start dates from day ``2 start``."""
    rng = np.random.default_rng(seed)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    shape = (members, dates, 7, 2, 32, 32)
    coords = {
        "time": np.datetime64("2000-01-01") + (start + np.arange(dates)) * np.timedelta64(2, "D"),
        "lead_time": np.arange(7) * np.timedelta64(1, "D"),
        "level": [0, 1],
        "lat": np.linspace(-80, 80, 32),
        "lon": np.arange(32) * 360 / 32,
    }
    data = {}
    for name in ("psi", "q"):
        signal = rng.standard_normal(shape[1:])
        data[name] = (dims, signal + 0.5 * rng.standard_normal(shape), {"units": "1"})
        truth = 1.3 * signal + 0.2 + 0.5 * rng.standard_normal(shape[1:])
        data[f"{name}_truth"] = (dims[1:], truth, {"units": "1"})
    return xr.Dataset(data, coords=coords)


def main(argv: list[str] | None = None) -> int:
    """Train the runs once, time the evaluation per test-set size, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dates", type=positive_int, nargs="+", default=[8, 32], help="test sets")
    parser.add_argument("--climate-dates", type=positive_int, default=96, help="climate dates")
    parser.add_argument("--work", help="run folders here (default: a temporary folder)")
    parser.add_argument("--out", default="runs/bench/weather_evaluate.json", help="JSON report")
    parser.add_argument("--quick", action="store_true", help="2 test and 8 climate dates")
    args = parser.parse_args(argv)
    dates, climate_dates = ([2], 8) if args.quick else (args.dates, args.climate_dates)
    work = Path(args.work or tempfile.mkdtemp(prefix="weather_evaluate_"))
    climate = _ensemble(climate_dates, start=0)
    runs = []
    for model, members in (("emos", 5), ("emos", 10), ("mlp", 5)):
        runs.append(work / f"{model}_{members}")
        train_postprocessor(
            climate,
            PostprocessConfig(
                model=model,
                members=members,
                train=TrainConfig(epochs=1, progress=False, tensorboard=False),
            ),
            runs[-1],
        )
    rows = []
    for count in dates:
        test = _ensemble(count, start=climate_dates, seed=1)
        start = time.perf_counter()
        evaluation = score_runs(runs, test, climate=climate)
        scored = time.perf_counter() - start
        folder = work / f"outputs_{count}"
        start = time.perf_counter()
        write_evaluation(evaluation, json=folder / "s.json", csv=folder / "s.csv", figures=folder)
        written = time.perf_counter() - start
        rows.append(
            {
                "test_dates": count,
                "climate_dates": climate_dates,
                "rows": len(evaluation.table),
                "score_seconds": scored,
                "write_seconds": written,
            }
        )
    print(pd.DataFrame(rows).round(2).to_string(index=False))
    write_report(args.out, "weather_evaluate", rows, runs=[r.name for r in runs])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
