"""Checkpoints written atomically and read back safely.

A checkpoint holds the model, optimiser and scheduler states, the random
number generator states and the training loop's counters, so that a resumed
run continues exactly where it stopped. It is written to a temporary file and
renamed, so a crash never leaves half a checkpoint under the real name, and it
is read with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import random
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sciml.io_utils import atomic_path
from sciml.training.runs.record import plain

__all__ = [
    "FORMAT",
    "CheckpointError",
    "get_rng_state",
    "load_checkpoint",
    "model_signature",
    "read_checkpoint",
    "restore_checkpoint",
    "save_checkpoint",
    "set_rng_state",
    "training_record",
    "unwrap",
]

#: Format tag stored in every checkpoint.
FORMAT = "sciml-checkpoint/1"


class CheckpointError(RuntimeError):
    """A checkpoint is corrupt, not a sciml checkpoint, or belongs to another model."""


def unwrap(model: nn.Module) -> nn.Module:
    """The module whose weights a checkpoint holds: a ``DistributedDataParallel``'s ``.module``.

    So a checkpoint of a data-parallel run loads into the plain model (and back).
    """
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def model_signature(model: nn.Module) -> dict[str, list[int]]:
    """Names and shapes of a model's parameters and buffers."""
    return {name: list(tensor.shape) for name, tensor in model.state_dict().items()}


