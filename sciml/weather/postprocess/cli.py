"""``sciml weather train|evaluate``: train post-processing models and score them on test data."""

from __future__ import annotations

import argparse

from sciml.cli_args import Subparsers, add_config_arguments, positive_float, runs_and_test_data
from sciml.training.sweeps import add_sweep_arguments, sweep_runs
from sciml.weather.options import add_memory_limit, block_dates
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.registry import MODELS

__all__ = ["register_postprocess"]


def _cmd_train(args: argparse.Namespace) -> int:
    from sciml.distributed import init_distributed, print0
    from sciml.training import EXIT_REQUEUE
    from sciml.weather.data import asked_for, open_ensemble
    from sciml.weather.postprocess.train import train_postprocessors

    with init_distributed() as ctx:
        configs, folders = sweep_runs(args, PostprocessConfig)
        statuses = train_postprocessors(
            open_ensemble(args.data, checked=asked_for(args.variables)),
            configs,
            folders,
            device=ctx.device,
            memory_limit=args.memory_limit,
        )
        for run, status, folder in zip(configs, statuses, folders, strict=True):
            print0(f"{run.model} on {run.members} members: {status}, run folder {folder}")
    return EXIT_REQUEUE if "interrupted" in statuses else 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from pathlib import Path

    import pandas as pd

    from sciml.io_utils import atomic_write_text, markdown_table
    from sciml.weather.data import open_ensemble
    from sciml.weather.postprocess.evaluate import score_runs
    from sciml.weather.postprocess.evaluate_report import SUMMARY, describe, write_evaluation
    from sciml.weather.postprocess.record import RUN_CONFIG

    runs, test_data = runs_and_test_data(args.run_dir, args.test_data, marker=RUN_CONFIG)
    climate = open_ensemble(args.climate) if args.climate else None
    evaluation = score_runs(
        runs,
        open_ensemble(test_data),
        climate=climate,
        extreme_fraction=args.extreme_fraction,
        data=f"the test data ({', '.join(test_data)})",
        block_dates=args.block_dates,
    )
    summary = evaluation.table[[c for c in SUMMARY if c in evaluation.table]]
    print(describe(evaluation))
    with pd.option_context("display.width", 250, "display.max_rows", None):
        print(summary.round(5).to_string(index=False))
    written = write_evaluation(evaluation, json=args.json, csv=args.csv, figures=args.figures)
    if args.markdown:
        rows = summary.astype(object).where(summary.notna(), "").to_numpy().tolist()
        table = markdown_table(list(summary.columns), rows, floats=".4g")
        atomic_write_text(args.markdown, f"{describe(evaluation)}\n\n{table}\n")
        written.append(Path(args.markdown))
    for path in written:
        print(f"wrote {path}")
    return 0


def _register_train(sub: Subparsers) -> None:
    train = sub.add_parser(
        "train",
        help=f"train a post-processing model ({', '.join(MODELS)}) on an ensemble with a truth",
        description="The last --validation fraction of the start dates validates a deep "
        "model (EMOS fits on every date); test on another file with 'sciml weather "
        "evaluate'. On SIGUSR1/SIGTERM a deep model checkpoints and the command exits with 3; "
        "the same command resumes it.",
    )
    train.add_argument("data", nargs="+", help="ensemble file(s) with <variable>_truth")
    train.add_argument("--run-dir", required=True, help="run folder (resumed when it exists)")
    add_config_arguments(train, PostprocessConfig)
    add_sweep_arguments(train)
    add_memory_limit(train)
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_cmd_train)


def _register_evaluate(sub: Subparsers) -> None:
    evaluate = sub.add_parser(
        "evaluate",
        help="score runs against the raw full and k-member ensembles on test data",
        description="One row per model, variable, level and lead time: CRPS (and which "
        "one), CRPS skill against the raw full ensemble, the EFI-weighted CRPS and the CRPS "
        "on the most extreme events (and their skills), RMSE, spread-skill and the rank/PIT "
        "histogram's distance from flat. Runs that differ only by seed are averaged "
        "(<score>_std columns) and keep their own rows.",
    )
    evaluate.add_argument(
        "test_data",
        nargs="*",
        help="test ensemble file(s) with truth (or the paths after the run folders of --run-dir)",
    )
    evaluate.add_argument(
        "--run-dir", nargs="+", required=True, help="run folder(s) of 'sciml weather train'"
    )
    evaluate.add_argument(
        "--climate",
        nargs="+",
        help="ensemble file(s) with truth of other start dates (e.g. the training data) that "
        "define the model climate and the truth's climatology; unset: the test dates",
    )
    evaluate.add_argument(
        "--extreme-fraction",
        type=positive_float,
        default=0.05,
        help="share of each row's points (largest |anomaly| of the truth) that are extreme",
    )
    evaluate.add_argument(
        "--block-dates",
        type=block_dates,
        metavar="N",
        help="start dates read, predicted and scored at a time (the same scores; memory set "
        "by the block); default: about 32 MiB of ensemble in float64 per block; 0: the whole "
        "file at once. The extremes' climates use a scratch folder in TMPDIR of about the "
        "ensembles' size",
    )
    evaluate.add_argument("--json", help="also write the table as JSON here")
    evaluate.add_argument("--csv", help="also write the table as CSV here")
    evaluate.add_argument("--markdown", help="also write the summary as a Markdown table here")
    evaluate.add_argument(
        "--figures", help="folder for the rank/PIT histograms and CRPS-skill figures"
    )
    evaluate.set_defaults(func=_cmd_evaluate)


def register_postprocess(sub: Subparsers) -> None:
    """Add ``train`` and ``evaluate`` to the ``sciml weather`` subcommands."""
    _register_train(sub)
    _register_evaluate(sub)
