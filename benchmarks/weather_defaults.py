"""Do ``sciml weather train``'s defaults beat EMOS? Chosen on validation dates, tested on others.

Usage: python benchmarks/weather_defaults.py DATA [DATA ...] --stage select|test
       [--candidates MODEL:LR:EPOCHS ...] [--members 5] [--seeds 0,1,2] [--work DIR]
       [--out PATH]

Each DATA is a draw of the evaluation preset (``sciml weather preset qg-imperfect-v1
--seed S --out DATA``, a seed the repository does not use), split by ``sciml weather split``
(60 / 20 / 20 % of the start dates, in time order). Everything runs through the command
line, as a user runs it:

* ``--stage select`` trains each candidate (``--model``, ``--lr``, ``--epochs``; its seeds
  fused, ``--seeds``) and EMOS on ``--members`` members on the training dates alone and
  scores them on the validation dates: where the defaults are chosen. The test dates are
  not read.
* ``--stage test`` trains ``sciml weather train --members 5 --seeds ...`` with every other
  option left at its default, and EMOS on the same members, on the training and validation
  dates together, and scores them on the test dates, never seen before.

``sciml weather evaluate`` scores every run, the seeds' mean and the seeds combined into one
forecast (``<model>_5_combined``). Prints the mean CRPS over variables, levels and lead
times per model and the gains against EMOS on the same members (``vs_emos``) and the raw
full ensemble (``vs_raw_full``); writes every row as JSON. A finished stage's runs are
kept in ``--work`` and not trained again.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from _report import write_report

from sciml.cli import main as sciml


def _run(argv: list[str]) -> float:
    """``sciml ARGV``; its wall time in seconds."""
    start = time.perf_counter()
    if sciml(argv) != 0:
        raise RuntimeError(f"sciml {' '.join(argv)} failed")
    return time.perf_counter() - start


def _candidate(text: str) -> tuple[str, str, str]:
    try:
        model, lr, epochs = text.split(":")
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected MODEL:LR:EPOCHS, got {text!r}") from err
    return model, lr, epochs


def _train(folder: Path, data: list[Path], options: list[str]) -> float | None:
    """Train into ``folder`` unless it is there; the wall time, or None when kept."""
    if folder.exists():
        return None
    return _run(
        ["weather", "train", *map(str, data), *options, "--run-dir", str(folder), "--quiet"]
    )


def _draw(data: Path, args: argparse.Namespace) -> tuple[pd.DataFrame, dict[str, float]]:
    """One draw's stage: its runs trained, their scores and the training times."""
    work = Path(args.work) / data.stem
    split = work / "split"
    if not (split / "test.nc").exists():
        _run(["weather", "split", str(data), "--out", str(split)])
    if args.stage == "select":
        seen, scored, stage = [split / "train.nc"], split / "validation.nc", work / "select"
        runs = {
            f"{m}_lr{lr}_e{e}": ["--model", m, "--lr", lr, "--epochs", e, "--seeds", args.seeds]
            + ["--members", str(args.members)]
            for m, lr, e in args.candidates
        }
    else:
        seen = [split / "train.nc", split / "validation.nc"]
        scored, stage = split / "test.nc", work / "test"
        runs = {"default": ["--members", str(args.members), "--seeds", args.seeds]}
    runs["emos"] = ["--model", "emos", "--members", str(args.members)]
    seconds = {name: _train(stage / name, seen, options) for name, options in runs.items()}
    scores = stage / "scores.json"
    folders = [str(stage / name) for name in runs]
    _run(["weather", "evaluate", str(scored), "--run-dir", *folders, "--json", str(scores)])
    table = pd.read_json(scores).assign(draw=data.stem)
    return table, {k: v for k, v in seconds.items() if v is not None}


def summarise(table: pd.DataFrame, members: int) -> pd.DataFrame:
    """Per draw and model, the mean CRPS and the gains against EMOS and the raw full ensemble."""
    mean = table.groupby(["draw", "model"]).crps.mean().rename("crps").reset_index()
    full = f"raw_{table.members.max()}"
    rows = []
    for draw, part in mean.groupby("draw"):
        crps = part.set_index("model").crps
        rows += [
            {
                "draw": draw,
                "model": model,
                "crps": value,
                "vs_emos": 1 - value / crps[f"emos_{members}"],
                "vs_raw_full": 1 - value / crps[full],
            }
            for model, value in crps.sort_values().items()
        ]
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    """Run the stage on every draw, print the summary, write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+", type=Path, help="preset draws (netCDF with truth)")
    parser.add_argument("--stage", choices=("select", "test"), required=True)
    parser.add_argument(
        "--candidates",
        nargs="+",
        type=_candidate,
        default=[_candidate(c) for c in ("pooled:0.001:10", "pooled:0.003:10")],
        help="MODEL:LR:EPOCHS of each candidate (--stage select)",
    )
    parser.add_argument("--members", type=int, default=5, help="members the models see")
    parser.add_argument("--seeds", default="0,1,2", help="seeds of each deep model, fused")
    parser.add_argument("--work", default="runs/bench/weather_defaults", help="run folders")
    parser.add_argument("--out", default="runs/bench/weather_defaults.json", help="JSON report")
    args = parser.parse_args(argv)
    tables, seconds = [], {}
    for data in args.data:
        table, times = _draw(data, args)
        tables.append(table)
        seconds |= {f"{data.stem}/{name}": value for name, value in times.items()}
    table = pd.concat(tables, ignore_index=True)
    summary = summarise(table, args.members)
    with pd.option_context("display.width", 160, "display.max_rows", None):
        print(f"stage {args.stage}: mean CRPS over variables, levels and lead times")
        print(summary.round(4).to_string(index=False))
        print(f"training wall time (s): {seconds}")
    write_report(
        args.out,
        "weather_defaults",
        table.to_dict("records"),
        stage=args.stage,
        summary=summary.to_dict("records"),
        train_seconds=seconds,
        data=[str(d) for d in args.data],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
