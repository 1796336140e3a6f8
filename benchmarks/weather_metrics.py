"""Per-point ensemble CRPS: sciml against properscoring (numba) and xskillscore, same arrays.

Usage: python benchmarks/weather_metrics.py [--quick] [--points N] [--repeat R] [--out PATH]

Every case is called once to warm up (numba compilation is not counted), then the cases
are timed in turn ``--repeat`` times, so that load from other processes hits them alike;
the table shows the best and the median wall time, and the largest relative difference
from properscoring on the same arrays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import dask
import numpy as np
import properscoring
import xarray as xr
import xskillscore
from _report import write_report

from sciml.cli_args import positive_int
from sciml.distributed.cores import usable_cores
from sciml.weather.metrics import crps_ensemble
from sciml.weather.metrics.kernels import crps_ensemble_array


def _time_round_robin(
    cases: dict[str, Callable[[], np.ndarray]], repeat: int
) -> dict[str, tuple[list[float], np.ndarray]]:
    """Warm every case up once, then time them in turn ``repeat`` times (fair under load)."""
    results = {name: np.asarray(func()) for name, func in cases.items()}  # JIT, caches
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, func in cases.items():
            start = time.perf_counter()
            results[name] = np.asarray(func())
            times[name].append(time.perf_counter() - start)
    return {name: (times[name], results[name]) for name in cases}


def run(points: int, members_list: list[int], repeat: int, chunks: int) -> list[dict]:
    """Time every implementation for each ensemble size; return one row per case."""
    rows = []
    rng = np.random.default_rng(0)
    for members in members_list:
        fc = rng.standard_normal((points, members))
        ob = rng.standard_normal(points)
        fc_da = xr.DataArray(fc, dims=("point", "member"))
        ob_da = xr.DataArray(ob, dims="point")
        fc_dask, ob_dask = fc_da.chunk({"point": chunks}), ob_da.chunk({"point": chunks})
        fc32 = fc.astype(np.float32)
        cases = {
            "properscoring (numba)": lambda fc=fc, ob=ob: properscoring.crps_ensemble(ob, fc),
            "xskillscore (dask chunks)": lambda o=ob_dask, f=fc_dask: (
                xskillscore.crps_ensemble(o, f, dim=[]).values
            ),
            "sciml kernel (numpy array)": lambda fc=fc, ob=ob: crps_ensemble_array(ob, fc),
            "sciml crps_ensemble (xarray)": lambda o=ob_da, f=fc_da: (
                crps_ensemble(o, f, dim=[]).values
            ),
            "sciml crps_ensemble (dask chunks)": lambda o=ob_dask, f=fc_dask: (
                crps_ensemble(o, f, dim=[]).values
            ),
            "sciml kernel float32 input": lambda f=fc32, ob=ob: crps_ensemble_array(ob, f),
            "sciml kernel fair": lambda fc=fc, ob=ob: crps_ensemble_array(ob, fc, fair=True),
        }
        timed = _time_round_robin(cases, repeat)
        reference = timed["properscoring (numba)"][1]
        for name, (times, result) in timed.items():
            agree = (
                float(np.max(np.abs(result - reference) / np.abs(reference)))
                if "fair" not in name and "float32" not in name
                else None
            )
            rows.append(
                {
                    "members": members,
                    "points": points,
                    "case": name,
                    "best_s": min(times),
                    "median_s": statistics.median(times),
                    "times_s": times,
                    "max_rel_diff_vs_properscoring": agree,
                }
            )
            print(
                f"{members:>3} members  {name:<34} best {min(times):7.3f} s  "
                f"median {statistics.median(times):7.3f} s"
                + (f"  max rel diff {agree:.1e}" if agree is not None else ""),
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 points, 2 repeats")
    parser.add_argument("--points", type=positive_int, default=1_000_000, help="forecast points")
    parser.add_argument("--repeat", type=positive_int, default=5, help="timed repeats per case")
    parser.add_argument("--chunks", type=positive_int, default=125_000, help="dask chunks (points)")
    parser.add_argument("--out", default="runs/bench/weather_metrics.json", help="JSON report")
    args = parser.parse_args(argv)
    points, repeat = (100_000, 2) if args.quick else (args.points, args.repeat)
    with dask.config.set(scheduler="threads", num_workers=usable_cores()):
        rows = run(points, [10, 50], repeat, min(args.chunks, points))
    summary = {}
    for members in (10, 50):
        best = {r["case"]: r["best_s"] for r in rows if r["members"] == members}
        ours = best["sciml kernel (numpy array)"]
        summary[f"{members}_members"] = {
            "speedup_vs_properscoring": best["properscoring (numba)"] / ours,
            "speedup_vs_xskillscore": best["xskillscore (dask chunks)"] / ours,
        }
    print(json.dumps(summary, indent=1))
    write_report(
        args.out,
        "weather_metrics",
        rows,
        summary=summary,
        threads=usable_cores(),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
