"""Peak resident memory and time of ``sciml weather evaluate`` by test-file size, blocks vs whole.

Usage: python benchmarks/weather_evaluate_memory.py [--dates 32 64 128] [--block-dates N]
       [--no-whole] [--work DIR] [--out PATH] [--quick]

Test files of growing size (random fields of the ``qg-imperfect-v1`` preset's shape: 10
members, 7 lead times, 2 levels, 32 x 32, ``psi`` and ``q`` with their truth, float32, about
1.2 MiB per start date; netCDF, contiguous) are scored by EMOS on 5 members (trained once on
8 other dates; training is not measured), each run of ``sciml weather evaluate`` in its own
process: its peak resident memory (``ru_maxrss`` of that process, read by a fresh parent) and
its wall time, reading the file a block of start dates at a time (``--block-dates``, default:
the command's own) and, unless ``--no-whole``, the whole file at once (``--block-dates 0``,
the evaluation before blocks). Where both ran, ``max_rel_diff`` is the largest relative
difference of their scores in the CSV (full precision; the JSON rounds to 10 digits). The
climates are the test dates' own (no ``--climate``), the heavier case: the EFI's model
climate is the test ensemble. Prints a table and writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr
from _report import write_report
from _weather_files import evaluate, max_rel_diff, train_emos, write_in_pieces

from sciml.cli_args import positive_int


def _write_ensemble(path: Path, dates: int, *, start: int, seed: int, piece: int = 16) -> None:
    """Random fields of the preset's shape (float32), written ``piece`` start dates at a time."""
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    shape = (10, dates, 7, 2, 32, 32)
    coords = {
        "time": np.datetime64("2000-01-01") + (start + np.arange(dates)) * np.timedelta64(2, "D"),
        "lead_time": np.arange(7) * np.timedelta64(1, "D"),
        "level": [0, 1],
        "lat": np.linspace(-80, 80, 32),
        "lon": np.arange(32) * 360 / 32,
    }
    variables = {
        name: (d, da.zeros([shape[dims.index(x)] for x in d], dtype=np.float32), {"units": "1"})
        for var in ("psi", "q")
        for name, d in ((var, dims), (f"{var}_truth", dims[1:]))
    }
    rng = np.random.default_rng(seed)

    def fill(first: int, count: int) -> dict[str, np.ndarray]:
        part = (shape[0], count, *shape[2:])
        values = {}
        for var in ("psi", "q"):
            signal = rng.standard_normal(part[1:], dtype=np.float32)
            noise = rng.standard_normal(part, dtype=np.float32)
            values[var] = signal + np.float32(0.5) * noise
            truth = 1.3 * signal + 0.2 + 0.5 * rng.standard_normal(part[1:], dtype=np.float32)
            values[f"{var}_truth"] = truth
        return values

    write_in_pieces(path, xr.Dataset(variables, coords=coords), fill, piece=piece)


def main(argv: list[str] | None = None) -> int:
    """Train EMOS once, measure each file size's evaluation, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dates", type=positive_int, nargs="+", default=[32, 64, 128], help="test files"
    )
    parser.add_argument("--block-dates", type=positive_int, help="default: the command's own")
    parser.add_argument("--no-whole", action="store_true", help="blocks only")
    parser.add_argument("--work", help="files and run here (default: a temporary folder)")
    parser.add_argument(
        "--out", default="runs/bench/weather_evaluate_memory.json", help="JSON report"
    )
    parser.add_argument("--quick", action="store_true", help="test files of 4 and 16 dates")
    args = parser.parse_args(argv)
    dates = [4, 16] if args.quick else args.dates
    work = Path(args.work or tempfile.mkdtemp(prefix="weather_evaluate_memory_"))
    train = work / "train.nc"
    _write_ensemble(train, 8, start=0, seed=0)
    run = train_emos(train, work / "emos_5")
    rows = []
    for count in dates:
        test = work / f"test_{count}.nc"
        _write_ensemble(test, count, start=8, seed=count)
        size = test.stat().st_size / 2**20
        modes = [("blocks", args.block_dates)] + ([] if args.no_whole else [("whole", 0)])
        outputs = {}
        for mode, block in modes:
            outputs[mode] = work / f"scores_{count}_{mode}.csv"
            peak, seconds = evaluate(run, test, outputs[mode], block)
            row = {"test_dates": count, "file_mib": round(size, 1), "mode": mode}
            row |= {"block_dates": block, "peak_rss_mib": round(peak, 1)}
            row |= {"seconds": round(seconds, 1), "max_rel_diff": None}
            rows.append(row)
        if len(outputs) == 2:
            rows[-1]["max_rel_diff"] = max_rel_diff(outputs["whole"], outputs["blocks"])
        test.unlink()
    print(pd.DataFrame(rows).to_string(index=False))
    write_report(args.out, "weather_evaluate_memory", rows, run="emos_5", climate="test dates")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
