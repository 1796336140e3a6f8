"""Resident memory of reading a one-date-chunked netCDF file by blocks: HDF5 chunk cache sizes.

Usage: python benchmarks/netcdf_chunk_cache.py [--dates 426] [--block 14] [--quick] [--out PATH]

A file of ``--dates`` start dates tiled from the ``qg-imperfect-v1`` toy preset, one start
date per chunk (as ``benchmarks/weather_scale.py`` writes it: about 1.2 MiB decoded per
date), is opened with :func:`sciml.weather.data.open_ensemble` and read ``--block`` start
dates at a time, every variable, in a fresh process per case: the chunk cache sciml opens
netCDF files with (:data:`sciml.io_utils.CHUNK_CACHE_BYTES`, 4 MiB a variable) and the
netCDF library's default (64 MiB a variable). For each: resident memory (``VmRSS``) once
the file is open, after the first block, the most after any block and at the end, and the
pass's CPU seconds. (Not ``ru_maxrss``: a child process starts from its parent's.)

Measured on this 2-core machine (426 dates, blocks of 14): resident 204 MiB after the first
block and 232 at most with 4 MiB caches; 212, then up to 400 MiB with the default's 64 MiB
(rising with the chunks read); 4.32 and 4.14 CPU s a pass.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from _report import write_report
from weather_scale import toy_tiles, write_tiled

from sciml.cli_args import positive_int

#: One pass in a fresh process: ``argv`` the file, the block, and the cache's bytes (0: sciml's).
_PASS = """
import json, sys, time
import sciml.io_utils as io
path, block, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if cache:
    io.CHUNK_CACHE_BYTES = cache
from sciml.weather.data import open_ensemble

def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS"))

ds = open_ensemble(path)
opened = rss()
seen = []
start = time.process_time()
for begin in range(0, ds.sizes["time"], block):
    part = ds.isel(time=slice(begin, begin + block))
    for name in ds.data_vars:
        part[name].load()
    seen.append(rss())
print(json.dumps({
    "rss_opened_mib": round(opened, 1),
    "rss_first_block_mib": round(seen[0], 1),
    "rss_max_mib": round(max(seen), 1),
    "rss_end_mib": round(seen[-1], 1),
    "cpu_s": round(time.process_time() - start, 2),
}))
"""


def one_pass(path: Path, block: int, cache: int) -> dict[str, Any]:
    """The figures of one pass over ``path`` with ``cache`` bytes a variable (0: sciml's)."""
    done = subprocess.run(
        [sys.executable, "-c", _PASS, str(path), str(block), str(cache)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"the pass over {path} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    """Write the file, read it with each cache, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dates", type=positive_int, default=426, help="start dates")
    parser.add_argument("--block", type=positive_int, default=14, help="dates read at a time")
    parser.add_argument("--quick", action="store_true", help="a file of 24 dates (seconds)")
    parser.add_argument("--out", default="runs/bench/netcdf_chunk_cache.json", help="JSON")
    args = parser.parse_args(argv)
    dates = 24 if args.quick else args.dates
    rows = []
    with tempfile.TemporaryDirectory(prefix="chunk_cache_") as tmp:
        path = write_tiled(toy_tiles(2), Path(tmp) / "one_date.nc", dates, chunk_dates=1, seed=0)
        for case, cache in (("sciml (4 MiB a variable)", 0), ("default (64 MiB)", 2**26)):
            rows.append({"cache": case, "dates": dates, "block": args.block})
            rows[-1] |= one_pass(path, args.block, cache)
    print(pd.DataFrame(rows).to_string(index=False))
    write_report(args.out, "netcdf_chunk_cache", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
