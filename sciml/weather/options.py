"""The names and shared option pieces of the weather commands, kept free of heavy imports.

``sciml weather ... --help`` lists them without importing torch, xarray or pandas; the
modules that implement each option import their names from here, and the configurations
(:mod:`sciml.weather.postprocess.config`, :mod:`sciml.weather.spread.options`) their shared
training options and their run-record form.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from sciml.cli_args import (
    byte_size,
    comma_list,
    nested,
    non_negative_int,
    option,
    positive_float,
    positive_int,
    sweep_option,
)
from sciml.training.config import TrainConfig
from sciml.training.runs.record import SHOWN_FIELDS

__all__ = [
    "DATA_KEY",
    "DEEP_MODELS",
    "LOSS_SCALES",
    "MISSING",
    "MODELS",
    "SPREAD_LOSSES",
    "add_memory_limit",
    "add_sweep_arguments",
    "check_sweep",
    "config_from_record",
    "config_record",
    "run_records",
    "sweep_runs",
    "train_field",
]

#: The deep post-processors of :mod:`sciml.weather.postprocess.train` (they read the lead time).
DEEP_MODELS = ("mlp", "unet", "mixed", "pooled")

#: Every post-processor ``sciml weather train --model`` trains.
MODELS = ("emos", *DEEP_MODELS)

#: ``"raw-crps"``: each channel's and lead time's CRPS divided by the raw ensemble's;
#: ``"none"``: the plain mean CRPS in normalised units (:mod:`.postprocess.loss_scale`).
LOSS_SCALES = ("raw-crps", "none")

#: What a post-processing run does with points missing (NaN) in a forecast, its truth or a
#: static field: ``"refuse"`` the data before anything is written, or ``"mask"`` them
#: (left out of the loss and the scores, predicted as missing).
MISSING = ("refuse", "mask")

#: The spread predictor's losses against the full ensemble's spread (:mod:`sciml.weather.spread`).
SPREAD_LOSSES = ("l1", "mse", "log_l1", "crps")

#: Key of the training data's record (:func:`sciml.weather.grid.data_record`) in a run's
#: configuration.
DATA_KEY = "data"

_Config = TypeVar("_Config")


def train_field(batch_help: str, **defaults: Any) -> Any:
    """The ``train`` field of a weather configuration: epochs, batch size and seed as options.

    The default loop logs no TensorBoard files; its other options are ``defaults`` (e.g.
    ``epochs=30``), else :class:`~sciml.training.TrainConfig`'s.
    """
    return dataclasses.field(
        default_factory=lambda: TrainConfig(tensorboard=False, **defaults),
        metadata=nested(
            epochs=option("training epochs", type=positive_int),
            batch_size=option(batch_help, type=positive_int),
            seed=option("seed of the run", type=non_negative_int),
        ),
    )


def config_record(config: object) -> dict[str, Any]:
    """``config`` as its run record keeps it: the nested ``train`` without what it only shows.

    The loop's resumable fields (:data:`~sciml.training.runs.record.RESUMABLE_FIELDS`: epochs,
    checkpoint_every) are kept, and a resumed run may change them (the record takes them).
    """
    record: dict[str, Any] = dataclasses.asdict(config)  # type: ignore[call-overload]
    record["train"] = {k: v for k, v in record["train"].items() if k not in SHOWN_FIELDS}
    return record


def run_records(
    configs: Sequence[Any], data: dict[str, Any], run_dirs: Sequence[Path], kind: Any
) -> list[dict[str, Any]]:
    """Each run's record: its configuration (:func:`config_record`) and ``data``'s record.

    A folder that holds a record from before runs recorded the data's units and the
    missing-value policy (``missing``) gets a record without them, as long as the policy
    is the one those runs had (``"refuse"``): such a run resumes as it was recorded. A
    folder without a readable record gets the full record (the claim of the folder refuses
    a damaged one, or one of another kind or format, in its own terms).

    Args:
        configs: The runs' configurations.
        data: What the data decided (:func:`sciml.weather.grid.data_record`).
        run_dirs: The runs' folders.
        kind: Their :class:`~sciml.training.runs.record.RecordKind`.
    """
    from sciml.training.runs.record import RunRecordError, read_run_record

    records = []
    for config, run_dir in zip(configs, run_dirs, strict=True):
        record = config_record(config) | {DATA_KEY: data}
        try:
            saved = read_run_record(run_dir, kind)
        except (FileNotFoundError, RunRecordError):
            saved = None
        if saved is not None and "missing" not in saved and record.get("missing") == "refuse":
            del record["missing"]
        if saved is not None and "units" not in saved.get(DATA_KEY, {}):
            record[DATA_KEY] = {key: value for key, value in data.items() if key != "units"}
        records.append(record)
    return records


def config_from_record(config: type[_Config], record: dict[str, Any], where: str) -> _Config:
    """The ``config`` dataclass of a record written by :func:`config_record`.

    Args:
        config: The configuration's dataclass.
        record: The record's configuration.
        where: The record's file (in its run folder), for messages.

    Raises:
        ValueError: The record's fields are not ``config``'s (a run of another format), or
            a value ``config`` refuses (a record edited by hand): the file and ``--run-dir``
            named.
    """
    expected = {f.name for f in dataclasses.fields(config)}  # type: ignore[arg-type]
    if set(record) != expected:
        raise ValueError(
            f"{where} holds a run of another format (missing {sorted(expected - set(record))}, "
            f"unknown {sorted(set(record) - expected)}); this version of sciml cannot rebuild it"
        )
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items()}
    try:
        loop = TrainConfig(tensorboard=False, **record["train"])
        return config(**values | {"train": loop})
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{where}, the run record of --run-dir {Path(where).parent}, holds a value this "
            f"version of sciml refuses ({err}); it was edited or damaged: restore the file "
            "as the run wrote it, or retrain in a new --run-dir"
        ) from None


def add_memory_limit(parser: argparse.ArgumentParser) -> None:
    """``--memory-limit`` on a training command: data up to it are read into memory.

    A runtime option (not part of the run's record): a resumed run may change it.
    """
    parser.add_argument(
        "--memory-limit",
        type=byte_size,
        default="1GiB",
        metavar="SIZE",
        help="training (and validation) dates up to this size are read into memory, larger "
        "ones streamed a chunk of the file at a time, read ahead (e.g. 512MiB, 2GiB; 0: always "
        "stream); the run says which path it took and why (its reads.json keeps it); a "
        "resumed run may change it",
    )


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """``--seeds`` and a comma-separated ``--lr`` on a training command (:func:`sweep_runs`)."""
    sweep_option(parser, "lr", positive_float)
    parser.add_argument(
        "--seeds",
        type=comma_list(non_negative_int),
        help="comma-separated seeds: one run each, trained together (fused), in "
        "<run-dir>/seed<S> (with several --lr: <run-dir>/seed<S>-lr<LR>)",
    )


def _sweep_free(config: Any) -> Any:
    """``config`` without what a sweep varies (seed, learning rate, progress bar)."""
    loop = dataclasses.replace(config.train, seed=0, progress=False)
    return dataclasses.replace(config, lr=1.0, train=loop)


def check_sweep(configs: Sequence[Any], run_dirs: Sequence[Path | str]) -> None:
    """Refuse a sweep of other than one folder per run, or whose runs differ in more.

    The runs of one sweep may differ in ``train.seed`` and ``lr`` only.

    Raises:
        ValueError: Naming the counts, or the first configuration that differs.
    """
    if len(configs) != len(run_dirs) or not configs:
        raise ValueError(
            f"give one run folder per configuration, got {len(configs)} configuration(s) "
            f"and {len(run_dirs)} folder(s)"
        )
    for k, config in enumerate(configs):
        if _sweep_free(config) != _sweep_free(configs[0]):
            raise ValueError(
                f"configuration {k} differs from configuration 0 in more than train.seed and "
                "lr: the runs of one sweep share everything else"
            )


def sweep_runs(
    args: argparse.Namespace, config_type: type[_Config]
) -> tuple[list[_Config], list[Path]]:
    """The configurations of ``--seeds`` and ``--lr``, each with its folder under ``--run-dir``.

    ``--lr`` is a :func:`sciml.cli_args.sweep_option`; ``--quiet`` turns the bar off. One
    seed and one rate without ``--seeds``: the one run, in ``--run-dir`` itself.
    Otherwise ``seed<S>``, ``lr<LR>`` or ``seed<S>-lr<LR>`` under it, for what varies.

    Raises:
        ValueError: ``--seed`` and ``--seeds`` both given (a ``--seed`` of the default
            value cannot be told from none).
    """
    from sciml.cli_args import config_from_args

    first = config_from_args(config_type, argparse.Namespace(**{**vars(args), "lr": args.lr[0]}))
    loop = dataclasses.replace(first.train, progress=not args.quiet)  # type: ignore[attr-defined]
    config = dataclasses.replace(first, train=loop)  # type: ignore[type-var]
    root, rates = Path(args.run_dir), tuple(args.lr)
    if args.seeds is not None and args.seed != TrainConfig().seed:
        raise ValueError("give --seed (one run) or --seeds (several), not both")
    if args.seeds is None and len(rates) == 1:
        return [config], [root]
    configs, folders = [], []
    for seed in args.seeds or (config.train.seed,):  # type: ignore[attr-defined]
        for rate in rates:
            parts = [f"seed{seed}"] if args.seeds is not None else []
            parts += [f"lr{rate:g}"] if len(rates) > 1 else []
            loop = dataclasses.replace(config.train, seed=seed)  # type: ignore[attr-defined]
            configs.append(dataclasses.replace(config, lr=rate, train=loop))  # type: ignore[type-var]
            folders.append(root / "-".join(parts))
    return configs, folders
