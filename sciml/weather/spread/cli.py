"""``sciml weather spread train|evaluate``: predict the full ensemble's spread from k members."""

from __future__ import annotations

import argparse

from sciml.cli_args import Subparsers, add_config_arguments
from sciml.training.sweeps import add_sweep_arguments, sweep_runs
from sciml.weather.options import add_memory_limit
from sciml.weather.spread.config import SpreadConfig

__all__ = ["register_spread"]


def _cmd_train(args: argparse.Namespace) -> int:
    from sciml.distributed import init_distributed, print0
    from sciml.training import EXIT_REQUEUE
    from sciml.weather.data import asked_for, open_ensemble
    from sciml.weather.spread.train import train_spreads

    with init_distributed() as ctx:
        configs, folders = sweep_runs(args, SpreadConfig)
        data = open_ensemble(args.data, checked=asked_for(args.variables))
        statuses = train_spreads(
            data, configs, folders, device=ctx.device, memory_limit=args.memory_limit
        )
        for config, status, folder in zip(configs, statuses, folders, strict=True):
            print0(
                f"spread from {config.members} members, {config.history} lead time(s), "
                f"{config.loss} loss: {status}, run folder {folder}"
            )
    return EXIT_REQUEUE if "interrupted" in statuses else 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import pandas as pd

    from sciml.cli_args import runs_and_test_data
    from sciml.io_utils import atomic_write_text
    from sciml.weather.data import open_ensemble
    from sciml.weather.spread.evaluate import evaluate_spread
    from sciml.weather.spread.record import RUN_CONFIG

    runs, test_data = runs_and_test_data(args.run_dir, args.test_data, marker=RUN_CONFIG)
    table = evaluate_spread(
        runs, open_ensemble(test_data), data=f"the test data ({', '.join(test_data)})"
    )
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(table.round(5).to_string(index=False))
    if args.json:
        text = table.to_json(orient="records", indent=1, double_precision=15)
        atomic_write_text(args.json, text)
        print(f"wrote {args.json}")
    return 0


def _add_train(sub: Subparsers) -> None:
    train = sub.add_parser(
        "train",
        help="train a 3-D U-Net to predict the full ensemble's spread from k members",
        description="The last --validation fraction of the start dates validates; test on "
        "another file with 'sciml weather spread evaluate'. Under torchrun or srun it trains "
        "data-parallel (--batch-size per rank). On SIGUSR1/SIGTERM the run checkpoints and "
        "the command exits with 3; the same command resumes it.",
    )
    train.add_argument("data", nargs="+", help="ensemble file(s) with <variable>_truth")
    train.add_argument("--run-dir", required=True, help="run folder (resumed when it exists)")
    add_config_arguments(train, SpreadConfig)
    add_sweep_arguments(train)
    add_memory_limit(train)
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_cmd_train)


def register_spread(sub: Subparsers) -> None:
    """Add ``spread`` with ``train`` and ``evaluate`` to the ``sciml weather`` commands."""
    spread = sub.add_parser(
        "spread", help="predict the full ensemble's spread from a few members (3-D U-Net)"
    )
    commands = spread.add_subparsers(dest="spread_command", metavar="COMMAND", required=True)
    _add_train(commands)
    evaluate = commands.add_parser(
        "evaluate",
        help="correlation and RMSE of predicted spreads against the full ensemble's",
        description="One row per model, variable, level and lead time: the correlation (over "
        "start dates and grid points) with the full ensemble's standard deviation and the "
        "RMSE against it, for the k-member sample spread (sample_k) and for each run.",
    )
    evaluate.add_argument(
        "test_data",
        nargs="*",
        help="test ensemble file(s) (or the paths after the run folders of --run-dir)",
    )
    evaluate.add_argument(
        "--run-dir", nargs="+", required=True, help="run folder(s) of 'sciml weather spread train'"
    )
    evaluate.add_argument("--json", help="also write the table as JSON here")
    evaluate.set_defaults(func=_cmd_evaluate)
