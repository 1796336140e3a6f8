"""How much of the halo-exchange time the overlap hides, for one Conv3d layer.

Usage: python benchmarks/spatial_overlap.py [--quick] [--sizes 64 96] [--out PATH]

One Conv3d(16, 16, 3, padding=1) on a 16 x S^3 volume, forward + backward, on
2 ranks (depth split) and on 4 ranks (2 x 2, oversubscribed on 2 cores). With
blocking exchanges a rank waits for its halos right after posting them; with
overlap it computes the interior first. ``hidden = 1 - wait_overlap /
wait_blocking`` is the fraction of the halo time taken off the critical path.
"""

from __future__ import annotations

import argparse
import functools
import math

from _report import write_report
from _spatial_workloads import time_conv_stack

from sciml.distributed import spawn


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small volume")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 96])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="runs/bench/spatial_overlap.json")
    args = parser.parse_args(argv)
    sizes, repeats = ([24], 2) if args.quick else (args.sizes, args.repeats)
    meshes = [{"depth": 2}, {"depth": 2, "height": 2}]
    rows = []
    print(
        f"{'size':>5} {'mesh':>26} {'wait blocking ms':>17} {'wait overlap ms':>16} "
        f"{'hidden':>7} {'T blocking':>11} {'T overlap':>10}"
    )
    for size in sizes:
        for mesh in meshes:
            row: dict = {"size": size, "mesh": mesh}
            for overlap in (False, True):
                run = functools.partial(time_conv_stack, layers=1, repeats=repeats, overlap=overlap)
                ranks = spawn(run, math.prod(mesh.values()), mesh, size)
                key = "overlap" if overlap else "blocking"
                row[f"wait_{key}"] = sum(r["halo_wait"] for r in ranks) / len(ranks)
                row[f"t_{key}"] = max(r["seconds"] for r in ranks)
            row["hidden"] = 1 - row["wait_overlap"] / row["wait_blocking"]
            rows.append(row)
            print(
                f"{size:>5} {str(mesh):>26} {row['wait_blocking'] * 1e3:>17.2f} "
                f"{row['wait_overlap'] * 1e3:>16.2f} {row['hidden']:>7.2f} "
                f"{row['t_blocking']:>11.3f} {row['t_overlap']:>10.3f}"
            )
    write_report(args.out, "spatial_overlap", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
