"""sciml.volumes.train: hybrid-parallel runs from files equal one process, across a resume."""

import csv
import dataclasses
import functools
from pathlib import Path
from typing import Any

import pytest
import torch

from sciml.distributed import init_distributed, spawn
from sciml.training import TrainConfig
from sciml.training.checkpoint import read_checkpoint
from sciml.volumes.config import VolumeTraining
from sciml.volumes.data import write_cosmology, write_segmentation
from sciml.volumes.train import learning_rate_factor, train_volumes, train_volumes_fused
from tests.training.test_fused_loop import _assert_same_runs

pytestmark = pytest.mark.xdist_group("volumes_train")

CONFIG = TrainConfig(epochs=2, batch_size=2, seed=3, progress=False, tensorboard=False)
OPTIONS = {
    "cosmoflow": VolumeTraining(
        "cosmoflow", config=CONFIG, lr=0.02, width=2, levels=1, dtype="float64"
    ),
    "unet3d": VolumeTraining("unet3d", config=CONFIG, lr=0.01, width=2, levels=1, dtype="float64"),
}


def _rows(run_dir: Path) -> list[tuple[str, str, float]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return [(r["split"], r["metric"], float(r["value"])) for r in csv.DictReader(handle)]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return read_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]


def _interrupted(data: str, run_dir: str, model: str, mesh: dict[str, int], at: int) -> list[str]:
    """Rank function: train, rank 0 preempted after step ``at``, then resume."""
    options = VolumeTraining(**{**vars(OPTIONS[model]), "mesh": mesh})
    preempt = at if torch.distributed.get_rank() == 0 else None
    first = train_volumes(data, options, run_dir, val=data, preempt_after=preempt)
    second = train_volumes(data, options, run_dir, val=data)
    return [first.status, second.status, str(second.global_step)]


def _both(files: dict[str, str], run_dir: str) -> list[list[str]]:
    """Rank function: each model on depth=2, interrupted after its 5th step, resumed."""
    return [_interrupted(files[m], f"{run_dir}/{m}", m, {"depth": 2}, 5) for m in OPTIONS]


def test_depth_2_equals_one_process_across_a_resume(tmp_path: Path) -> None:
    # CosmoFlow (replicated output) and the U-Net (split output, BatchNorm) from files
    files = {
        "cosmoflow": str(write_cosmology(tmp_path / "c.zarr", samples=12, size=8, seed=2)),
        "unet3d": str(write_segmentation(tmp_path / "s.zarr", samples=12, size=8, seed=2)),
    }
    statuses = spawn(_both, 2, files, str(tmp_path / "mesh"), timeout=240)
    assert statuses == [[["interrupted", "completed", "12"]] * 2] * 2
    for model, data in files.items():
        with init_distributed(backend="gloo"):
            single = train_volumes(data, OPTIONS[model], tmp_path / model, val=data)
        assert single.global_step == 12
        expected, got = _rows(tmp_path / model), _rows(tmp_path / "mesh" / model)
        assert [r[:2] for r in got] == [r[:2] for r in expected]
        for (split, name, value), (_, _, want) in zip(got, expected, strict=True):
            assert value == pytest.approx(want, rel=1e-9, abs=1e-12), (model, split, name)
        reference = _weights(tmp_path / model)
        for name, value in _weights(tmp_path / "mesh" / model).items():
            torch.testing.assert_close(value, reference[name], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("strategy", ["vmap", "loop"])
@pytest.mark.parametrize("model", list(OPTIONS))
def test_fused_runs_write_what_separate_runs_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, strategy: str
) -> None:
    # two seeds, each on volumes of its own, with its own rate and a warm-up schedule, as the
    # volume-size experiment trains them; both ways of calling the copies (a GPU's, the CPU's)
    import sciml.training.loop as loop
    from sciml.training.fused import FusedModels

    monkeypatch.setattr(loop, "FusedModels", functools.partial(FusedModels, strategy=strategy))
    write = write_cosmology if model == "cosmoflow" else write_segmentation
    seeds = (0, 1)
    data = [write(tmp_path / f"d{seed}.zarr", samples=6, size=8, seed=seed) for seed in seeds]
    options = [
        dataclasses.replace(
            OPTIONS[model],
            config=dataclasses.replace(CONFIG, seed=seed),
            lr=OPTIONS[model].lr * (1 + seed),
            warmup_epochs=1,
        )
        for seed in seeds
    ]
    fused = [tmp_path / "fused" / f"seed{seed}" for seed in seeds]
    separate = [tmp_path / "separate" / f"seed{seed}" for seed in seeds]
    with init_distributed(backend="gloo"):
        results = train_volumes_fused(data, options, fused, vals=data[::-1])
        for train, val, opts, run_dir in zip(data, data[::-1], options, separate, strict=True):
            train_volumes(train, opts, run_dir, val=val)
    assert [r.global_step for r in results] == [6, 6]
    _assert_same_runs(fused, separate)


def test_runs_that_cannot_be_fused_name_what_differs(tmp_path: Path) -> None:
    data = [write_cosmology(tmp_path / f"d{n}.zarr", samples=n, size=8, seed=n) for n in (4, 6)]
    options = [OPTIONS["cosmoflow"], dataclasses.replace(OPTIONS["cosmoflow"], config=CONFIG)]
    runs = [tmp_path / "a", tmp_path / "b"]
    with pytest.raises(
        ValueError, match="one entry per run in each list, got 2 trains and 1 options"
    ):
        train_volumes_fused(data, options[:1], runs)
    with (
        init_distributed(backend="gloo"),
        pytest.raises(ValueError, match=r"hold \[4, 6\] samples"),
    ):
        train_volumes_fused(data, options, runs)


def test_learning_rate_warms_up_then_decays() -> None:
    options = VolumeTraining("cosmoflow", warmup_epochs=4, decay_epochs=(6, 9), decay=0.5)
    factors = [learning_rate_factor(e, options) for e in range(10)]
    assert factors == [0.25, 0.5, 0.75, 1, 1, 1, 0.5, 0.5, 0.5, 0.25]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": "resnet"}, "model must be one of \\['cosmoflow', 'unet3d'\\]"),
        ({"mesh": {"depht": 2}}, "mesh axes \\['depht'\\] are unknown"),
        ({"decay_epochs": (5, 3)}, "decay_epochs must be increasing epochs >= 1"),
        ({"decay": 0.0}, "decay must be in \\(0, 1\\]"),
        ({"dtype": "float16"}, "dtype must be one of"),
    ],
)
def test_bad_options_are_named(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VolumeTraining(**({"model": "cosmoflow"} | changes))
