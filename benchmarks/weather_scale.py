"""Training and evaluation on files of 1x, 4x and 8x the memory limit: streamed vs in memory.

Usage: python benchmarks/weather_scale.py [--memory-limit 128MiB] [--quick] [--out PATH]

At the size the package defaults to (``weather train --memory-limit``'s 1 GiB):
``--memory-limit 1GiB`` (files of 1, 4 and 8 GiB decoded, twice over; about 8 times the
default's time and temporary disk: hours on 2 cores, about 12 GiB of files at a time).

Measured on this 2-core machine at the default 128 MiB, training with ``--no-evaluate``
(the process warmed up by 8 untimed steps first): one start date per chunk, 0.0113 CPU s
per sample in memory (1x file), 0.0112, 0.0111 and 0.0115 streamed from the 1x, 4x and 8x
files (1.01, 1.02 and 0.99 times the in-memory rate; each stream reads 16 one-date chunks
at a time, :data:`sciml.weather.streamed.READS_PER_BUFFER`; read one at a time, 0.75, 0.77
and 0.70 in an earlier run); 48 dates per chunk, 1.03, 1.45 and 1.53 times in the same run
(against its in-memory figure, 0.0160 CPU s per sample: the same values in memory took
0.0113 in the one-date case of this run, so that figure is noise and flatters these
ratios), and 1.00, 1.08 and 1.08 in an earlier quiet run; each chunk read once, and the
float64 step losses streamed and in memory on the 4x files equal (largest difference 0).
``weather evaluate`` by blocks (another run, at load average 17-21, before netCDF files
were opened with a 4 MiB chunk cache a variable, :func:`sciml.io_utils.small_chunk_cache`):
peak resident memory 753, 807 and 886 MiB on the 1x, 4x and 8x files of one date per chunk
(129 MiB to 1 GiB of data), growing with the chunks the library's 64 MiB caches kept; the
1x file whole: 1461 MiB. Reading the 4x file a block of 14 dates at a time now holds at
most 232 MiB resident, against 400 MiB and rising with the 64 MiB caches, in about the same
CPU time (``benchmarks/netcdf_chunk_cache.py``). A stream holds up to 2 x 256 MiB of decoded chunks
whatever the limit (``holds_mib``: 500 MiB at 4x and 8x here).

The files are tiled from a few start dates of the ``qg-imperfect-v1`` toy preset (its
shape: 10 members, 7 lead times, 2 levels, 32 x 32, ``psi`` and ``q`` with their truths,
about 1.2 MiB per start date as float32) with noise added to every tile (a tenth of each
field's standard deviation), so that they compress like real fields. Each size is written
twice, compressed as the package writes (:func:`sciml.weather.store.netcdf_encoding`):
with one start date per chunk (the presets' writer, :func:`sciml.weather.toy.io.write_ensemble`)
and with ``--chunk-dates`` start dates per chunk (the netCDF library's defaults give dozens
per chunk; the presets wrote those before they wrote one per chunk). Training takes the
path ``sciml weather train`` takes (in memory up to ``--memory-limit``, else streamed:
:func:`sciml.weather.reads.read_path`, :class:`sciml.weather.streamed.StreamedEnsemble`):

* ``memory``: the 1x file read into memory (the limit above it; the read timed apart);
* ``stream``: each file streamed at the limit (the 1x file lies just above it).

Each run trains the pooled model (5 members drawn at random, batches of 8) one epoch of
its file from the same seed, timed from the start of :func:`sciml.training.fit` to the
last step: samples/s (wall) and CPU seconds per sample (every thread of the process: the
steps and every read). A whole epoch, not a fixed number of steps: a stream reads ahead up
to twice its shuffle buffer (``holds_mib``; 2 x 256 MiB of chunks), so a run shorter than
an epoch of a large file counts the reads of chunks whose samples come after it; in an
epoch each chunk is read once (``chunks_read``, in ``reads`` reads). ``vs_memory`` is the
in-memory run's CPU s per sample over the run's (above 1: cheaper than in memory).
``loss_diff_f64``: a short float64 run (``--f64-steps``) streamed and one in memory on the
4x file, in the same (chunk) order: the largest difference of their step losses (0: the
same losses, bit for bit).

Evaluation: EMOS trained once (on other dates), then ``sciml weather evaluate`` of each
file of one start date per chunk, each in its own process (as
``benchmarks/weather_evaluate_memory.py``): peak resident memory and wall time, by blocks
of start dates (the command's default); the 1x file also whole (``--block-dates 0``), and
``max_rel_diff`` the largest relative difference of the two score tables.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
import torch
import xarray as xr
from _report import write_report
from _weather_files import (
    chunk_encoding,
    evaluate,
    max_rel_diff,
    train,
    train_emos,
    write_in_pieces,
)

from sciml.cli_args import byte_size, positive_int
from sciml.datasets.channels import compute_stats
from sciml.weather.data import open_ensemble
from sciml.weather.postprocess.train import _samples
from sciml.weather.toy.presets import generate_preset

VARIABLES = ["psi", "q"]
FACTORS = (1, 4, 8)


def toy_tiles(dates: int) -> xr.Dataset:
    """``dates`` start dates of the ``qg-imperfect-v1`` preset (float32), without valid times."""
    toy = generate_preset("qg-imperfect-v1", start_dates=dates).drop_vars("valid_time")
    return toy.astype("float32")


def tiled_layout(toy: xr.Dataset, dates: int) -> xr.Dataset:
    """The toy's variables over ``dates`` start dates two days apart, lazy (zeros)."""
    time_ = np.datetime64("2000-01-01", "ns") + np.arange(dates) * np.timedelta64(2, "D")
    variables: dict[Hashable, Any] = {}
    for name, var in toy.data_vars.items():
        if "time" not in var.dims:
            variables[name] = var
            continue
        shape = [dates if d == "time" else var.sizes[d] for d in var.dims]
        data = da.zeros(shape, dtype=np.float32, chunks=-1)
        variables[name] = xr.Variable(var.dims, data, var.attrs)
    coords = {name: c for name, c in toy.coords.items() if name != "time"}
    return xr.Dataset(variables, coords={**coords, "time": time_}, attrs=toy.attrs)


