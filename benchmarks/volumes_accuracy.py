"""CosmoFlow's accuracy against the volume edge, with the same number of training samples.

Usage: python benchmarks/volumes_accuracy.py [--quick] [--out PATH]

The papers' claim in miniature (Oyama et al., TPDS 2021): trained on larger
volumes, with the same samples, seeds and steps, CosmoFlow predicts the
parameters better. Trains on generated volumes of three edges, three seeds
each (:func:`sciml.volumes.experiment.volume_size_experiment`), and reports
the validation mean absolute error of the four scaled parameters (mean and
spread over the seeds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from _report import write_report

from sciml.volumes.experiment import volume_size_experiment


def main(argv: list[str] | None = None) -> int:
    """Run the experiment, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small sizes, one seed")
    parser.add_argument("--epochs", type=int, default=30, help="epochs of every run")
    parser.add_argument("--samples", type=int, default=64, help="training volumes per run")
    parser.add_argument("--out", default="runs/bench/volumes_accuracy.json")
    args = parser.parse_args(argv)
    sizes, seeds = ((8, 16), (0,)) if args.quick else ((8, 16, 32), (0, 1, 2))
    epochs = 2 if args.quick else args.epochs
    with tempfile.TemporaryDirectory(prefix="sciml-bench-") as tmp:
        rows = volume_size_experiment(
            tmp, sizes=sizes, seeds=seeds, samples=args.samples, epochs=epochs, lr=0.05
        )
    print(f"{'size':>5} {'val MAE (mean)':>15} {'spread':>8}  per seed")
    summary = []
    for size in sizes:
        errors = [r["val_mae"] for r in rows if r["size"] == size]
        spread = statistics.stdev(errors) if len(errors) > 1 else 0.0
        summary.append({"size": size, "val_mae_mean": statistics.mean(errors), "spread": spread})
        print(
            f"{size:>5} {statistics.mean(errors):>15.4f} {spread:>8.4f}  "
            + " ".join(f"{e:.4f}" for e in errors)
        )
    path = write_report(
        args.out, "volumes_accuracy", rows, summary=summary, epochs=epochs, samples=args.samples
    )
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
