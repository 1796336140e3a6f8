"""sciml.training.step through fit: spatial models, global logged values, micro-batches, bf16."""

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from sciml.distributed import spawn
from sciml.models import CosmoFlow
from sciml.spatial_parallel import SpatialMesh, mse_loss, parallelize
from sciml.training import TrainConfig, TrainResult, fit

pytestmark = pytest.mark.xdist_group("spatial_fit")

CONFIG = dict(epochs=2, batch_size=4, progress=False, tensorboard=False)


def _data(kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """12 float64 volumes (1, 8, 4, 4) and their targets: volumes (split) or 2 numbers."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(12, 1, 8, 4, 4, generator=generator, dtype=torch.float64)
    if kind == "split":
        return x, torch.randn(12, 2, 8, 4, 4, generator=generator, dtype=torch.float64)
    return x, torch.randn(12, 2, generator=generator, dtype=torch.float64)


def _model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    if kind == "split":
        return nn.Sequential(nn.Conv3d(1, 2, 3, padding=1)).double()
    return CosmoFlow(1, 2, base_filters=2, n_conv=1, dense=(4,)).double()


class _Blocks(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Sample ``i``: this rank's block of volume ``i`` and its target (its block if a volume)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, mesh: SpatialMesh) -> None:
        self.x, self.y = x, y
        self.slices = mesh.block((mesh.data, *x.shape[1:]))[1:]

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.y[i][self.slices] if self.y.dim() == 5 else self.y[i]
        return self.x[i][self.slices], y


def _loss(kind: str, mesh: SpatialMesh | None) -> Any:
    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        if kind == "split" and mesh is not None:
            return mse_loss(model(x), y, mesh)
        return nn.functional.mse_loss(model(x), y)

    return loss_fn


def _rows(run_dir: Path) -> list[tuple[str, str, float]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return [(r["split"], r["metric"], float(r["value"])) for r in csv.DictReader(handle)]


def _single(kind: str, run_dir: Path, **config: Any) -> tuple[nn.Module, TrainResult]:
    model = _model(kind)
    x, y = _data(kind)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    result = fit(
        model,
        optimizer,
        TensorDataset(x, y),
        _loss(kind, None),
        run_dir=run_dir,
        config=TrainConfig(**(CONFIG | config)),
        val_dataset=TensorDataset(x[:5], y[:5]),
    )
    return model, result


def _spatial(kind: str, run_dir: str, mesh_shape: dict[str, int]) -> dict[str, Any]:
    """Rank function: fit the parallel model on blocks; also try an inconsistent replica."""
    mesh = SpatialMesh(**mesh_shape)
    model = parallelize(_model(kind), mesh)
    x, y = _data(kind)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    train, val = _Blocks(x, y, mesh), _Blocks(x[:5], y[:5], mesh)
    args = (model, optimizer, train, _loss(kind, mesh))
    config = TrainConfig(**CONFIG)
    try:
        fit(*args, run_dir=f"{run_dir}/bad", config=config, replica=(mesh.rank, 2))
        error = ""
    except ValueError as err:
        error = str(err)
    result = fit(*args, run_dir=run_dir, config=config, val_dataset=val)
    return {"state": model.state_dict(), "steps": result.global_step, "error": error}


def _both(run_dir: str, mesh_shape: dict[str, int]) -> list[dict[str, Any]]:
    return [_spatial(kind, f"{run_dir}/{kind}", mesh_shape) for kind in KINDS]


KINDS = ("split", "replicated")


def test_depth_2_fit_equals_single_process_fit(tmp_path: Path) -> None:
    # Before: the default replica (rank, world) gave the two ranks different samples
    # (4 steps instead of 6), and a split output's logged losses were halved.
    both = spawn(_both, 2, str(tmp_path / "spatial"), {"depth": 2}, timeout=120)
    for k, kind in enumerate(KINDS):
        _check_against_single(kind, tmp_path, [rank[k] for rank in both])


def _check_against_single(kind: str, tmp_path: Path, ranks: list[dict[str, Any]]) -> None:
    reference, done = _single(kind, tmp_path / "single" / kind)
    assert [r["steps"] for r in ranks] == [done.global_step] * 2 == [6, 6]
    assert all("contradicts the model's mesh" in r["error"] for r in ranks)
    expected, got = _rows(tmp_path / "single" / kind), _rows(tmp_path / "spatial" / kind)
    assert [r[:2] for r in got] == [r[:2] for r in expected]
    for (split, name, value), (_, _, want) in zip(got, expected, strict=True):
        if name != "lr":
            assert value == pytest.approx(want, rel=1e-9, abs=1e-12), (split, name)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(ranks[0]["state"][name], value, rtol=1e-9, atol=1e-12)


def test_micro_batches_equal_whole_batches(tmp_path: Path) -> None:
    whole, _ = _single("split", tmp_path / "whole")
    parts, _ = _single("split", tmp_path / "parts", micro_batches=3)
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(parts.state_dict()[name], value, rtol=1e-12, atol=1e-14)
    for (_, name, value), (_, _, want) in zip(
        _rows(tmp_path / "parts"), _rows(tmp_path / "whole"), strict=True
    ):
        assert value == pytest.approx(want, rel=1e-12), name


def test_bf16_runs_the_forward_pass_under_autocast(tmp_path: Path) -> None:
    model = _model("split").float()
    x, y = (t.float() for t in _data("split"))
    seen = []

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        out = model(batch[0])
        seen.append(out.dtype)
        return nn.functional.mse_loss(out.float(), batch[1])

    config = TrainConfig(**(CONFIG | {"epochs": 1, "precision": "bf16"}))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fit(model, optimizer, TensorDataset(x, y), loss_fn, run_dir=tmp_path, config=config)
    assert seen == [torch.bfloat16] * 3
    assert all(p.dtype == torch.float32 and p.grad is not None for p in model.parameters())


def test_perf_csv_has_every_rank_each_epoch(tmp_path: Path) -> None:
    _single("split", tmp_path)
    with open(tmp_path / "perf.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    metrics = {"samples_per_s", "stall_fraction", "step_seconds", "peak_memory_mib"}
    assert {(r["epoch"], r["rank"], r["metric"]) for r in rows} == {
        (e, "0", m) for e in ("0", "1") for m in metrics
    }
    assert all(float(r["value"]) > 0 for r in rows if r["metric"] != "stall_fraction")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("micro_batches", 0, "micro_batches must be an integer >= 1"),
        ("micro_batches", 5, "micro_batches=5 is more than batch_size=4"),
        ("precision", "fp16", "precision must be one of \\('fp32', 'bf16'\\)"),
    ],
)
def test_train_config_rejects_bad_step_options(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**(CONFIG | {field: value}))
