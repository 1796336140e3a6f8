"""Training runs of the masked segmenter: run folders, training, loading.

A run folder holds ``model.json`` (the model's and the training's
configuration, :func:`run_config`, with the pixel scaling of the training
image) and the checkpoints of :func:`sciml.training.fit`; it resumes only the
run it describes (:func:`check_run_dir`). :func:`load_segmenter` rebuilds the
trained :class:`~sciml.geo.model.MaskedUNet` from it, and
:func:`run_pixel_scaling` gives the pixel units an image must be in to be
predicted by it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from sciml.geo.losses import LOSS_KINDS, LossKind, make_loss_fn
from sciml.geo.model import MaskedUNet
from sciml.geo.pixels import PixelScaling

if TYPE_CHECKING:
    from sciml.training import TrainResult

__all__ = [
    "RUN_CONFIG",
    "RunConfigError",
    "check_run_dir",
    "load_segmenter",
    "run_config",
    "run_pixel_scaling",
    "train_segmenter",
]


#: File of a run folder holding the model's and the training's configuration.
RUN_CONFIG = "model.json"


class RunConfigError(ValueError):
    """A run folder holds a run trained with another configuration."""


def run_config(
    model: nn.Module,
    *,
    loss: LossKind,
    masked: bool,
    lr: float,
    batch_size: int,
    seed: int,
    options: Mapping[str, Any] | None = None,
    pixels: PixelScaling | None = None,
) -> dict[str, Any]:
    """Everything a run's checkpoints depend on, as written to ``run_dir/model.json``.

    A :class:`MaskedUNet`'s constructor arguments, the training options
    (``epochs`` excluded: a finished run can be trained further),
    ``options`` (e.g. the tile and overlap of the training tiles) and, under
    ``"pixels"``, the training image's pixel scaling.
    """
    model_part = model.config if isinstance(model, MaskedUNet) else {"model": type(model).__name__}
    config = {
        **model_part,
        "masked": bool(masked),
        "loss": loss,
        "lr": float(lr),
        "batch_size": int(batch_size),
        "seed": int(seed),
        **dict(options or {}),
    }
    if pixels is not None:
        config["pixels"] = pixels.record()
    return json.loads(json.dumps(config))  # what reading model.json gives back


def check_run_dir(run_dir: str | Path, config: Mapping[str, Any]) -> bool:
    """Whether ``run_dir`` can take a run of ``config``; True when it resumes one.

    A folder without checkpoints takes any configuration. A folder with
    checkpoints resumes only the run its ``model.json`` describes.

    Raises:
        RunConfigError: The folder's run has another (or no recorded) configuration.
    """
    run_dir = Path(run_dir)
    if not any((run_dir / "checkpoints").glob("*.pt")):
        return False
    path = run_dir / RUN_CONFIG
    fresh = f"pass a new --run-dir (run_dir=) to start a new run, or delete {run_dir} to retrain"
    if not path.exists():
        raise RunConfigError(
            f"{run_dir} holds checkpoints but no {RUN_CONFIG}: it is not a run of "
            f"train_segmenter, so it cannot be resumed; {fresh}"
        )
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RunConfigError(f"{path} is not valid JSON ({err}); {fresh}") from None
    keys = sorted(set(saved) | set(config))
    differ = [
        f"{k}: {saved.get(k, '<unset>')!r} -> {config.get(k, '<unset>')!r}"
        for k in keys
        if saved.get(k, "<unset>") != config.get(k, "<unset>")
    ]
    if differ:
        raise RunConfigError(
            f"{run_dir} holds a run trained with another configuration "
            f"({'; '.join(differ)}); resuming it would mix two runs: {fresh}"
        )
    return True


def _check_training(
    model: nn.Module, dataset: Any, *, epochs: int, batch_size: int, lr: float, loss: str
) -> None:
    """Reject impossible options and tiles the model cannot take, before any file is written."""
    if loss not in LOSS_KINDS:
        raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSS_KINDS)}")
    if int(epochs) != epochs or epochs < 1 or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be integers >= 1, got {epochs}, {batch_size}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr}")
    if len(dataset) == 0:
        raise ValueError("the training dataset has no tile")
    if not isinstance(model, MaskedUNet):
        return
    image = dataset[0]["image"]
    if image.shape[0] != model.in_channels:
        raise ValueError(
            f"the model takes {model.in_channels} image band(s), the tiles have {image.shape[0]}"
        )
    factor = 2 ** model.config["depth"]
    if any(size % factor for size in image.shape[1:]):
        raise ValueError(
            f"tiles of {tuple(image.shape[1:])} px do not suit a U-Net of depth "
            f"{model.config['depth']}: the tile must be divisible by {factor}"
        )


def train_segmenter(
    model: nn.Module,
    train_dataset: Any,
    *,
    run_dir: str | Path,
    epochs: int = 5,
    batch_size: int = 8,
    lr: float = 1e-3,
    seed: int = 0,
    loss: LossKind = "bce",
    masked: bool = True,
    val_dataset: Any = None,
    options: Mapping[str, Any] | None = None,
    pixels: PixelScaling | None = None,
    progress: bool = False,
    handle_signals: bool = True,
) -> TrainResult:
    """Train with :func:`sciml.training.fit` (Adam, CSV metrics, atomic checkpoints).

    Everything is checked before any file is written: the options, the tiles
    against the model, and the run folder (:func:`check_run_dir`: a folder
    with checkpoints resumes only a run of the same configuration). Then the
    configuration (:func:`run_config`) is written atomically to
    ``run_dir/model.json`` so that :func:`load_segmenter` can rebuild the
    model. ``checkpoints/best.pt`` holds the epoch with the lowest
    ``val_loss`` (``train_loss`` without a validation set).

    Args:
        model: The model (a :class:`MaskedUNet` is rebuilt by :func:`load_segmenter`).
        train_dataset: :class:`sciml.geo.tiles.SceneTiles` or tiles like them.
        run_dir: Run folder; rerunning the same call resumes an interrupted run.
        epochs: Passes over the training tiles.
        batch_size: Tiles per optimiser step.
        lr: Adam learning rate.
        seed: Seed of the weights' initialisation and the tile order.
        loss: One of :data:`LOSS_KINDS`.
        masked: Feed the mask and count valid pixels only (``False``: the baseline).
        val_dataset: Tiles scored after every epoch.
        options: Other settings the run depends on, recorded and compared on resume.
        pixels: The training image's pixel scaling, recorded for prediction
            (default: ``train_dataset.scaling`` when it has one, as
            :class:`~sciml.geo.tiles.SceneTiles` do).
        progress: Show a progress bar.
        handle_signals: On SIGTERM/SIGUSR1 checkpoint and return with status
            ``"interrupted"`` (the caller exits with :data:`sciml.training.EXIT_REQUEUE`).

    Returns:
        The :class:`sciml.training.TrainResult`.

    Raises:
        ValueError: Bad options, or tiles the model cannot take.
        RunConfigError: ``run_dir`` holds a run of another configuration.
        sciml.training.run_dir.RunDirError: Another process is training in ``run_dir``.
    """
    from sciml.io_utils import atomic_write_text
    from sciml.training import TrainConfig, fit, seed_everything
    from sciml.training.run_dir import RunLock

    _check_training(model, train_dataset, epochs=epochs, batch_size=batch_size, lr=lr, loss=loss)
    config = run_config(
        model,
        loss=loss,
        masked=masked,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        options=options,
        pixels=pixels if pixels is not None else getattr(train_dataset, "scaling", None),
    )
    train_config = TrainConfig(
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
        tensorboard=False,
        handle_signals=handle_signals,
    )
    # One process at a time checks and writes model.json (fit's run.lock comes later).
    with RunLock(Path(run_dir), name=f"{RUN_CONFIG}.lock"):
        check_run_dir(run_dir, config)
        atomic_write_text(Path(run_dir) / RUN_CONFIG, json.dumps(config, indent=2))
        seed_everything(seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        return fit(
            model,
            optimizer,
            train_dataset,
            make_loss_fn(kind=loss, masked=masked),
            run_dir=run_dir,
            config=train_config,
            val_dataset=val_dataset,
            collate_fn=_collate,
        )


def load_segmenter(run_dir: str | Path, *, checkpoint: str = "last") -> MaskedUNet:
    """Rebuild a :class:`MaskedUNet` trained by :func:`train_segmenter` from its run folder.

    Args:
        run_dir: The training run folder (``model.json``, ``checkpoints/``).
        checkpoint: ``"last"`` (the latest epoch) or ``"best"`` (the lowest monitored loss).

    Raises:
        FileNotFoundError: No such run folder, ``model.json`` or checkpoint.
        ValueError: ``model.json`` does not describe a :class:`MaskedUNet`.
    """
    from sciml.training.checkpoint import load_checkpoint

    run_dir = Path(run_dir)
    if checkpoint not in ("last", "best"):
        raise ValueError(f"checkpoint must be 'last' or 'best', got {checkpoint!r}")
    config_path, config = _read_run_config(run_dir)
    missing = [
        k
        for k in ("in_channels", "base_channels", "depth", "norm", "mask_image")
        if k not in config
    ]
    if missing:
        raise ValueError(f"{config_path} does not describe a MaskedUNet: no {missing}")
    path = run_dir / "checkpoints" / f"{checkpoint}.pt"
    if not path.exists():
        found = sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
        hint = f"it has {', '.join(found)}" if found else "it has no checkpoint: train it first"
        raise FileNotFoundError(
            f"{run_dir} has no {checkpoint!r} checkpoint ({path}, --checkpoint {checkpoint}); "
            f"{hint}"
        )
    model = MaskedUNet(
        config["in_channels"],
        base_channels=config["base_channels"],
        depth=config["depth"],
        norm=config["norm"],
        mask_image=config["mask_image"],
    )
    load_checkpoint(path, model, restore_rng=False)
    return model.eval()


def run_pixel_scaling(run_dir: str | Path) -> PixelScaling:
    """The pixel scaling of the image a run was trained on (``model.json``'s ``"pixels"``).

    Raises:
        FileNotFoundError: No ``model.json`` in ``run_dir``.
        RunConfigError: The run recorded no pixel scaling (or a damaged one).
    """
    path, config = _read_run_config(Path(run_dir))
    if "pixels" not in config:
        raise RunConfigError(
            f"{path} does not record the pixel scaling of its training image, so an image "
            "cannot be checked against it; train the run again with this version of sciml"
        )
    try:
        return PixelScaling.from_record(config["pixels"], origin=str(path))
    except ValueError as err:
        raise RunConfigError(str(err)) from None


def _read_run_config(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """``run_dir/model.json`` and its content; errors name the file and the run folder."""
    path = run_dir / RUN_CONFIG
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: {run_dir} (--run-dir) is not a run folder of sciml geo train"
        )
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RunConfigError(f"{path} is not valid JSON ({err}); train the run again") from None
    if not isinstance(config, dict):
        raise RunConfigError(f"{path} holds no run configuration; train the run again")
    return path, config


def _collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("image", "mask", "label", "valid")
    return {key: torch.stack([item[key] for item in items]) for key in keys if key in items[0]}
