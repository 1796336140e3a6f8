"""Parallel efficiency of a spatially split Conv3d stack, forward + backward, on gloo.

Usage: python benchmarks/spatial_efficiency.py [--quick] [--sizes 64 96] [--repeats R] [--out PATH]

The same global volume (1 x 16 channels x S^3, four Conv3d(k=3) + ReLU layers)
is timed on 1 rank x 1 thread (the plain model) and on 2 ranks x 1 thread
(depth split, with and without overlap); efficiency = T1 / (2 * T2). The three
runs are interleaved for ``--rounds`` rounds of ``--repeats`` iterations (after
one warm-up each); the table uses the best iteration of each (the least
disturbed by other work on a shared machine), the JSON also the medians. T1*
is the single-device stack with explicit depth padding (the same function on
oneDNN's faster unpadded-depth path), a stricter baseline for the split.
"""

from __future__ import annotations

import argparse
import functools

from _report import write_report
from _spatial_workloads import time_conv_stack

from sciml.distributed import spawn


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small volume, few repeats")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 96])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (best kept)")
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--out", default="runs/bench/spatial_efficiency.json")
    args = parser.parse_args(argv)
    sizes, repeats = ([24], 2) if args.quick else (args.sizes, args.repeats)
    rows = []
    print(
        f"{'size':>5} {'T1 (s)':>8} {'T1* (s)':>8} {'T2 blocking':>12} {'T2 overlap':>11} "
        f"{'eff blocking':>13} {'eff overlap':>12} {'eff* blocking':>14}"
    )
    for size in sizes:
        options = dict(channels=args.channels, repeats=repeats)
        runs: dict[str, list[dict]] = {"t1": [], "t1_padded": [], "blocking": [], "overlap": []}
        for _ in range(args.rounds):  # interleaved, so that a load change hits all of them
            runs["t1"] += spawn(functools.partial(time_conv_stack, **options), 1, None, size)
            padded = functools.partial(time_conv_stack, explicit_depth_padding=True, **options)
            runs["t1_padded"] += spawn(padded, 1, None, size)
            for key in ("blocking", "overlap"):
                run = functools.partial(time_conv_stack, overlap=key == "overlap", **options)
                ranks = spawn(run, 2, {"depth": 2}, size)
                runs[key].append(
                    {
                        "seconds": max(r["seconds"] for r in ranks),
                        "best": max(r["best"] for r in ranks),
                        "halo_wait": max(r["halo_wait"] for r in ranks),
                    }
                )
        t1 = min(r["best"] for r in runs["t1"])
        t1_padded = min(r["best"] for r in runs["t1_padded"])
        row: dict = {
            "size": size,
            "channels": args.channels,
            "t1": t1,
            "t1_padded": t1_padded,
            "t1_median": min(r["seconds"] for r in runs["t1"]),
        }
        for key in ("blocking", "overlap"):
            row[f"t2_{key}"] = min(r["best"] for r in runs[key])
            row[f"t2_{key}_median"] = min(r["seconds"] for r in runs[key])
            row[f"halo_wait_{key}"] = min(r["halo_wait"] for r in runs[key])
            row[f"efficiency_{key}"] = t1 / (2 * row[f"t2_{key}"])
            row[f"efficiency_{key}_median"] = row["t1_median"] / (2 * row[f"t2_{key}_median"])
            row[f"efficiency_{key}_vs_padded"] = t1_padded / (2 * row[f"t2_{key}"])
        rows.append(row)
        print(
            f"{size:>5} {row['t1']:>8.3f} {t1_padded:>8.3f} {row['t2_blocking']:>12.3f} "
            f"{row['t2_overlap']:>11.3f} {row['efficiency_blocking']:>13.3f} "
            f"{row['efficiency_overlap']:>12.3f} {row['efficiency_blocking_vs_padded']:>14.3f}"
        )
    print("T1*: single device with explicit depth padding (oneDNN's fast path); eff* = T1*/(2 T2)")
    write_report(args.out, "spatial_efficiency", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
