"""Sweeps: several runs of one configuration that differ in seed and learning rate only.

A sweep is given on the command line (:func:`add_sweep_arguments`: ``--seeds`` and a
comma-separated ``--lr``; :func:`sweep_runs` makes one configuration and run folder of
each), checked once (:func:`check_sweep`: one folder of its own per run, and runs that
differ in nothing but their seed and learning rate, whichever workflow's configurations
they are), and trained with the loop, :func:`sciml.training.loop.fit_runs`: one run
through :func:`sciml.training.fit`, several fused through :func:`sciml.training.fit_fused`
(the same driver, one batched step for all). Kept free of heavy imports: a command's
``--help`` imports this module.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sciml.cli_args import comma_list, non_negative_int, positive_float, sweep_option
from sciml.training.config import TrainConfig

if TYPE_CHECKING:
    from torch.utils.data import Dataset

__all__ = [
    "add_sweep_arguments",
    "check_steps",
    "check_sweep",
    "datasets_per_run",
    "per_run",
    "sweep_runs",
]

_Config = TypeVar("_Config")


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """``--seeds`` and a comma-separated ``--lr`` on a training command (:func:`sweep_runs`)."""
    sweep_option(parser, "lr", positive_float)
    parser.add_argument(
        "--seeds",
        type=comma_list(non_negative_int),
        help="comma-separated seeds: one run each, trained together (fused), in "
        "<run-dir>/seed<S> (with several --lr: <run-dir>/seed<S>-lr<LR>)",
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


def _differences(config: Any, first: Any, where: str = "") -> list[str]:
    """The fields in which two runs of a sweep differ, but for seed, ``lr`` and ``progress``."""
    free: tuple[str, ...]
    if isinstance(config, TrainConfig):
        free = ("seed", "progress")
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        free = ("lr",)
    else:
        return [] if config == first else [where]
    found = []
    for field in dataclasses.fields(config):
        mine, theirs = getattr(config, field.name), getattr(first, field.name)
        if field.name not in free and mine != theirs:
            nested = isinstance(mine, TrainConfig) and isinstance(theirs, TrainConfig)
            name = f"{where}.{field.name}".strip(".")
            found += _differences(mine, theirs, name) if nested else [name]
    return found


def check_sweep(
    configs: Sequence[Any], run_dirs: Sequence[Path | str], *, label: str = "configs[{}]"
) -> None:
    """Refuse a sweep of other than one folder of its own per run, or whose runs differ in more.

    The one check of every sweep: the runs may differ in their seed (the ``seed`` of a
    :class:`~sciml.training.TrainConfig`, alone or nested in a workflow's configuration),
    their learning rate (a workflow configuration's ``lr``) and whether they show a bar.

    Args:
        configs: The runs' configurations: each a :class:`~sciml.training.TrainConfig`,
            or a workflow's dataclass that nests one.
        run_dirs: The runs' folders.
        label: How messages name run ``k``'s configuration (``label.format(k)``).

    Raises:
        ValueError: Naming the counts, the folder given twice, or the first configuration
            that differs and where.
    """
    if len(configs) != len(run_dirs) or not configs:
        raise ValueError(
            f"give one run folder per configuration, got {len(configs)} configuration(s) "
            f"and {len(run_dirs)} folder(s)"
        )
    if len({Path(d).resolve() for d in run_dirs}) != len(run_dirs):
        raise ValueError(f"each run needs a run_dir of its own, got {list(map(str, run_dirs))}")
    for k, config in enumerate(configs):
        differ = _differences(config, configs[0])
        if differ:
            raise ValueError(
                f"{label.format(k)} differs from {label.format(0)} in more than its seed and "
                f"learning rate ({', '.join(differ)}): the runs of one sweep take the same "
                "steps and share everything else"
            )


def per_run(name: str, value: Sequence[Any], count: int) -> list[Any]:
    """``value`` (a list or tuple of one per run) as a list; refused unless it holds ``count``."""
    if len(value) != count:
        raise ValueError(
            f"{name} must be one for all runs or {count} (one per run), got {len(value)}"
        )
    return list(value)


def datasets_per_run(name: str, value: Any, count: int) -> list[Any]:
    """A dataset for each of ``count`` runs: one shared, or a list or tuple of one per run.

    A list of datasets (or ``None``) is one per run; any other list is itself one dataset
    (a plain list of samples), shared.
    """
    from torch.utils.data import Dataset

    if isinstance(value, list | tuple) and all(v is None or isinstance(v, Dataset) for v in value):
        return per_run(name, value, count)
    return [value] * count


def check_steps(datasets: Sequence[Dataset[Any]]) -> None:
    """Refuse training sets of different lengths: fused runs take the same steps."""
    from sciml.training.setup import dataset_length

    lengths = [dataset_length(f"train_dataset[{k}]", d) for k, d in enumerate(datasets)]
    if len(set(lengths)) > 1:
        raise ValueError(
            f"the runs' training sets hold {lengths} samples: fused runs take the same steps, "
            "so each run's set needs as many samples"
        )
