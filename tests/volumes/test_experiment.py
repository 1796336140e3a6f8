"""sciml.volumes.experiment: the volume-size experiment, scored on a held-out test set."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from sciml.volumes.data import PARAMS, write_cosmology
from sciml.volumes.experiment import SizeRecipe, volume_size_experiment, volume_size_run

TINY = SizeRecipe(
    samples=8,
    val_samples=4,
    test_samples=6,
    epochs=3,
    batch_size=4,
    width=2,
    warmup_epochs=1,
    decay_epochs=(2,),
)


def test_a_run_picks_its_epoch_on_validation_and_reports_test_errors(tmp_path: Path) -> None:
    row = volume_size_run(tmp_path, size=8, seed=1, recipe=TINY)
    data = tmp_path / "size8-seed1"
    # three sets from three data seeds: the test volumes are none of the validation ones
    seeds = {
        name: xr.open_zarr(data / f"{name}.zarr").attrs["seed"] for name in ("train", "val", "test")
    }
    assert seeds == {"train": 1001, "val": 2001, "test": 3001}
    sizes = {name: xr.open_zarr(data / f"{name}.zarr").sizes["sample"] for name in seeds}
    assert sizes == {"train": 8, "val": 4, "test": 6}
    # the reported epoch is the one of lowest validation loss, with its validation error
    metrics = pd.read_csv(data / "run" / "metrics.csv")
    epochs = metrics[metrics.split == "epoch"].pivot_table(
        index="epoch", columns="metric", values="value"
    )
    assert len(epochs) == 3
    best = epochs.val_loss.idxmin()  # 0-based in the log, 1-based in the row
    assert row["best_epoch"] == best + 1
    assert row["val_mae"] == pytest.approx(epochs.loc[best, "val_mae"], rel=1e-12)
    # overall errors are the means of the per-parameter ones; the constant is the training median
    for kind in ("test", "baseline", "reference"):
        per = [row[f"{kind}_mae_{p}"] for p in PARAMS]
        assert row[f"{kind}_mae"] == pytest.approx(np.mean(per), rel=1e-12)
        assert all(0 <= e <= 2 for e in per)  # scaled parameters and predictions in [-1.2, 1.2]
    train = xr.open_zarr(data / "train.zarr")["params"].values.astype(np.float64)
    test = xr.open_zarr(data / "test.zarr")["params"].values.astype(np.float64)
    expected = np.abs(test - np.median(train, axis=0)).mean(0)
    np.testing.assert_allclose([row[f"baseline_mae_{p}"] for p in PARAMS], expected, rtol=1e-12)
    # the same call again reuses the folder and gives the same row; another recipe is refused
    assert volume_size_run(tmp_path, size=8, seed=1, recipe=TINY) == row
    with pytest.raises(ValueError, match=r"another recipe \(lr differ: \{'lr': 0.05\}"):
        volume_size_run(tmp_path, size=8, seed=1, recipe=dataclasses.replace(TINY, lr=0.1))


def test_an_edge_below_eight_or_a_bad_recipe_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size must be an integer >= 8"):
        volume_size_run(tmp_path, size=4, seed=0, recipe=TINY)
    with pytest.raises(ValueError, match="size must be an integer >= 8"):
        volume_size_experiment(tmp_path, sizes=(8.0,), seeds=(0,), recipe=TINY)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="SizeRecipe.samples must be an integer >= 1"):
        SizeRecipe(samples=0)
    with pytest.raises(ValueError, match="warmup_epochs .* must be below epochs"):
        SizeRecipe(epochs=2, warmup_epochs=2, decay_epochs=())
    with pytest.raises(ValueError, match="SizeRecipe.lr must be a finite number > 0"):
        SizeRecipe(lr=float("nan"))
    with pytest.raises(ValueError, match=r"decay_epochs must be increasing epochs in \[1, 10\)"):
        SizeRecipe(epochs=10, decay_epochs=(20, 26))
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        volume_size_run(tmp_path, size=8, seed=-1, recipe=TINY)
    with pytest.raises(TypeError, match="recipe must be a SizeRecipe"):
        volume_size_run(tmp_path, size=8, seed=0, recipe={"samples": 8})  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())  # nothing written for a refused run


def test_data_left_by_another_recipe_is_refused_not_reused(tmp_path: Path) -> None:
    write_cosmology(tmp_path / "size8-seed0" / "train.zarr", samples=4, size=8, seed=1000)
    with pytest.raises(
        ValueError, match="holds 4 volumes of edge 8 from data seed 1000, this run needs 8"
    ):
        volume_size_run(tmp_path, size=8, seed=0, recipe=TINY)


def test_the_seeds_of_an_edge_train_fused_as_their_separate_runs(tmp_path: Path) -> None:
    # one process trains seeds 0 and 1 together; each run is what its own call makes, to the
    # last bit (the CPU calls the fused copies one after another, on the same one thread)
    rows = volume_size_experiment(tmp_path / "fused", sizes=(8,), seeds=(0, 1), recipe=TINY)
    alone = [volume_size_run(tmp_path / "alone", size=8, seed=s, recipe=TINY) for s in (0, 1)]
    assert rows == alone
    assert rows[0]["test_mae"] != rows[1]["test_mae"]  # two seeds, two data sets
    with pytest.raises(ValueError, match=r"seeds must differ from each other, got \[1, 1\]"):
        volume_size_experiment(tmp_path / "fused", sizes=(8,), seeds=(1, 1), recipe=TINY)
