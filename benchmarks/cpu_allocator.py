"""What keeping freed memory saves a CPU training step: step time and page faults, per policy.

Usage: python benchmarks/cpu_allocator.py [--rounds N] [--repeats N] [--out PATH]

For the planner validation's CosmoFlow 64^3 and U-Net 32^3
(``spatial_plan_validation.models``, global batch 2) on 1 process, on 2
data-parallel processes (one sample each) and on a 2-way depth split, Adam
steps are timed (``planner_measure.time_step``: the best step of the slowest
rank) under glibc's default ``malloc`` policy and under
:func:`sciml.distributed.cpu_allocator.keep_freed_memory` (what :func:`sciml.training.fit`
switches on for the CPU), alternating the two ``--rounds`` times so that both
see the same drift of the machine. Per case: the median over rounds of each
policy's step time, its thread CPU time, kernel part and minor page faults,
and the ratio of the step times.
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
from typing import Any

from _report import write_report
from spatial_plan_validation import models

from sciml.distributed import spawn
from sciml.spatial_parallel.planner.measure import time_step

#: (model, edge of the cube, grid (data, depth, height, width)).
CASES = [
    ("cosmoflow", 64, (1, 1, 1, 1)),
    ("cosmoflow", 64, (2, 1, 1, 1)),
    ("cosmoflow", 64, (1, 2, 1, 1)),
    ("unet", 32, (1, 1, 1, 1)),
    ("unet", 32, (2, 1, 1, 1)),
    ("unet", 32, (1, 2, 1, 1)),
]
FIELDS = ("seconds", "cpu_seconds", "system_seconds", "page_faults")


def measure(
    name: str, size: int, grid: tuple[int, ...], keep: bool, repeats: int
) -> dict[str, float]:
    """The slowest rank's best step of one case under one policy (fresh processes)."""
    model = models()[name]
    shape = (2, 4 if name == "cosmoflow" else 2, size, size, size)
    mesh = dict(zip(("data", "depth", "height", "width"), grid, strict=True))
    run = functools.partial(time_step, repeats=repeats, keep_freed=keep)
    return max(spawn(run, math.prod(grid), model, mesh, shape), key=lambda r: r["seconds"])


def main(argv: list[str] | None = None) -> int:
    """Time every case under both policies, print the table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two policies")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per run")
    parser.add_argument("--out", default="runs/bench/cpu_allocator.json")
    args = parser.parse_args(argv)
    print(
        f"{'model':>9} {'size':>4} {'grid':>12} {'policy':>7} {'step ms':>8} {'cpu ms':>7} "
        f"{'sys ms':>7} {'faults':>7} {'keep/default':>12}"
    )
    rows: list[dict[str, Any]] = []
    for name, size, grid in CASES:
        runs: dict[str, list[dict[str, float]]] = {"default": [], "keep": []}
        for _ in range(args.rounds):
            for policy in runs:
                runs[policy].append(measure(name, size, grid, policy == "keep", args.repeats))
        medians = {
            policy: {field: statistics.median(r[field] for r in done) for field in FIELDS}
            for policy, done in runs.items()
        }
        ratio = medians["keep"]["seconds"] / medians["default"]["seconds"]
        for policy, figures in medians.items():
            print(
                f"{name:>9} {size:>4} {str(grid):>12} {policy:>7} {figures['seconds'] * 1e3:>8.1f} "
                f"{figures['cpu_seconds'] * 1e3:>7.1f} {figures['system_seconds'] * 1e3:>7.1f} "
                f"{figures['page_faults']:>7.0f} {ratio if policy == 'keep' else 1:>12.2f}",
                flush=True,
            )
        rows.append(
            {
                "model": name,
                "size": size,
                "grid": list(grid),
                "median": medians,
                "rounds": runs,
                "keep_over_default": ratio,
            }
        )
    write_report(
        args.out,
        "cpu_allocator",
        rows,
        rounds=args.rounds,
        repeats=args.repeats,
        claim="keeping freed memory removes the page faults of CPU steps and shortens them",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