def training_record(
    config: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    sizes: tuple[int, int | None],
    replicas: int,
) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote the checkpoint.

    Args:
        config: The loop options that must not change on resume.
        model: The model (class and parameter shapes).
        optimizer: The optimiser (class and hyperparameters, before any step).
        scheduler: The learning-rate scheduler (class) or ``None``.
        sizes: Lengths of the training and validation sets (``None``: no validation).
        replicas: Number of data-parallel replicas.
    """
    groups = [
        {k: plain(v) for k, v in group.items() if k != "params"}
        | {"parameters": len(group["params"])}
        for group in optimizer.param_groups
    ]
    return {
        "config": config,
        "model": type(model).__qualname__,
        "parameters": model_signature(model),
        "optimizer": type(optimizer).__qualname__,
        "param_groups": groups,
        "scheduler": None if scheduler is None else type(scheduler).__qualname__,
        "train_samples": sizes[0],
        "val_samples": sizes[1],
        "replicas": replicas,
    }


def get_rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's generators, as tensors and lists."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002 - global state
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore generator states saved by :func:`get_rng_state`.

    The states may have been read onto a GPU (``map_location="cuda"``); they
    are moved back to the CPU, where the generators take them.
    """
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    numpy = state["numpy"]
    np.random.set_state(  # noqa: NPY002 - restores the global state
        (
            numpy["kind"],
            numpy["keys"].cpu().numpy().astype(np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def save_checkpoint(
    path: Path | str,
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    state: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically (temporary file, then rename).

    Args:
        path: Destination file.
        model: The model whose ``state_dict`` is saved (a data-parallel wrapper's module).
        optimizer: Optional optimiser to save.
        scheduler: Optional learning-rate scheduler to save.
        state: Extra loop state (plain Python values and tensors).

    Returns:
        The checkpoint's path.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    model = unwrap(model)
    payload = {
        "format": FORMAT,
        "model_class": type(model).__qualname__,
        "model_signature": model_signature(model),
        "model": model.state_dict(),
        "optimizer_class": _class_name(optimizer),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler_class": _class_name(scheduler),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": get_rng_state(),
        "state": state or {},
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return Path(path)


def _class_name(obj: object | None) -> str | None:
    return None if obj is None else type(obj).__qualname__


def _check_class(path: Path, payload: dict[str, Any], kind: str, obj: object) -> None:
    """Refuse to load a saved optimiser or scheduler state into another class."""
    if payload[kind] is None:
        raise CheckpointError(f"checkpoint {path} holds no {kind} state")
    saved = payload.get(f"{kind}_class")  # absent in checkpoints written before it was saved
    if saved is not None and saved != _class_name(obj):
        raise CheckpointError(
            f"checkpoint {path} holds the state of a {saved} {kind}, not of the "
            f"{_class_name(obj)} given"
        )


def _check_signature(path: Path, payload: dict[str, Any], model: nn.Module) -> None:
    saved, current = payload["model_signature"], model_signature(model)
    missing = sorted(set(current) - set(saved))
    unexpected = sorted(set(saved) - set(current))
    reshaped = sorted(k for k in set(saved) & set(current) if saved[k] != current[k])
    if missing or unexpected or reshaped:
        details = []
        if missing:
            details.append(f"missing {missing[:5]}")
        if unexpected:
            details.append(f"unexpected {unexpected[:5]}")
        if reshaped:
            details += [f"{k}: saved {saved[k]}, model {current[k]}" for k in reshaped[:5]]
        raise CheckpointError(
            f"checkpoint {path} belongs to another model (saved from "
            f"{payload['model_class']}, loading into {type(model).__qualname__}): "
            + "; ".join(details)
        )


def read_checkpoint(
    path: Path | str, *, map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """Read a checkpoint (``weights_only``) without loading it into anything.

    Returns:
        The whole payload: ``model``, ``optimizer``, ``scheduler``, ``rng``,
        ``state`` and the model's class and parameter shapes.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        CheckpointError: If the file is truncated or corrupt, or not a sciml checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several types for damaged archives
        if "Weights only load failed" in str(err) and zipfile.is_zipfile(path):
            raise CheckpointError(
                f"{path} holds Python objects besides tensors (a pickled model or class?) and "
                "is not a sciml checkpoint; sciml loads with torch.load(weights_only=True), "
                "which runs no code from a file (write checkpoints with save_checkpoint)"
            ) from err
        raise CheckpointError(
            f"checkpoint {path} is truncated or corrupt and cannot be read ({err}); "
            "delete it or resume from an earlier checkpoint"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a sciml checkpoint (expected format {FORMAT!r})")
    return payload


def restore_checkpoint(
    path: Path | str,
    payload: dict[str, Any],
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load a payload from :func:`read_checkpoint` into ``model`` (and the others).

    Everything is checked (parameter names and shapes, optimiser and scheduler
    classes) before anything is changed.

    Args:
        path: Where the payload was read from (named in errors).
        payload: The checkpoint's contents.
        model: Receives the saved weights (a data-parallel wrapper's module does).
        optimizer: Receives the saved optimiser state (which must exist).
        scheduler: Receives the saved scheduler state (which must exist).
        restore_rng: Also restore Python's, NumPy's and torch's generators.

    Returns:
        The extra loop state that was saved with it.

    Raises:
        CheckpointError: If the checkpoint belongs to another model, optimiser or scheduler.
    """
    path = Path(path)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    model = unwrap(model)
    _check_signature(path, payload, model)
    if optimizer is not None:
        _check_class(path, payload, "optimizer", optimizer)
    if scheduler is not None:
        _check_class(path, payload, "scheduler", scheduler)
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(payload["scheduler"])
    if restore_rng:
        set_rng_state(payload["rng"])
    return payload["state"]


def load_checkpoint(
    path: Path | str,
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    restore_rng: bool = True,
    map_location: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Load a checkpoint into ``model`` (and optimiser, scheduler, generators).

    Returns:
        The extra loop state that was saved with it.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        CheckpointError: If the file is truncated or corrupt, is not a sciml
            checkpoint, was saved from a model with other parameters, or holds
            no state (or another class's state) for the optimiser or scheduler given.
    """
    payload = read_checkpoint(path, map_location=map_location)
    return restore_checkpoint(
        path, payload, model, optimizer=optimizer, scheduler=scheduler, restore_rng=restore_rng
    )