def write_tiled(toy: xr.Dataset, path: Path, dates: int, *, chunk_dates: int, seed: int) -> Path:
    """``dates`` start dates: the toy's in turn, each with fresh noise (float32)."""
    scale = {
        str(name): 0.1 * float(toy[name].std())
        for name in toy.data_vars
        if "time" in toy[name].dims
    }
    rng = np.random.default_rng(seed)

    def fill(first: int, count: int) -> dict[str, np.ndarray]:
        tiles = np.arange(first, first + count) % toy.sizes["time"]
        out = {}
        for name, std in scale.items():
            values = toy[name].isel(time=tiles).values
            noise = rng.standard_normal(values.shape, dtype=np.float32)
            out[name] = values + np.float32(std) * noise
        return out

    layout = tiled_layout(toy, dates)
    piece = max(chunk_dates, 16 // chunk_dates * chunk_dates)
    encoding = chunk_encoding(layout, chunk_dates=chunk_dates)
    return write_in_pieces(path, layout, fill, encoding=encoding, piece=piece)


def date_bytes(toy: xr.Dataset) -> int:
    """Decoded bytes of one start date of the training variables."""
    names = [*VARIABLES, *(f"{v}_truth" for v in VARIABLES)]
    return sum(toy[name].nbytes for name in names) // toy.sizes["time"]


def samples(path: Path, limit: int, options: dict[str, Any]) -> tuple[Any, str]:
    """The samples of ``path`` as ``weather train`` reads them under ``limit``, and the path."""
    data, record = _samples(
        open_ensemble(path), VARIABLES, what="the training dates", limit=limit, **options
    )
    return data, record["path"]


def main(argv: list[str] | None = None) -> int:
    """Write the files, train and evaluate each, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--memory-limit", type=byte_size, help="as weather train's (default 128MiB; quick 4MiB)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny files (seconds)")
    parser.add_argument("--chunk-dates", type=positive_int, default=48, help="multi-date chunks")
    parser.add_argument("--f64-steps", type=positive_int, default=6, help="float64 steps")
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument("--toy-dates", type=positive_int, default=4, help="toy dates tiled")
    parser.add_argument("--no-evaluate", action="store_true", help="training only")
    parser.add_argument("--out", default="runs/bench/weather_scale.json", help="JSON report")
    args = parser.parse_args(argv)
    limit = args.memory_limit or (4 * 2**20 if args.quick else 128 * 2**20)
    toy = toy_tiles(2 if args.quick else args.toy_dates)
    per_date = date_bytes(toy)
    dates = {factor: factor * limit // per_date + 1 for factor in FACTORS}  # just above
    layouts = {"1 date/chunk": 1, f"{args.chunk_dates} dates/chunk": args.chunk_dates}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="weather_scale_") as tmp:
        folder = Path(tmp)
        stats = None
        for layout, chunk in layouts.items():
            files = {}
            for factor, count in dates.items():
                path = folder / f"{factor}x-{chunk}.nc"
                files[factor] = write_tiled(
                    toy, path, count, chunk_dates=min(chunk, count), seed=factor
                )
            if stats is None:
                stats = compute_stats(open_ensemble(files[1]), VARIABLES, channel_dims=("level",))
            options: dict[str, Any] = {"members": 5, "choice": "random", "stats": stats}
            cases = [("memory", 1, 2 * factor_bytes(files[1]))]
            cases += [("stream", factor, limit) for factor in FACTORS]
            reference = None
            for case, factor, case_limit in cases:
                start = time.perf_counter()
                data, read = samples(files[factor], case_limit, options)
                read_s = time.perf_counter() - start
                if read != case:
                    raise RuntimeError(f"{case} case read {read}: the sizes are off")
                run = folder / f"run-{len(rows)}-{chunk}"
                if not rows:  # the process's first steps (allocations, thread pools) untimed
                    train(data, 8, args.batch_size, folder / "warm-up", 0)
                measured = train(data, None, args.batch_size, run, 0, from_start=True)
                measured.pop("losses")
                row = {
                    "case": case,
                    "layout": layout,
                    "chunk_dates": chunk,
                    "file_x_limit": factor,
                    "start_dates": dates[factor],
                    "data_mib": round(dates[factor] * per_date / 2**20, 1),
                    "file_mib": round(files[factor].stat().st_size / 2**20, 1),
                    "limit_mib": round(case_limit / 2**20, 1),
                    **measured,
                    "read_in_s": round(read_s, 2) if case == "memory" else None,
                    **chunk_reads(data),
                    "buffer_chunks": getattr(data.chunk_layout, "buffer", None),
                    "holds_mib": round(held(data, dates[factor] * per_date) / 2**20, 1),
                }
                reference = reference or row["cpu_s_per_sample"]
                row["vs_memory"] = reference / row["cpu_s_per_sample"]
                if case == "stream" and factor == 4:
                    row["loss_diff_f64"] = f64_diff(files[4], limit, options, args, folder)
                close = getattr(data, "close", None)
                if close is not None:
                    close()
                rows.append(row)
                print(pd.DataFrame([row]).to_string(index=False, float_format="%.4g"), flush=True)
            if chunk != 1 or args.no_evaluate:
                for path in files.values():
                    path.unlink()
            if chunk == 1 and not args.no_evaluate:
                rows += evaluations(toy, files, folder, dates, per_date)
                for path in files.values():
                    path.unlink()
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format="%.4g"))
    records = [
        {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
        for r in table.to_dict("records")
    ]
    extra = {"memory_limit": limit, "batch_size": args.batch_size, "toy_dates": toy.sizes["time"]}
    write_report(args.out, "weather_scale", records, **extra)
    return 0


def chunk_reads(data: Any) -> dict[str, int | None]:
    """A stream's reads in the epoch (``reads``) and the file chunks they read (``chunks_read``).

    A read takes neighbouring chunks together (:data:`sciml.weather.streamed.READS_PER_BUFFER`);
    ``None`` for data in memory.
    """
    if not hasattr(data, "loads"):
        return {"reads": None, "chunks_read": None}
    per_read = np.diff(np.searchsorted(data.stored, data.dates))
    return {
        "reads": sum(data.loads.values()),
        "chunks_read": int(sum(count * per_read[read] for read, count in data.loads.items())),
    }


def held(data: Any, data_bytes: int) -> int:
    """Decoded bytes held at most: the data in memory, or a stream's chunks buffered and ahead."""
    if not hasattr(data, "chunk_bytes"):
        return data_bytes
    chunks = len(data.chunk_layout.bounds) - 1
    return min(2 * data.chunk_layout.buffer, chunks) * data.chunk_bytes


def factor_bytes(path: Path) -> int:
    """Decoded bytes of a file's data."""
    with open_ensemble(path) as ds:
        return int(ds.nbytes)


def f64_diff(path: Path, limit: int, options: dict[str, Any], args: Any, folder: Path) -> float:
    """Largest difference of the float64 step losses streamed and in memory (same order)."""
    options = options | {"dtype": torch.float64}
    losses = []
    for case_limit in (limit, 2 * factor_bytes(path)):
        data, _ = samples(path, case_limit, options)
        steps = args.f64_steps + 2
        run = folder / f"f64-{case_limit}"
        measured = train(data, steps, args.batch_size, run, 1, epochs=steps, dtype=torch.float64)
        losses.append(np.array(measured["losses"]))
        close = getattr(data, "close", None)
        if close is not None:
            close()
    return float(np.max(np.abs(losses[0] - losses[1])))


def evaluations(
    toy: xr.Dataset, files: dict[int, Path], folder: Path, dates: dict[int, int], per_date: int
) -> list[dict[str, Any]]:
    """Evaluate each file by blocks (the 1x file whole too) with an EMOS run trained once."""
    train_file = write_tiled(toy, folder / "emos-train.nc", 8, chunk_dates=1, seed=99)
    run = train_emos(train_file, folder / "emos_5")
    rows = []
    for factor, path in files.items():
        modes = [("blocks", None)] + ([("whole", 0)] if factor == 1 else [])
        outputs = {}
        for mode, block in modes:
            outputs[mode] = folder / f"scores_{factor}_{mode}.csv"
            peak, seconds = evaluate(run, path, outputs[mode], block)
            rows.append(
                {
                    "case": f"evaluate {mode}",
                    "layout": "1 date/chunk",
                    "chunk_dates": 1,
                    "file_x_limit": factor,
                    "start_dates": dates[factor],
                    "data_mib": round(dates[factor] * per_date / 2**20, 1),
                    "file_mib": round(path.stat().st_size / 2**20, 1),
                    "peak_rss_mib": round(peak, 1),
                    "seconds": round(seconds, 1),
                }
            )
            print(pd.DataFrame([rows[-1]]).to_string(index=False), flush=True)
        if len(outputs) == 2:
            rows[-1]["max_rel_diff"] = max_rel_diff(outputs["whole"], outputs["blocks"])
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
