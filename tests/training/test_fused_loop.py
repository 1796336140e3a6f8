"""fit_fused: K runs trained as one write what K separate fit runs write, across a resume.

The runs are the pooled post-processor (random members per sample: each run's own
random state) in float64, seeds 0, 1, 2 with their own Adam rates. Everything but
timings must match the separate runs: the run record, every logged value and the
checkpoints' weights and optimiser states, to 1e-10 relative (the pooled model's fused
steps are exact: test_fused.py); the same files in each folder.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciml.datasets.sampling import seed_everything
from sciml.spatial_parallel.testing import relative_error
from sciml.training import TrainConfig, fit
from sciml.training.fused import FusedModels
from sciml.training.loop import fit_fused
from sciml.weather.dataset import EnsembleDataset
from sciml.weather.postprocess.models import gaussian_crps_loss
from sciml.weather.postprocess.pooled import PooledPostProcessor

EXACT = 1e-10
SEEDS = (0, 1, 2)
RATES = (1e-2, 3e-3, 1e-2)
CONFIG = TrainConfig(epochs=3, batch_size=4, progress=False, tensorboard=False)


def _ensemble(data_seed: int = 0) -> xr.Dataset:
    """5 members, 6 start dates, 2 lead times, 2 levels, 4 x 4."""
    rng = np.random.default_rng(data_seed)
    shape = (5, 6, 2, 2, 4, 4)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(6) * np.timedelta64(2, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "level": [1, 2],
    }
    members = rng.standard_normal(shape)
    truth = 1.5 * members.mean(0) + 0.5 + 0.3 * rng.standard_normal(shape[1:])  # learnable
    data = {"psi": (dims, members), "psi_truth": (dims[1:], truth)}
    return xr.Dataset(data, coords=coords)


def _datasets(data_seed: int = 0) -> tuple[EnsembleDataset, EnsembleDataset]:
    ds = _ensemble(data_seed)
    train, val = ds.isel(time=slice(0, 4)), ds.isel(time=slice(4, None))
    options = dict(members=3, dtype=torch.float64)
    stats = EnsembleDataset(train, ["psi"], **options).stats
    return (
        EnsembleDataset(train, ["psi"], choice="random", stats=stats, **options),
        EnsembleDataset(val, ["psi"], stats=stats, **options),
    )


def _run(seed: int, lr: float) -> tuple[torch.nn.Module, torch.optim.Optimizer, TrainConfig]:
    seed_everything(seed)
    model = PooledPostProcessor(2, hidden=4).double()
    return (
        model,
        torch.optim.Adam(model.parameters(), lr=lr),
        dataclasses.replace(CONFIG, seed=seed),
    )


def _separate(root: Path) -> list[Path]:
    train, val = _datasets()
    dirs = []
    for seed, lr in zip(SEEDS, RATES, strict=True):
        model, optimizer, config = _run(seed, lr)
        run_dir = root / f"seed{seed}"
        fit(
            model,
            optimizer,
            train,
            gaussian_crps_loss,
            run_dir=run_dir,
            config=config,
            val_dataset=val,
        )
        dirs.append(run_dir)
    return dirs


def _fused(root: Path, **options: object) -> list[Path]:
    train, val = _datasets()
    runs = [_run(s, lr) for s, lr in zip(SEEDS, RATES, strict=True)]
    models, optimizers, configs = zip(*runs, strict=True)
    dirs = [root / f"seed{seed}" for seed in SEEDS]
    fit_fused(
        list(models),
        list(optimizers),
        train,
        gaussian_crps_loss,
        run_dirs=dirs,
        configs=list(configs),
        val_dataset=val,
        **options,
    )
    return dirs


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _assert_same_runs(ours: list[Path], theirs: list[Path]) -> None:
    for mine, other in zip(ours, theirs, strict=True):
        assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*")) == sorted(
            p.relative_to(other).as_posix() for p in other.rglob("*")
        )
        records = sorted(p.name for p in mine.glob("*.json"))  # fit's, or the workflow's
        assert len(records) == 1
        assert (mine / records[0]).read_text() == (other / records[0]).read_text()
        rows, expected = _metrics(mine), _metrics(other)
        assert len(rows) == len(expected) > 0
        for row, want in zip(rows, expected, strict=True):
            assert {k: v for k, v in row.items() if k != "value"} == {
                k: v for k, v in want.items() if k != "value"
            }
            value, target = float(row["value"]), float(want["value"])
            assert abs(value - target) <= EXACT * abs(target), (mine, row, want)
        for name in ("last.pt", "best.pt"):
            a = torch.load(mine / "checkpoints" / name, weights_only=False)
            b = torch.load(other / "checkpoints" / name, weights_only=False)
            for key, tensor in b["model"].items():
                assert relative_error(a["model"][key], tensor) < EXACT, (mine, name, key)
            for index, state in b["optimizer"]["state"].items():
                for key, tensor in state.items():
                    assert relative_error(a["optimizer"]["state"][index][key], tensor) < EXACT
            assert a["state"]["global_step"] == b["state"]["global_step"]
            for epoch, want in zip(a["state"]["history"], b["state"]["history"], strict=True):
                assert epoch == pytest.approx(want, rel=EXACT)


@pytest.mark.parametrize("strategy", ["vmap", "loop"])
def test_fused_runs_write_what_separate_runs_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    # the CPU calls the copies one after another; a GPU batches them (vmap): both paths
    import sciml.training.loop as loop

    monkeypatch.setattr(loop, "FusedModels", functools.partial(FusedModels, strategy=strategy))
    _assert_same_runs(_fused(tmp_path / "fused"), _separate(tmp_path / "separate"))


def test_fused_runs_stopped_and_resumed_equal_straight_runs(tmp_path: Path) -> None:
    # 8 samples in batches of 4: stopped after the first step of the second epoch
    _fused(tmp_path / "fused", preempt_after=3)
    for run_dir in (tmp_path / "fused").iterdir():
        state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["state"]
        assert (state["epoch"], state["global_step"]) == (1, 3)
    _assert_same_runs(_fused(tmp_path / "fused"), _separate(tmp_path / "separate"))


def test_runs_that_cannot_be_fused_are_refused_before_writing(tmp_path: Path) -> None:
    train, _ = _datasets()
    runs = [_run(seed, 1e-3) for seed in SEEDS[:2]]
    models, optimizers, configs = (list(x) for x in zip(*runs, strict=True))
    dirs = [tmp_path / "a", tmp_path / "b"]
    other = PooledPostProcessor(2, hidden=8).double()
    short = EnsembleDataset(_ensemble().isel(time=slice(0, 2)), ["psi"], members=3)
    given = {
        "models": models,
        "optimizers": optimizers,
        "train_dataset": train,
        "loss_fn": gaussian_crps_loss,
        "run_dirs": dirs,
        "configs": configs,
    }
    cases: list[tuple[dict[str, object], str]] = [
        (
            {"configs": [configs[0], dataclasses.replace(configs[1], epochs=5)]},
            r"configs\[1\] differs from configs\[0\] in more than",
        ),
        ({"run_dirs": [dirs[0]] * 2}, "each run needs a run_dir of its own"),
        ({"optimizers": optimizers[:1]}, "one model, optimiser, run_dir and config per run"),
        (
            {
                "models": [models[0], other],
                "optimizers": [optimizers[0], torch.optim.Adam(other.parameters())],
            },
            "differs from copy 0",
        ),
        ({"train_dataset": [train, short]}, r"training sets hold \[8, 4\] samples"),
        ({"train_dataset": [train] * 3}, "train_dataset must be one for all runs or 2"),
        ({"schedulers": [_schedule(optimizers[0])]}, "schedulers must be one for all runs or 2"),
    ]
    for changes, message in cases:
        with pytest.raises(ValueError, match=message):
            fit_fused(**(given | changes))  # type: ignore[arg-type]
    assert not any(d.exists() for d in dirs)


def test_a_run_that_stops_early_leaves_the_others_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # patience 1 on the validation loss: the fastest rate's run stops after epoch 4, the
    # others train all 5 (checked), each where its separate run stops
    import tests.training.test_fused_loop as this

    monkeypatch.setattr(this, "RATES", (3e-2, 1e-3, 1e-4))
    monkeypatch.setattr(this, "CONFIG", dataclasses.replace(CONFIG, epochs=5, patience=1))
    fused = _fused(tmp_path / "fused")
    epochs = [
        torch.load(d / "checkpoints" / "last.pt", weights_only=False)["state"]["epoch"]
        for d in fused
    ]
    assert epochs == [4, 5, 5], epochs
    _assert_same_runs(fused, _separate(tmp_path / "separate"))


def test_a_sweep_resumed_after_one_run_stopped_early_equals_straight_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as above; stopped after the first step of epoch 5, when the first run had stopped
    # after epoch 4 (step 8): it stays stopped, the others finish as their separate runs
    import tests.training.test_fused_loop as this

    monkeypatch.setattr(this, "RATES", (3e-2, 1e-3, 1e-4))
    monkeypatch.setattr(this, "CONFIG", dataclasses.replace(CONFIG, epochs=5, patience=1))
    fused = _fused(tmp_path / "fused", preempt_after=9)
    steps = [
        torch.load(d / "checkpoints" / "last.pt", weights_only=False)["state"]["global_step"]
        for d in fused
    ]
    assert steps == [8, 9, 9], steps
    _assert_same_runs(_fused(tmp_path / "fused"), _separate(tmp_path / "separate"))


def _schedule(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    """A warm-up epoch, then the rate halved every epoch (the volumes recipe's shape)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.5 ** max(epoch, 1))


def test_runs_with_their_own_data_and_schedules_equal_separate_runs(tmp_path: Path) -> None:
    # each seed reads its own training and validation sets and steps its own scheduler
    # (the volume-size experiment's runs); stopped in the second epoch, then resumed
    sets = {seed: _datasets(data_seed=10 + seed) for seed in SEEDS}

    def fused(**options: object) -> list[Path]:
        runs = [_run(s, lr) for s, lr in zip(SEEDS, RATES, strict=True)]
        models, optimizers, configs = (list(x) for x in zip(*runs, strict=True))
        dirs = [tmp_path / "fused" / f"seed{seed}" for seed in SEEDS]
        fit_fused(
            models,
            optimizers,
            [sets[seed][0] for seed in SEEDS],
            gaussian_crps_loss,
            run_dirs=dirs,
            configs=configs,
            val_dataset=[sets[seed][1] for seed in SEEDS],
            schedulers=[_schedule(optimizer) for optimizer in optimizers],
            **options,
        )
        return dirs

    separate = []
    for seed, lr in zip(SEEDS, RATES, strict=True):
        model, optimizer, config = _run(seed, lr)
        separate.append(tmp_path / "separate" / f"seed{seed}")
        train, val = sets[seed]
        fit(
            model,
            optimizer,
            train,
            gaussian_crps_loss,
            run_dir=separate[-1],
            config=config,
            val_dataset=val,
            scheduler=_schedule(optimizer),
        )
    fused(preempt_after=3)
    _assert_same_runs(fused(), separate)
    rates = [
        torch.load(d / "checkpoints" / "last.pt", weights_only=False)["scheduler"]["_last_lr"]
        for d in separate
    ]
    # the schedule really ran: stepped after each of the 3 epochs, as the fused runs' was
    assert rates == [[lr * 0.5**CONFIG.epochs] for lr in RATES]


def test_a_finished_run_sits_out_while_the_others_resume(tmp_path: Path) -> None:
    # seed 0 already trained to the end with fit; the sweep trains seeds 1 and 2 beside it
    train, val = _datasets()
    model, optimizer, config = _run(SEEDS[0], RATES[0])
    fit(
        model,
        optimizer,
        train,
        gaussian_crps_loss,
        run_dir=tmp_path / "fused" / f"seed{SEEDS[0]}",
        config=config,
        val_dataset=val,
    )
    _assert_same_runs(_fused(tmp_path / "fused"), _separate(tmp_path / "separate"))


def test_a_plain_list_of_samples_is_one_shared_dataset(tmp_path: Path) -> None:
    # a list of datasets is one per run; a list of samples is a dataset, read by every run
    _, val = _datasets()
    samples = [val[i] for i in range(len(val))]

    def fused(root: Path, train: object) -> list[Path]:
        runs = [_run(s, lr) for s, lr in zip(SEEDS[:2], RATES, strict=False)]
        models, optimizers, configs = (list(x) for x in zip(*runs, strict=True))
        dirs = [root / f"seed{seed}" for seed in SEEDS[:2]]
        fit_fused(models, optimizers, train, gaussian_crps_loss, run_dirs=dirs, configs=configs)
        return dirs

    _assert_same_runs(fused(tmp_path / "list", samples), fused(tmp_path / "dataset", val))
