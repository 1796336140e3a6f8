"""Checkpoints written atomically and read back safely.

A checkpoint holds the model, optimiser and scheduler states, the random
number generator states and the training loop's counters, so that a resumed
run continues exactly where it stopped. It is written to a temporary file and
renamed, so a crash never leaves half a checkpoint under the real name, and it
is read with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sciml.io_utils import atomic_path

__all__ = [
    "FORMAT",
    "CheckpointError",
    "get_rng_state",
    "load_checkpoint",
    "model_signature",
    "save_checkpoint",
    "set_rng_state",
]

#: Format tag stored in every checkpoint.
FORMAT = "sciml-checkpoint/1"


class CheckpointError(RuntimeError):
    """A checkpoint is corrupt, not a sciml checkpoint, or belongs to another model."""


def model_signature(model: nn.Module) -> dict[str, list[int]]:
    """Names and shapes of a model's parameters and buffers."""
    return {name: list(tensor.shape) for name, tensor in model.state_dict().items()}


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
    """Restore generator states saved by :func:`get_rng_state`."""
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    numpy = state["numpy"]
    np.random.set_state(  # noqa: NPY002 - restores the global state
        (
            numpy["kind"],
            numpy["keys"].numpy().astype(np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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
        model: The model whose ``state_dict`` is saved.
        optimizer: Optional optimiser to save.
        scheduler: Optional learning-rate scheduler to save.
        state: Extra loop state (plain Python values and tensors).

    Returns:
        The checkpoint's path.
    """
    payload = {
        "format": FORMAT,
        "model_class": type(model).__qualname__,
        "model_signature": model_signature(model),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": get_rng_state(),
        "state": state or {},
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return Path(path)


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
            checkpoint, or was saved from a model with other parameters.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several types for damaged archives
        raise CheckpointError(
            f"checkpoint {path} is truncated or corrupt and cannot be read ({err}); "
            "delete it or resume from an earlier checkpoint"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a sciml checkpoint (expected format {FORMAT!r})")
    _check_signature(path, payload, model)
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        if payload["optimizer"] is None:
            raise CheckpointError(f"checkpoint {path} holds no optimiser state")
        optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None and payload["scheduler"] is not None:
        scheduler.load_state_dict(payload["scheduler"])
    if restore_rng:
        set_rng_state(payload["rng"])
    return payload["state"]
