"""Why a calibrated forecast gains less on the events its truth makes extreme.

Usage: python benchmarks/weather_extremes.py DATA RUN_DIR [RUN_DIR ...] [--fraction 0.05]
       [--out PATH]

DATA and the split are those of ``benchmarks/weather_postprocess.py`` (``split_start_dates``;
scores on the test dates, the truth's climatology from the training and validation dates).
For the raw full and k-member ensembles and each run, on all points and on the
``--fraction`` most extreme by the truth's anomaly
(:func:`sciml.weather.metrics.extremes.extreme_events`,
the subset ``sciml weather evaluate`` scores), per variable: the mean CRPS, the RMSE of the
forecast mean, the root-mean variance (spread) and the **conditional bias**
``mean((mean - truth) * sign(truth - climatology))``: negative when the forecast stays
nearer the climatology than the truth went. A forecast that regresses towards the
climatology lowers its error on average and raises it where the truth was extreme; the
subset is chosen by the outcome, so it rewards forecasts that do not regress (the
forecaster's dilemma, Lerch et al. 2017, Statistical Science 32). Prints a table and writes
the rows as JSON.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from _report import write_report

from sciml.cli_args import positive_float
from sciml.weather import metrics
from sciml.weather.metrics.extremes import extreme_events
from sciml.weather.postprocess.predict import predict_run
from sciml.weather.postprocess.record import read_run
from sciml.weather.split import split_start_dates


def _summary(
    truth: xr.DataArray,
    mean: xr.DataArray,
    variance: xr.DataArray,
    crps: xr.DataArray,
    anomaly_sign: xr.DataArray,
    subset: xr.DataArray,
) -> dict[str, float]:
    """CRPS, RMSE, spread and conditional bias over the points of ``subset``."""
    error = mean - truth
    over = {
        "crps": crps,
        "rmse": error**2,
        "spread": variance,
        "conditional_bias": error * anomaly_sign,
    }
    values = {k: float(v.where(subset).mean()) for k, v in over.items()}
    values["rmse"] = float(np.sqrt(values["rmse"]))
    values["spread"] = float(np.sqrt(values["spread"]))
    return values


def main(argv: list[str] | None = None) -> int:
    """Score raw ensembles and runs on all points and on the extreme subset; print, write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="ensemble netCDF with <variable>_truth")
    parser.add_argument("run_dirs", nargs="+", help="run folders of sciml weather train")
    parser.add_argument("--fraction", type=positive_float, default=0.05, help="extreme share")
    parser.add_argument("--out", default="runs/bench/weather_extremes.json", help="JSON report")
    args = parser.parse_args(argv)
    ds = xr.open_dataset(args.data).load()
    _, val, test = split_start_dates(ds)
    seen = ds.sel(time=slice(None, val["time"].values[-1]))  # static fields stay static
    forecasts = {Path(r).name: predict_run(r, test) for r in args.run_dirs}
    members = sorted({read_run(r)[0].members for r in args.run_dirs} | {test.sizes["member"]})
    rows = []
    for var in sorted({v for f in forecasts.values() for v in f}):
        truth = test[f"{var}_truth"].astype(np.float64)
        dims = [d for d in truth.dims if d not in ("lead_time", "level")]
        subsets = {
            "all": xr.ones_like(truth, dtype=bool),
            "extreme": extreme_events(
                truth, seen[f"{var}_truth"], dim=dims, fraction=args.fraction
            ),
        }
        sign = np.sign(truth - seen[f"{var}_truth"].mean("time"))
        candidates = {}
        for k in reversed(members):
            ens = test[var].isel(member=slice(k)).astype(np.float64)
            crps = metrics.crps_ensemble(truth, ens, dim=[])
            candidates[f"raw_{k}"] = (ens.mean("member"), ens.var("member", ddof=1), crps)
        for name, forecast in forecasts.items():
            if var in forecast:
                mu, sigma = forecast[var]
                candidates[name] = (mu, sigma**2, metrics.crps_gaussian(truth, mu, sigma, dim=[]))
        for name, (mean, variance, crps) in candidates.items():
            for subset, mask in subsets.items():
                values = _summary(truth, mean, variance, crps, sign, mask)
                rows.append({"variable": var, "forecast": name, "subset": subset, **values})
    table = pd.DataFrame(rows)
    full = table[table["forecast"] == f"raw_{members[-1]}"].set_index(["variable", "subset"])
    table["crps_skill"] = (
        1
        - table["crps"]
        / full.loc[list(zip(table["variable"], table["subset"], strict=True)), "crps"].to_numpy()
    )
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(4).to_string(index=False))
    write_report(args.out, "weather_extremes", table.to_dict("records"), data=str(args.data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
