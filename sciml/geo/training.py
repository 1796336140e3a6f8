"""Training runs of the masked segmenter: run folders, training, loading.

A run folder holds ``model.json`` (the run record of
:mod:`sciml.training.run_record`, :data:`RUN_RECORD`: the model's and the training's
configuration, :func:`run_config`, with the pixel scaling of the training
image) and the checkpoints of :func:`sciml.training.fit`; it resumes only the
run it describes, and refuses another before writing anything. :func:`load_segmenter` rebuilds the
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
from sciml.training.run_record import RecordKind, RunRecordError, read_run_record

if TYPE_CHECKING:
    from sciml.training import TrainResult

__all__ = [
    "RUN_CONFIG",
    "RUN_RECORD",
    "RunConfigError",
    "load_segmenter",
    "run_config",
    "run_pixel_scaling",
    "train_segmenter",
]


#: File of a run folder holding the model's and the training's configuration.
RUN_CONFIG = "model.json"
_FRESH = "pass a new --run-dir (run_dir=) to start a new run, or delete the folder to retrain"
_LAYOUT = {1: "the record now names its kind and format"}
#: The run record of a segmenter's training run; 2: the record names its kind and format.
RUN_RECORD = RecordKind(
    "geo-segmenter", 2, RUN_CONFIG, "a segmenter run", advice=_FRESH, changes=_LAYOUT, sole=False
)
#: A run folder that cannot be used: another configuration, or a damaged record.
RunConfigError = RunRecordError


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
    against the model, and the run folder (:func:`sciml.training.run_record.claim_run_dir`:
    a folder resumes only a run of the same configuration). Then the
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
        RunConfigError: ``run_dir`` holds a run of another configuration, or checkpoints
            without its record.
        sciml.training.run_dir.RunDirError: Another process is training in ``run_dir``.
    """
    from sciml.training import TrainConfig, fit, seed_everything
    from sciml.training.run_record import claim_run_dir

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
    _check_checkpoints(Path(run_dir))
    with claim_run_dir(run_dir, RUN_RECORD, config) as claim:
        claim.write()
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


def _check_checkpoints(run_dir: Path) -> None:
    """Refuse a folder with checkpoints but no ``model.json``: not a run of this function."""
    if any((run_dir / "checkpoints").glob("*.pt")) and not (run_dir / RUN_CONFIG).exists():
        raise RunConfigError(
            f"{run_dir} holds checkpoints but no {RUN_CONFIG}: it is not a run of "
            "train_segmenter, so it cannot be resumed",
            f"nothing was written: {RUN_RECORD.advice}",
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
    """``run_dir/model.json`` and its configuration (see :func:`read_run_record`)."""
    return run_dir / RUN_CONFIG, read_run_record(run_dir, RUN_RECORD)


def _collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("image", "mask", "label", "valid")
    return {key: torch.stack([item[key] for item in items]) for key in keys if key in items[0]}
