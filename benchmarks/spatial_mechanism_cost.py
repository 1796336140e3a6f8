"""What the split-block mechanism costs on the hot path: step time with and without it.

Usage: python benchmarks/spatial_mechanism_cost.py [--quick] [--rounds 30] [--steps 3]
       [--size 48] [--small 16] [--out PATH]

CosmoFlow and the 3D U-Net (``sciml.models``) on 2 gloo ranks (depth split),
one training step = forward + backward of ``sum(y * w)``. The same parallel
model runs with the mechanism on (its forward code sees
:class:`~sciml.spatial_parallel.split.tensor.SplitTensor` blocks) and off
(plain blocks, as before it existed), in interleaved rounds whose order
alternates, so that both see the same machine load. A round times ``steps``
steps of each and keeps each one's fastest (the slower rank's time; the
least disturbed by other work on a shared machine), and gives one ratio
on / off. The table shows the median ratio over rounds and its 95%
percentile-bootstrap interval (rounds resampled); the target is a median
below 1.02. The same for the ranks' main-thread CPU time, where the
mechanism's own cost (Python dispatch) falls: on a loaded machine, where
time slicing widens the wall-time interval, it is the sharper measure.

The mechanism's work per op does not grow with the volume: the same rounds on
a ``--small`` volume, where it is a larger share of a step, give its CPU time
per step (on - off, median and interval over rounds), and ``overhead_share``
is that time over the full volume's CPU time per step without it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from _report import write_report
from _spatial_workloads import median_interval, volume_model

from sciml.distributed import spawn
from sciml.spatial_parallel import SpatialMesh, parallel_context, parallelize, shard

TARGET = 1.02


def time_rounds(name: str, size: int, rounds: int, steps: int) -> list[dict[str, float]]:
    """Seconds per step, on and off, for each round (run on every rank).

    Wall time (``on``, ``off``) and this thread's CPU time (``on_cpu``,
    ``off_cpu``), each the slower rank's, the fastest of the round's steps.
    """
    torch.set_num_threads(1)
    mesh = SpatialMesh(depth=2)
    model, shape = volume_model(name, size)
    pmodel = parallelize(model, mesh)
    found = parallel_context(pmodel)
    assert found is not None
    context = found.split
    x = shard(torch.randn(shape), mesh)

    def step() -> None:
        y = pmodel(x)
        (y * 0.5).sum().backward()

    step()  # warm-up: the shape trace, allocator pools
    out = []
    for index in range(rounds):
        row = {}
        for enabled in (True, False) if index % 2 == 0 else (False, True):
            context.enabled = enabled
            times = []
            for _ in range(steps):
                dist.barrier()
                start, cpu = time.perf_counter(), time.thread_time()
                step()
                seconds = torch.tensor([time.perf_counter() - start, time.thread_time() - cpu])
                dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slower rank's step
                times.append(seconds.tolist())
            mode = "on" if enabled else "off"
            row[mode] = min(wall for wall, _ in times)
            row[f"{mode}_cpu"] = min(cpu for _, cpu in times)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small volumes, 4 rounds")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", type=int, default=48)
    parser.add_argument("--small", type=int, default=16, help="edge of the overhead's volume")
    parser.add_argument("--out", default="runs/bench/spatial_mechanism_cost.json")
    args = parser.parse_args(argv)
    size, rounds = (16, 4) if args.quick else (args.size, args.rounds)
    if min(size, args.small) < 16 or rounds < 1 or args.steps < 1:
        parser.error(f"--size and --small must be >= 16, --rounds and --steps >= 1; got {args}")
    rows: list[dict[str, Any]] = []
    print(
        f"{'model':>10} {'size':>5} {'off ms':>8} {'on ms':>8} {'ratio':>7} {'95% interval':>16} "
        f"{'CPU ratio':>10} {'95% interval':>16} {'overhead ms':>12} {'95% interval':>16} "
        f"{'share':>7}"
    )
    for name in ("cosmoflow", "unet"):
        per_round = spawn(time_rounds, 2, name, size, rounds, args.steps, timeout=1800)[0]
        ratios = [r["on"] / r["off"] for r in per_round]
        cpu_ratios = [r["on_cpu"] / r["off_cpu"] for r in per_round]
        small = per_round
        if args.small != size:
            small = spawn(time_rounds, 2, name, args.small, rounds, args.steps, timeout=1800)[0]
        overheads = [(r["on_cpu"] - r["off_cpu"]) * 1e3 for r in small]
        row = {
            "model": name,
            "size": size,
            "off_ms": statistics.median(r["off"] for r in per_round) * 1e3,
            "on_ms": statistics.median(r["on"] for r in per_round) * 1e3,
            "ratio": statistics.median(ratios),
            "ratio_ci95": median_interval(ratios),
            "ratios": ratios,
            "cpu_ratio": statistics.median(cpu_ratios),
            "cpu_ratio_ci95": median_interval(cpu_ratios),
            "cpu_ratios": cpu_ratios,
            "small": args.small,
            "overhead_ms": statistics.median(overheads),
            "overhead_ms_ci95": median_interval(overheads),
            "overheads_ms": overheads,
        }
        off_cpu_ms = statistics.median(r["off_cpu"] for r in per_round) * 1e3
        row["overhead_share"] = row["overhead_ms"] / off_cpu_ms
        row["meets_target"] = row["ratio"] < TARGET
        rows.append(row)
        (lo, hi), (cpu_lo, cpu_hi) = row["ratio_ci95"], row["cpu_ratio_ci95"]
        over_lo, over_hi = row["overhead_ms_ci95"]
        print(
            f"{name:>10} {size:>5} {row['off_ms']:>8.1f} {row['on_ms']:>8.1f} "
            f"{row['ratio']:>7.3f} {f'[{lo:.3f}, {hi:.3f}]':>16} "
            f"{row['cpu_ratio']:>10.3f} {f'[{cpu_lo:.3f}, {cpu_hi:.3f}]':>16} "
            f"{row['overhead_ms']:>12.2f} {f'[{over_lo:.2f}, {over_hi:.2f}]':>16} "
            f"{row['overhead_share']:>7.2%}"
        )
    print(
        f"median ratio on / off over {rounds} interleaved rounds of {args.steps} steps, "
        f"percentile-bootstrap 95% interval; target < {TARGET}; CPU: the ranks' main-thread "
        f"CPU time, which other processes on a loaded machine inflate much less; overhead: "
        f"CPU ms per step on - off on {args.small}^3, share: of a {size}^3 step's CPU time"
    )
    write_report(args.out, "spatial_mechanism_cost", rows, target_ratio=TARGET)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
