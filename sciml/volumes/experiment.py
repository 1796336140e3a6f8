"""The hybrid-parallel papers' accuracy claim in miniature: larger volumes, better parameters.

Oyama et al. (TPDS 2021) and the CosmoFlow papers train on whole large
volumes (instead of cropping them) because a larger volume holds more of the
field's structure: with the same number of training samples, CosmoFlow
predicts the parameters better. :func:`volume_size_run` trains the network
on generated volumes of one edge and scores it on held-out test volumes;
:func:`volume_size_experiment` repeats it over edges and seeds, the seeds of an
edge trained together (:func:`volume_size_seeds`, fused).

Three data sets per run, each from its own data seed: the training volumes
(``1000 + seed``), the validation volumes (``2000 + seed``) that pick the
best epoch (``checkpoints/best.pt``, by validation loss) and nothing else,
and the test volumes (``3000 + seed``) on which the errors are reported.
Each row also holds two references scored on the same test volumes: the
best constant prediction (the training targets' median, per parameter) and
a classical estimator fitted on the same training volumes
(:func:`sciml.volumes.reference.reference_errors`), which shows how much
the statistics of each volume size tell about the parameters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import xarray as xr

from sciml.distributed import init_distributed, torch_threads
from sciml.io_utils import atomic_write_text
from sciml.training import TrainConfig, TrainResult
from sciml.training.checkpoint import read_checkpoint, restore_checkpoint
from sciml.volumes.config import VolumeTraining
from sciml.volumes.data import PARAMS, write_cosmology
from sciml.volumes.dataset import ShardedVolumes
from sciml.volumes.reference import reference_errors
from sciml.volumes.train import build_model, train_volumes_fused
from sciml.volumes.volume_record import recorded_stats

__all__ = ["SizeRecipe", "volume_size_experiment", "volume_size_run", "volume_size_seeds"]

#: Offsets of the data seeds of the three sets from the run's seed.
DATA_SEEDS = {"train": 1000, "val": 2000, "test": 3000}


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class SizeRecipe:
    """The data sets and training of one run; the same at every volume edge.

    Attributes:
        samples: Training volumes (the same number at every edge).
        val_samples: Validation volumes (choose the best epoch).
        test_samples: Test volumes (the reported errors).
        epochs: Training epochs.
        batch_size: Volumes per optimiser step.
        width: Filters of CosmoFlow's first convolution (3 blocks).
        lr: Peak learning rate (SGD with momentum 0.9, as MLPerf HPC).
        warmup_epochs: Epochs of linear warm-up.
        decay_epochs: Epochs at which the learning rate is divided by 4.
    """

    samples: int = 256
    val_samples: int = 64
    test_samples: int = 128
    epochs: int = 30
    batch_size: int = 8
    width: int = 8
    lr: float = 0.05
    warmup_epochs: int = 2
    decay_epochs: tuple[int, ...] = (20, 26)

    def __post_init__(self) -> None:
        """Reject bad counts, a learning rate that is not > 0 or a schedule beyond the epochs."""
        for name in ("samples", "val_samples", "test_samples", "epochs", "batch_size", "width"):
            _require_int(f"SizeRecipe.{name}", getattr(self, name), 1)
        _require_int("SizeRecipe.warmup_epochs", self.warmup_epochs, 0)
        lr = self.lr
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not 0 < lr < math.inf:
            raise ValueError(f"SizeRecipe.lr must be a finite number > 0, got {lr!r}")
        epochs = list(self.decay_epochs)
        if epochs != sorted(set(epochs)) or not all(1 <= e < self.epochs for e in epochs):
            raise ValueError(
                f"SizeRecipe.decay_epochs must be increasing epochs in [1, {self.epochs}), "
                f"got {self.decay_epochs!r}"
            )
        if not self.warmup_epochs < self.epochs:
            raise ValueError(
                f"SizeRecipe.warmup_epochs ({self.warmup_epochs}) must be below epochs "
                f"({self.epochs})"
            )


def _check_store(path: Path, *, samples: int, size: int, seed: int) -> None:
    """Refuse a store left by a run of another recipe, edge or seed (it would be reused)."""
    with xr.open_zarr(path) as ds:
        found = (ds.sizes.get("sample"), ds.sizes.get("x"), ds.attrs.get("seed"))
    if found != (samples, size, seed):
        raise ValueError(
            f"{path} holds {found[0]} volumes of edge {found[1]} from data seed {found[2]}, "
            f"this run needs {samples} of edge {size} from seed {seed}: remove it or choose "
            "another folder"
        )


def _data(folder: Path, *, size: int, seed: int, recipe: SizeRecipe) -> dict[str, Path]:
    """The three stores of a run (written once, then checked and reused; whole-volume chunks)."""
    counts = {"train": recipe.samples, "val": recipe.val_samples, "test": recipe.test_samples}
    paths = {}
    for name, offset in DATA_SEEDS.items():
        paths[name] = path = folder / f"{name}.zarr"
        if path.exists():
            _check_store(path, samples=counts[name], size=size, seed=offset + seed)
        else:
            write_cosmology(path, samples=counts[name], size=size, seed=offset + seed, chunks=size)
    return paths


def _record_recipe(folder: Path, recipe: SizeRecipe) -> None:
    """Write ``recipe.json``, or refuse a folder whose run used another recipe (it would resume)."""
    path = folder / "recipe.json"
    wanted = asdict(recipe) | {"decay_epochs": list(recipe.decay_epochs)}
    if path.exists():
        found = json.loads(path.read_text())
        changed = sorted(k for k in wanted.keys() | found.keys() if found.get(k) != wanted.get(k))
        if changed:
            raise ValueError(
                f"{folder} holds a run of another recipe ({', '.join(changed)} differ: "
                f"{ {k: found.get(k) for k in changed} }, this run has "
                f"{ {k: wanted.get(k) for k in changed} }); remove it or choose another folder"
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(wanted, indent=1))


def _options(seed: int, recipe: SizeRecipe) -> VolumeTraining:
    config = TrainConfig(
        epochs=recipe.epochs,
        batch_size=recipe.batch_size,
        seed=seed,
        progress=False,
        tensorboard=False,
        handle_signals=False,
    )
    return VolumeTraining(
        "cosmoflow",
        config=config,
        lr=recipe.lr,
        width=recipe.width,
        levels=3,
        warmup_epochs=recipe.warmup_epochs,
        decay_epochs=recipe.decay_epochs,
    )


def _test_errors(run_dir: Path, test: Path, options: VolumeTraining) -> np.ndarray:
    """Absolute errors ``(samples, 4)`` of the best checkpoint on the test volumes."""
    stats = recorded_stats(run_dir)
    if stats is None:
        raise FileNotFoundError(f"{run_dir} holds no run record: train it first")
    data = ShardedVolumes(test, target="params", stats=stats)
    model = build_model(options, len(data.channels()), len(PARAMS))
    path = run_dir / "checkpoints" / "best.pt"
    restore_checkpoint(path, read_checkpoint(path), model, restore_rng=False)
    model.eval()
    errors = []
    with torch.no_grad():
        for i in range(len(data)):
            volume, target = data[i]
            errors.append((model(volume[None])[0] - target).abs().double().numpy())
    return np.stack(errors)


def _baseline(train: Path, test: Path) -> np.ndarray:
    """Mean absolute test error per parameter of the training targets' median."""
    with xr.open_zarr(train) as ds_train, xr.open_zarr(test) as ds_test:
        median = np.median(ds_train["params"].values.astype(np.float64), axis=0)
        return np.abs(ds_test["params"].values.astype(np.float64) - median).mean(0)


