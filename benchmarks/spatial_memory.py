"""Peak memory per rank of a CosmoFlow-sized network, forward + backward, at 1, 2 and 4 ranks.

Usage: python benchmarks/spatial_memory.py [--quick] [--size S] [--out PATH]

CosmoFlow (4 input channels, 32 base filters, 5 conv blocks, pooling head) on
one 4 x S^3 sample (S=128 as in the MLPerf data). Each rank reports the growth
of its resident set from just before the forward pass to the peak (its
activations, gradients and halos); the target is at most 1.2/P of the
single-rank figure plus the halos. Large allocations are forced through mmap
(``MALLOC_MMAP_THRESHOLD_``) so that the resident set follows the live tensors
instead of the C library's heap high-water mark.
"""

from __future__ import annotations

import argparse
import functools
import os

from _report import write_report
from _spatial_workloads import peak_memory

from sciml.distributed import spawn

MESHES = {1: None, 2: {"depth": 2}, 4: {"depth": 2, "height": 2}}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 32^3 sample")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--out", default="runs/bench/spatial_memory.json")
    args = parser.parse_args(argv)
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"  # read by the spawned ranks' C library
    size = 32 if args.quick else args.size
    rows = []
    print(f"{'ranks':>5} {'mesh':>24} {'peak/rank MiB':>14} {'x single':>9} {'target 1.2/P':>13}")
    single = None
    for ranks, mesh in MESHES.items():
        run = functools.partial(peak_memory, size=size)
        result = spawn(run, ranks, mesh)
        peak = max(r["peak_mib"] for r in result)
        single = single or peak
        row = {
            "ranks": ranks,
            "mesh": mesh,
            "size": size,
            "peak_mib_per_rank": peak,
            "ratio_to_single": peak / single,
            "target_ratio": 1.2 / ranks,
        }
        rows.append(row)
        print(
            f"{ranks:>5} {str(mesh):>24} {peak:>14.0f} {peak / single:>9.3f} {1.2 / ranks:>13.3f}"
        )
    write_report(
        args.out,
        "spatial_memory",
        rows,
        network="CosmoFlow(4, 4, base_filters=32, n_conv=5), batch 1, float32",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
