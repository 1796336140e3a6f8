"""Checkpoints: atomic saves, weights-only loads and clear errors for bad checkpoints."""

from pathlib import Path

import pytest
import torch
from torch import nn

from sciml.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tests.scripts.train_job import make_problem


def test_truncated_checkpoint_gives_clear_error(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    path = save_checkpoint(tmp_path / "last.pt", model)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path, model)
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path, model)
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match="not a sciml checkpoint"):
        load_checkpoint(path, model)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt", model)


def test_checkpoint_of_another_model_gives_clear_error(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    path = save_checkpoint(tmp_path / "ckpt.pt", model)
    other = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))
    with pytest.raises(CheckpointError, match=r"another model(.|\n)*0.weight: saved \[16, 6\]"):
        load_checkpoint(path, other)


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    path = save_checkpoint(tmp_path / "last.pt", model)
    before = path.read_bytes()

    class Unsavable(nn.Module):
        def state_dict(self, *args: object, **kwargs: object) -> dict[str, object]:
            return {"x": torch.zeros(1), "bad": lambda: None}

    with pytest.raises(Exception):  # noqa: B017 - whatever pickling raises
        save_checkpoint(path, Unsavable())
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_checkpoint_of_another_optimiser_or_without_scheduler(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    path = save_checkpoint(tmp_path / "c.pt", model, optimizer=sgd)
    adam = torch.optim.Adam(model.parameters())
    with pytest.raises(CheckpointError, match="state of a SGD optimizer, not of the Adam"):
        load_checkpoint(path, model, optimizer=adam)
    scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=1)
    with pytest.raises(CheckpointError, match="holds no scheduler state"):
        load_checkpoint(path, model, optimizer=sgd, scheduler=scheduler)


def test_checkpoint_with_pickled_objects_is_refused(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    torch.save(model, tmp_path / "model.pt")  # a whole pickled module: not weights only
    with pytest.raises(CheckpointError, match="holds Python objects besides tensors"):
        load_checkpoint(tmp_path / "model.pt", model)


def test_checkpoint_functions_want_a_module(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    path = save_checkpoint(tmp_path / "c.pt", model)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got OrderedDict"):
        save_checkpoint(tmp_path / "d.pt", model.state_dict())
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got OrderedDict"):
        load_checkpoint(path, model.state_dict())
    assert not (tmp_path / "d.pt").exists()


def _wrapped_checkpoint(path: Path) -> bool:
    torch.manual_seed(0)
    plain = nn.Linear(3, 2)
    save_checkpoint(path, nn.parallel.DistributedDataParallel(plain))
    other = nn.Linear(3, 2)
    load_checkpoint(path, other, restore_rng=False)
    wrapped = nn.parallel.DistributedDataParallel(nn.Linear(3, 2))
    load_checkpoint(path, wrapped, restore_rng=False)
    return all(
        torch.equal(a, b) and torch.equal(a, c)
        for a, b, c in zip(
            plain.state_dict().values(),
            other.state_dict().values(),
            wrapped.module.state_dict().values(),
            strict=True,
        )
    )


def test_a_data_parallel_models_checkpoint_holds_the_plain_models_weights(tmp_path: Path) -> None:
    from sciml.distributed import spawn

    assert spawn(_wrapped_checkpoint, 1, tmp_path / "ddp.pt") == [True]
