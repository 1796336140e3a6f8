"""What a split training step waits for at each synchronisation, and what the calibration sees.

Usage: python benchmarks/spatial_sync_wait.py [--steps N] [--calls N] [--out PATH]

Two tables, on local gloo processes:

1. **Inside steps.** For split grids of the validation's U-Net 32^3 and
   CosmoFlow 48^3 (``spatial_plan_validation.models``), Adam steps on
   random data; per step and rank: wall and thread CPU time, the time spent
   waiting for halo messages (:class:`~sciml.spatial_parallel.halo.exchange.HaloTimer`)
   and blocking in ``dist.all_reduce`` (normalisation statistics and gradient
   buckets), with the number of each, per call, and for the U-Net's
   normalisation pairs the first call against the second (which follows
   next to no compute). The median step of the slowest rank.
2. **The calibration's view.** A 1 KiB two-way exchange and a 1 KiB
   all-reduce on 2 ranks: the median back to back with a barrier before each
   call (what latency and bandwidth are fitted to) against the mean after a
   convolution on every rank (``planner_calibrate._blocking_seconds``, what
   the profile's ``sync_wait`` is made of), for three sizes of that convolution.

The gap between the two tables' back-to-back figures and the in-step waits is
what ``sync_wait`` prices.
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from _report import write_report
from spatial_plan_validation import models

from sciml.distributed import spawn
from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.halo.exchange import HaloTimer
from sciml.spatial_parallel.planner.calibrate import (
    GAP_SHAPE,
    SMALL,
    _allreduce,
    _blocking_seconds,
    _exchange,
    _median_seconds,
)

#: (model, volume edge, grid) of the in-step table.
STEP_CASES = [
    ("unet", 32, (1, 1, 1, 2)),
    ("unet", 32, (1, 2, 1, 1)),
    ("unet", 32, (1, 4, 1, 1)),
    ("cosmoflow", 48, (1, 1, 1, 2)),
    ("cosmoflow", 48, (1, 2, 1, 1)),
    ("cosmoflow", 48, (1, 2, 2, 1)),
    ("cosmoflow", 48, (1, 4, 1, 1)),
]
#: Convolution inputs computed before each timed call (about 0.3, 2 and 16 ms on one core).
GAPS = [(1, 8, 8, 8, 8), GAP_SHAPE, (1, 8, 32, 32, 32)]


def _timed_steps(name: str, size: int, grid: tuple[int, ...], steps: int) -> list[dict[str, float]]:
    """Rank function: per step, wall, CPU, halo waits and all-reduce blocking (seconds, counts)."""
    model = models()[name]
    channels = 4 if name == "cosmoflow" else 2
    torch.manual_seed(0)
    mesh = SpatialMesh(**dict(zip(("data", "depth", "height", "width"), grid, strict=True)))
    pmodel = parallelize(model, mesh)
    x = shard(torch.randn(2, channels, size, size, size), mesh)
    optimizer = torch.optim.Adam(pmodel.parameters(), lr=1e-6)
    reduce: dict[str, Any] = {"seconds": 0.0, "calls": 0, "each": []}
    exchanges = {"calls": 0}
    all_reduce, batch = dist.all_reduce, dist.batch_isend_irecv

    def timed_all_reduce(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = all_reduce(*args, **kwargs)
        reduce["each"].append(time.perf_counter() - start)
        reduce["seconds"] += reduce["each"][-1]
        reduce["calls"] += 1
        return out

    def counted_batch(ops: Any) -> Any:
        exchanges["calls"] += 1
        return batch(ops)

    dist.all_reduce, dist.batch_isend_irecv = timed_all_reduce, counted_batch
    rows = []
    try:
        for step in range(steps + 1):  # the first is a warm-up
            dist.barrier()
            reduce.update(seconds=0.0, calls=0, each=[])
            exchanges["calls"] = 0
            with HaloTimer() as timer:
                wall, cpu = time.perf_counter(), time.thread_time()
                optimizer.zero_grad(set_to_none=False)
                pmodel(x).square().sum().backward()
                optimizer.step()
                wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            if step:
                # a normalisation's all-reduces come in pairs (forward and backward), the
                # second right after the first; the last call is the gradient bucket's
                pairs = reduce["each"][: (len(reduce["each"]) - 1) // 2 * 2]
                rows.append(
                    {
                        "wall_s": wall,
                        "cpu_s": cpu,
                        "halo_wait_s": timer.total,
                        "exchanges": exchanges["calls"],
                        "allreduce_s": reduce["seconds"],
                        "allreduces": reduce["calls"],
                        "first_of_pair_s": sum(pairs[0::2]),
                        "second_of_pair_s": sum(pairs[1::2]),
                        "pairs": len(pairs) // 2,
                    }
                )
    finally:
        dist.all_reduce, dist.batch_isend_irecv = all_reduce, batch
    return rows


def _calibration_view(calls: int) -> list[dict[str, float]]:
    """Rank function: back-to-back medians and after-compute means of small calls."""
    rows = []
    for kind, fn in (("exchange", _exchange(SMALL)), ("allreduce", _allreduce(SMALL))):
        row = {"kind": kind, "back_to_back_median_s": _median_seconds(fn, repeats=calls)}
        for shape in GAPS:
            key = f"after_conv_{'x'.join(map(str, shape[2:]))}_mean_s"
            row[key] = _blocking_seconds(fn, calls=calls, gap_shape=shape)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run both tables, print them and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per grid")
    parser.add_argument("--calls", type=int, default=100, help="timed calls per figure")
    parser.add_argument("--out", default="runs/bench/spatial_sync_wait.json")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(
        f"{'case':>22} {'wall ms':>8} {'cpu ms':>7} {'halo ms':>8} {'exch':>5} {'ms/exch':>7} "
        f"{'allred ms':>9} {'calls':>5} {'ms/allred':>9} {'1st/2nd of pair ms':>18}"
    )
    for name, size, grid in STEP_CASES:
        ranks = spawn(
            functools.partial(_timed_steps, steps=args.steps), math.prod(grid), name, size, grid
        )
        steps = [max(on_ranks, key=lambda s: s["wall_s"]) for on_ranks in zip(*ranks, strict=True)]
        row = {key: statistics.median(s[key] for s in steps) for key in steps[0]}
        rows.append({"table": "steps", "model": name, "size": size, "grid": grid, **row})
        per_call = row["allreduce_s"] / max(row["allreduces"], 1)
        per_exchange = row["halo_wait_s"] / max(row["exchanges"], 1)
        pairs = max(row["pairs"], 1)
        first, second = row["first_of_pair_s"] / pairs, row["second_of_pair_s"] / pairs
        print(
            f"{name + ' ' + str(size) + ' ' + str(grid):>22} {row['wall_s'] * 1e3:>8.1f} "
            f"{row['cpu_s'] * 1e3:>7.1f} {row['halo_wait_s'] * 1e3:>8.1f} "
            f"{row['exchanges']:>5.0f} {per_exchange * 1e3:>7.2f} {row['allreduce_s'] * 1e3:>9.1f} "
            f"{row['allreduces']:>5.0f} {per_call * 1e3:>9.2f} "
            f"{first * 1e3:>9.2f}/{second * 1e3:<8.2f}",
            flush=True,
        )
    view = spawn(_calibration_view, 2, args.calls)
    print(
        f"\n{'call (1 KiB)':>12} {'median back to back ms':>23}  mean after a convolution on "
        f"{', '.join('x'.join(map(str, s[2:])) for s in GAPS)} (ms)"
    )
    for by_rank in zip(*view, strict=True):
        row = {k: v for k, v in by_rank[0].items() if k != "kind"}
        row = {k: statistics.mean(r[k] for r in by_rank) for k in row}  # both ranks
        rows.append({"table": "calibration", "kind": by_rank[0]["kind"], **row})
        after = [v for k, v in row.items() if k.startswith("after_conv")]
        print(
            f"{by_rank[0]['kind']:>12} {row['back_to_back_median_s'] * 1e3:>23.2f}  "
            + "  ".join(f"{v * 1e3:.2f}" for v in after)
        )
    write_report(args.out, "spatial_sync_wait", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
