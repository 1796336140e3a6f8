"""CosmoFlow's accuracy against the volume edge, with the same number of training samples.

Usage: python benchmarks/volumes_accuracy.py [--quick] [--sizes 8,16,32] [--seeds 3]
       [--samples 256] [--epochs 30] [--jobs 2] [--separate] [--out PATH]

The papers' claim in miniature (Oyama et al., TPDS 2021): trained on larger
volumes, with the same samples, seeds and steps, CosmoFlow predicts the
parameters better. Trains on generated volumes of three edges, three seeds
each (:func:`sciml.volumes.experiment.volume_size_seeds`: the best epoch on a
validation set, the errors on a separate test set), and prints the test
mean absolute error of the scaled parameters (in [-1, 1]) per parameter and
overall, mean +- standard deviation over the seeds, next to the best
constant prediction and a classical estimator fitted on the same volumes
(:mod:`sciml.volumes.reference`). The recipe is
:class:`~sciml.volumes.experiment.SizeRecipe`'s (SGD with momentum 0.9, peak
learning rate 0.05 after 2 epochs of warm-up, divided by 4 at 2/3 and 13/15 of
the epochs). Each edge's seeds train fused, in one process on one thread;
``--separate`` trains each (size, seed) run in a process of its own instead (the
same rows: the fused runs equal the separate ones). ``--jobs`` runs that many
processes at once. Prints the wall time of the whole.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from multiprocessing import get_context

from _report import write_report

from sciml.cli_args import positive_int
from sciml.volumes.data import PARAMS
from sciml.volumes.experiment import SizeRecipe, volume_size_seeds

COLUMNS = (*PARAMS, "all")


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError as err:
        message = f"expected integers separated by commas, got {text!r}"
        raise argparse.ArgumentTypeError(message) from err
    if any(v < 8 for v in values):
        raise argparse.ArgumentTypeError(f"volume edges must be >= 8, got {text!r}")
    return values


def _decay(epochs: int) -> tuple[int, ...]:
    """The learning-rate steps at 2/3 and 13/15 of the epochs (20 and 26 of 30)."""
    return tuple(sorted({e for e in (epochs * 2 // 3, epochs * 13 // 15) if 1 <= e < epochs}))


def _cell(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} +- {spread:.3f}"


def summarise(rows: list[dict[str, float]]) -> list[dict[str, object]]:
    """One row per (size, estimator): the mean and spread over the seeds of each error."""
    summary: list[dict[str, object]] = []
    for size in sorted({int(r["size"]) for r in rows}):
        runs = [r for r in rows if r["size"] == size]
        for kind, label in (
            ("test", "CosmoFlow"),
            ("reference", "classical"),
            ("baseline", "constant"),
        ):
            cells = {}
            for column in COLUMNS:
                key = f"{kind}_mae" if column == "all" else f"{kind}_mae_{column}"
                values = [r[key] for r in runs]
                cells[column] = {
                    "mean": statistics.mean(values),
                    "spread": statistics.stdev(values) if len(values) > 1 else 0.0,
                    "text": _cell(values),
                }
            summary.append({"size": size, "estimator": label, "seeds": len(runs), **cells})
    return summary


def print_table(summary: list[dict[str, object]]) -> None:
    """The summary as a Markdown table."""
    print("| edge | estimator | " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for row in summary:
        cells = " | ".join(row[c]["text"] for c in COLUMNS)  # type: ignore[index]
        print(f"| {row['size']}^3 | {row['estimator']} | {cells} |")


def main(argv: list[str] | None = None) -> int:
    """Run the experiment, print the table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sets, two edges, two seeds")
    parser.add_argument("--sizes", type=_ints, default=(8, 16, 32), help="volume edges")
    parser.add_argument("--seeds", type=positive_int, default=3, help="seeds per edge")
    parser.add_argument(
        "--samples", type=positive_int, default=256, help="training volumes per run"
    )
    parser.add_argument("--epochs", type=positive_int, default=30, help="epochs of every run")
    parser.add_argument("--jobs", type=positive_int, default=1, help="processes at once")
    parser.add_argument(
        "--separate", action="store_true", help="a process per (size, seed), seeds not fused"
    )
    parser.add_argument("--out", default="runs/bench/volumes_accuracy.json", help="JSON report")
    args = parser.parse_args(argv)
    if args.quick:
        sizes, seeds = (8, 16), (0, 1)
        recipe = SizeRecipe(samples=16, val_samples=8, test_samples=8, epochs=3, decay_epochs=())
    else:
        sizes, seeds = args.sizes, tuple(range(args.seeds))
        recipe = SizeRecipe(
            samples=args.samples, epochs=args.epochs, decay_epochs=_decay(args.epochs)
        )
    # the largest first, so that the small runs fill in beside them
    if args.separate:
        tasks = [(size, (seed,)) for size in sorted(sizes, reverse=True) for seed in seeds]
    else:
        tasks = [(size, seeds) for size in sorted(sizes, reverse=True)]
    rows = []
    start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="sciml-bench-") as tmp,
        ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool,
    ):
        futures = [
            pool.submit(volume_size_seeds, tmp, size=size, seeds=task_seeds, recipe=recipe)
            for size, task_seeds in tasks
        ]
        for future in as_completed(futures):
            for row in future.result():
                rows.append(row)
                print(
                    f"size {row['size']} seed {row['seed']}: test MAE {row['test_mae']:.3f} "
                    f"(best epoch {row['best_epoch']})",
                    flush=True,
                )
    seconds = time.perf_counter() - start
    rows.sort(key=lambda row: (row["size"], row["seed"]))
    summary = summarise(rows)
    print_table(summary)
    how = "separate runs" if args.separate else "seeds fused"
    print(f"wall time: {seconds:.1f} s ({how}, {args.jobs} process(es) at once)")
    write_report(
        args.out,
        "volumes_accuracy",
        rows,
        summary=summary,
        recipe=asdict(recipe),
        seconds=seconds,
        separate=args.separate,
        jobs=args.jobs,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
