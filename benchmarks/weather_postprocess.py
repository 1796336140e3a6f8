"""Post-processing k members of a toy preset: CRPS of EMOS and the deep models vs the raw ensemble.

Usage: python benchmarks/weather_postprocess.py DATA [--members 5] [--epochs 30]
       [--models emos mlp unet mixed pooled] [--seeds 0 1 2] [--loss-scale raw-crps|none]
       [--work DIR] [--out PATH] [--train-only]

DATA is a preset written by ``sciml weather preset`` (or any ensemble with a truth). Its
start dates are split with ``split_start_dates`` (60/20/20): the models train on the
first 60 % and validate on the next 20 % (``train_postprocessors`` holds out the last
quarter of what it is given), and every score is on the last 20 %, never seen in training.
EMOS is fitted on ``--members`` and on all members; each deep model trains one run per
``--seeds`` value, all seeds together (fused: ``sciml.training.fit_fused``), and
``evaluate`` averages the runs that differ only by seed. A run that finished (or was stopped by
SIGUSR1/SIGTERM: its ``best`` checkpoint, chosen on the validation dates, is scored) leaves
``benchmark.json`` in its folder and is not trained again, so the models can be trained by
separate ``--train-only`` invocations side by side and scored together by a last one (a
model's seeds are trained again together unless all of them finished).
Prints the mean CRPS and skill against the raw full ensemble per model (over variables,
levels and lead times; also on the extreme-event subsets, whose climate is the training and
validation dates) and per lead time; per model the training time, epochs, training
throughput (median samples/s over epochs, from ``fit``'s ``perf.csv``) and the peak
resident memory of the training process (the loaded data set included); the evaluation
time. Writes every row as JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import pandas as pd
import xarray as xr
from _report import write_report

from sciml.cli_args import non_negative_int, positive_int
from sciml.training import TrainConfig
from sciml.weather.postprocess.config import DEFAULT_EPOCHS, PostprocessConfig
from sciml.weather.postprocess.evaluate import evaluate_runs
from sciml.weather.postprocess.loss_scale import LOSS_SCALES
from sciml.weather.postprocess.registry import MODELS
from sciml.weather.postprocess.train import train_postprocessors
from sciml.weather.split import split_start_dates

MARKER = "benchmark.json"


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _train(
    seen: xr.Dataset,
    runs: list[Path],
    seeds: list[int],
    model: str,
    members: int,
    args: argparse.Namespace,
) -> dict[str, dict]:
    """Train the runs of one model, one per seed, unless they left their markers.

    The seeds of a deep model train together, fused (``train_postprocessors``); each run's
    marker records the sweep's time and peak memory (shared by its runs), its status and
    its own figures from ``fit``'s ``perf.csv``.
    """
    if all((run / MARKER).exists() for run in runs):
        return {run.name: json.loads((run / MARKER).read_text()) for run in runs}
    configs = [
        PostprocessConfig(
            model=model,
            members=members,
            validation=0.25,
            loss_scale=args.loss_scale,
            train=TrainConfig(epochs=args.epochs, seed=seed, progress=False, tensorboard=False),
        )
        for seed in seeds
    ]
    start = time.perf_counter()
    statuses = train_postprocessors(seen, configs, runs)
    seconds = time.perf_counter() - start
    records = {}
    for run, status in zip(runs, statuses, strict=True):
        record = {
            "status": status,
            "train_seconds": seconds,
            "runs_trained_together": len(runs),
            "peak_rss_mib": _peak_rss_mib(),
        }
        perf = run / "perf.csv"
        if perf.exists():
            rows = pd.read_csv(perf)
            rate = rows[rows["metric"] == "samples_per_s"]["value"]
            record |= {"epochs_done": int(rate.size), "samples_per_s": float(rate.median())}
            record["peak_memory_mib_fit"] = float(
                rows[rows["metric"] == "peak_memory_mib"]["value"].max()
            )
            metrics = pd.read_csv(run / "metrics.csv")
            val = metrics[metrics["metric"] == "val_loss"].set_index("epoch")["value"]
            record["best_epoch"] = int(val.idxmin()) + 1  # the checkpoint that is scored
        (run / MARKER).write_text(json.dumps(record, indent=1) + "\n")
        records[run.name] = record
    return records


def main(argv: list[str] | None = None) -> int:
    """Train, evaluate on held-out dates, print the tables, write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="ensemble netCDF with <variable>_truth")
    parser.add_argument("--members", type=positive_int, default=5, help="members the models see")
    parser.add_argument(
        "--epochs", type=positive_int, default=DEFAULT_EPOCHS, help="deep model epochs"
    )
    parser.add_argument(
        "--models", nargs="+", choices=tuple(MODELS), default=list(MODELS), help="models"
    )
    parser.add_argument(
        "--seeds",
        type=non_negative_int,
        nargs="+",
        default=[0],
        help="training seeds of each deep model (trained together, fused; EMOS fits once)",
    )
    parser.add_argument(
        "--loss-scale",
        choices=LOSS_SCALES,
        default="raw-crps",
        help="the deep models' loss (one per --work folder: the table names models, not losses)",
    )
    parser.add_argument("--work", default="runs/bench/weather_postprocess_runs", help="run folders")
    parser.add_argument("--out", default="runs/bench/weather_postprocess.json", help="JSON report")
    parser.add_argument("--train-only", action="store_true", help="train, do not evaluate")
    args = parser.parse_args(argv)
    ds = xr.open_dataset(args.data).load()
    train, val, test = split_start_dates(ds)
    seen = ds.sel(time=slice(None, val["time"].values[-1]))  # static fields stay static
    full = ds.sizes["member"]
    plan = [(m, args.members) for m in args.models]
    if "emos" in args.models and full != args.members:
        plan.append(("emos", full))
    runs, records = [], {}
    for model, members in plan:
        seeds = args.seeds if MODELS[model].deep else args.seeds[:1]  # a fit: nothing to seed
        folders = [Path(args.work) / f"{model}_{members}_seed{seed}" for seed in seeds]
        trained = _train(seen, folders, seeds, model, members, args)
        for name, record in trained.items():
            print(f"{name}: {json.dumps(record)}")
            runs.append(Path(args.work) / name)
        records |= trained
    if args.train_only:
        return 0
    start = time.perf_counter()
    table = evaluate_runs(runs, test, climate=seen)  # extremes relative to the seen dates
    evaluate_seconds = time.perf_counter() - start
    scores = ["crps", "crps_skill", "crps_extreme_skill", "crps_efi_skill", "spread_skill"]
    summary = table.groupby("model")[[c for c in scores if c in table]].mean()
    by_lead = table.pivot_table(index="lead_days", columns="model", values="crps_skill")
    with pd.option_context("display.width", 160):
        print(f"test dates: {test.sizes['time']}, evaluation {evaluate_seconds:.1f} s")
        print(summary.sort_values("crps").round(4).to_string())
        print("\nCRPS skill against the raw full ensemble, by lead time (days):")
        print(by_lead.round(3).to_string())
        print("\ntraining (peak memory: the training process, the loaded data set included):")
        print(pd.DataFrame(records).T.round(1).to_string())
    write_report(
        args.out,
        "weather_postprocess",
        table.to_dict("records"),
        training=records,
        evaluate_seconds=evaluate_seconds,
        peak_rss_mib=_peak_rss_mib(),
        data=str(args.data),
        loss_scale=args.loss_scale,
        test_dates=int(test.sizes["time"]),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