def _check_call(size: object, seeds: Sequence[object], recipe: object) -> SizeRecipe:
    """The recipe (default if ``None``); bad arguments refused before anything is written."""
    recipe = SizeRecipe() if recipe is None else recipe
    if not isinstance(recipe, SizeRecipe):
        raise TypeError(f"recipe must be a SizeRecipe or None, got {type(recipe).__name__}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 8:
        raise ValueError(f"size must be an integer >= 8 (3 pooling blocks), got {size!r}")
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    for seed in seeds:
        _require_int("seed", seed, 0)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must differ from each other, got {list(seeds)}")
    return recipe


def _row(
    size: int, seed: int, result: TrainResult, errors: dict[str, np.ndarray]
) -> dict[str, float]:
    best = min(result.history, key=lambda row: row["val_loss"])
    row: dict[str, float] = {
        "size": size,
        "seed": seed,
        "best_epoch": best["epoch"],
        "val_mae": best["val_mae"],
    }
    for name, values in errors.items():
        row[f"{name}_mae"] = float(values.mean())
        row.update({f"{name}_mae_{p}": float(v) for p, v in zip(PARAMS, values, strict=True)})
    return row


def volume_size_seeds(
    folder: Path | str, *, size: int, seeds: Sequence[int], recipe: SizeRecipe | None = None
) -> list[dict[str, float]]:
    """Train CosmoFlow on volumes of edge ``size``, once per seed, and score it on test volumes.

    The seeds' runs train together in one process on one torch thread, fused
    (:func:`sciml.volumes.train.train_volumes_fused`): each run reads its own data sets and
    writes what its separate run writes. Each run's data and run folder are
    ``folder/size{size}-seed{seed}``: a second call with the same recipe reuses the data
    and resumes the runs (to the same result), one with another recipe is refused.

    Args:
        folder: Where the runs' data and run folders go.
        size: Volume edge in voxels (>= 8: CosmoFlow has 3 pooling blocks).
        seeds: Seeds of the networks and of their data sets (module docstring).
        recipe: Data set sizes and training (default: :class:`SizeRecipe`).

    Returns:
        One row per seed, in the order of ``seeds``: ``size``, ``seed``, ``best_epoch``
        (1-based), ``val_mae`` there, the mean absolute test error of the scaled
        parameters (in [-1, 1]) overall (``test_mae``) and per parameter
        (``test_mae_sigma`` ...), and the same for the constant prediction
        (``baseline_...``) and the classical estimator (``reference_...``).

    Raises:
        ValueError: If ``size`` is below 8, a seed is negative or repeated, or a run's
            folder holds a run of another recipe (``recipe.json``) or a data set of other
            samples, edge or seed than this run's.
    """
    recipe = _check_call(size, seeds, recipe)
    folders = [Path(folder) / f"size{size}-seed{seed}" for seed in seeds]
    paths = []
    for data, seed in zip(folders, seeds, strict=True):
        _record_recipe(data, recipe)
        paths.append(_data(data, size=size, seed=seed, recipe=recipe))
    options = [_options(seed, recipe) for seed in seeds]
    with torch_threads(1), init_distributed(backend="gloo"):
        results = train_volumes_fused(
            [p["train"] for p in paths],
            options,
            [data / "run" for data in folders],
            vals=[p["val"] for p in paths],
        )
        tests = [
            _test_errors(data / "run", p["test"], opts).mean(0)
            for data, p, opts in zip(folders, paths, options, strict=True)
        ]
    return [
        _row(
            size,
            seed,
            result,
            {
                "test": test,
                "baseline": _baseline(p["train"], p["test"]),
                "reference": np.array(list(reference_errors(p["train"], p["test"]).values())),
            },
        )
        for seed, result, test, p in zip(seeds, results, tests, paths, strict=True)
    ]


def volume_size_run(
    folder: Path | str, *, size: int, seed: int, recipe: SizeRecipe | None = None
) -> dict[str, float]:
    """:func:`volume_size_seeds` for one seed: its row."""
    return volume_size_seeds(folder, size=size, seeds=[seed], recipe=recipe)[0]


def volume_size_experiment(
    folder: Path | str,
    *,
    sizes: Sequence[int] = (8, 16, 32),
    seeds: Sequence[int] = (0, 1, 2),
    recipe: SizeRecipe | None = None,
) -> list[dict[str, float]]:
    """:func:`volume_size_seeds` for every edge in ``sizes`` (its seeds fused); one row each."""
    for size in sizes:
        _check_call(size, seeds, recipe)
    return [
        row
        for size in sizes
        for row in volume_size_seeds(folder, size=size, seeds=seeds, recipe=recipe)
    ]
