"""Training throughput from a file: in memory, streamed chunk by chunk, or read lazily at random.

Usage: python benchmarks/weather_streaming.py [--quick] [--dates N] [--out PATH]

Measured on this 2-core machine (load average 11-14 from other work: the wall rates are
noisy, the CPU seconds per sample are not), 352 MiB of data, 64 start dates: 0.060 CPU s
per sample streamed from 48-date chunks, 0.071 from one-date chunks, 0.14 in memory, 1.08
read lazily at random from 48-date chunks and 0.096 from one-date chunks.

Writes one ensemble file (smooth fields plus noise, float32, zlib as the package writes
them; a few hundred MB by default) twice: with the chunks of the netCDF library's defaults
for such files (many start dates per chunk, here ``--chunk-dates``) and with one start
date per chunk (:func:`sciml.weather.store.netcdf_encoding`). Then trains the default
deep model (pooled, 5 members drawn at random) through :func:`sciml.training.fit` on:

* ``memory``: the data read into memory first (the read is timed apart);
* ``stream``: :class:`sciml.weather.streamed.StreamedEnsemble` (chunk-aware order, a
  buffer of chunks, read ahead in threads), on each file;
* ``lazy``: the lazy dataset in a random order (what the trainers did beyond their 1 GiB
  limit before streaming), on each file, for ``--lazy-steps`` steps only.

Each row: samples/s (wall) and CPU seconds per sample (every thread of the process) of the
steps trained, and each chunk's reads. Table and JSON.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from _report import write_report
from _weather_files import chunk_encoding, train

from sciml.cli_args import positive_int
from sciml.datasets.channels import compute_stats
from sciml.weather.data import open_ensemble
from sciml.weather.dataset import EnsembleDataset
from sciml.weather.streamed import StreamedEnsemble

VARIABLES = ["psi", "q"]


def make_data(dates: int, lat: int, lon: int, *, members: int = 10, seed: int = 0) -> xr.Dataset:
    """Smooth fields plus noise (they compress like real ones), float32."""
    rng = np.random.default_rng(seed)
    y, x = np.meshgrid(np.linspace(0, np.pi, lat), np.linspace(0, 2 * np.pi, lon), indexing="ij")
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    data: dict[str, Any] = {}
    for k, name in enumerate(VARIABLES):
        phase = rng.uniform(0, 2 * np.pi, (dates, 4, 2, 1, 1))
        signal = np.sin(y + k) * np.cos(x + phase)
        noise = rng.standard_normal((members, dates, 4, 2, lat, lon)).astype("float32")
        data[name] = (dims, (signal + 0.3 * noise).astype("float32"))
        truth = 1.2 * signal + 0.3 * rng.standard_normal(signal.shape)
        data[f"{name}_truth"] = (dims[1:], truth.astype("float32"))
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(dates) * np.timedelta64(1, "D"),
        "lead_time": np.arange(1, 5) * np.timedelta64(1, "D"),
        "level": [1, 2],
    }
    return xr.Dataset(data, coords=coords)


def write(ds: xr.Dataset, path: Path, *, chunk_dates: int) -> Path:
    """``ds`` as compressed netCDF with ``chunk_dates`` start dates per chunk."""
    ds.to_netcdf(path, encoding=chunk_encoding(ds, chunk_dates=chunk_dates))
    return path


def main(argv: list[str] | None = None) -> int:
    """Write the files, train each case, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small file (seconds)")
    parser.add_argument("--dates", type=positive_int, help="start dates (default 64; quick 12)")
    parser.add_argument("--chunk-dates", type=positive_int, default=48, help="multi-date chunks")
    parser.add_argument("--lazy-steps", type=positive_int, default=4, help="steps of lazy cases")
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument("--warm", type=positive_int, default=2, help="steps before timing")
    parser.add_argument("--out", default="runs/bench/weather_streaming.json", help="JSON report")
    args = parser.parse_args(argv)
    dates = args.dates or (12 if args.quick else 64)
    lat, lon = (16, 32) if args.quick else (64, 128)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ds = make_data(dates, lat, lon)
        chunk_dates = min(args.chunk_dates, dates)
        files = {
            f"{chunk_dates} dates/chunk": write(ds, folder / "multi.nc", chunk_dates=chunk_dates),
            "1 date/chunk": write(ds, folder / "one.nc", chunk_dates=1),
        }
        size = ds.nbytes / 2**20
        del ds
        options: dict[str, Any] = {"members": 5, "choice": "random"}
        for layout, path in files.items():
            lazy = open_ensemble(path)
            options["stats"] = compute_stats(lazy, VARIABLES, channel_dims=("level",))
            cases: list[tuple[str, Any, int | None, float]] = []
            if layout == "1 date/chunk":
                start = time.perf_counter()
                memory = EnsembleDataset(lazy.load(), VARIABLES, **options)
                cases.append(("memory", memory, None, time.perf_counter() - start))
                lazy = open_ensemble(path)
            cases.append(("stream", StreamedEnsemble(lazy, VARIABLES, **options), None, 0.0))
            lazy_set = EnsembleDataset(lazy, VARIABLES, **options)
            cases.append(("lazy", lazy_set, args.lazy_steps + args.warm + 1, 0.0))
            for case, data, steps, read in cases:
                run = folder / f"{case}-{len(rows)}"
                measured = train(data, steps, args.batch_size, run, args.warm)
                measured.pop("losses")
                loads = getattr(data, "loads", None)
                row = {
                    "case": case,
                    "layout": "in memory" if case == "memory" else layout,
                    "file_mib": round(path.stat().st_size / 2**20, 1),
                    "data_mib": round(size, 1),
                    **measured,
                    "read_in_s": read,
                    "chunk_reads": None if loads is None else max(loads.values()),
                    "buffer_chunks": getattr(getattr(data, "chunk_layout", None), "buffer", None),
                }
                rows.append(row)
                print(pd.DataFrame([row]).to_string(index=False, float_format="%.4g"))
    table = pd.DataFrame(rows)
    reference = table.loc[table["case"] == "memory", "samples_per_s"].iloc[0]
    table["vs_memory"] = table["samples_per_s"] / reference
    print(table.to_string(index=False, float_format="%.4g"))
    records = [
        {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
        for r in table.to_dict("records")
    ]
    write_report(args.out, "weather_streaming", records, dates=dates, grid=[lat, lon])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
