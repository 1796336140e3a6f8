"""Training runs of the masked segmenter: run folders, training, loading.

A run folder holds ``model.json`` (the run record of
:mod:`sciml.training.runs.record`, :data:`RUN_RECORD`: the run's
:class:`~sciml.geo.config.SegmenterConfig` and the U-Net's arguments,
:func:`run_config`, with the pixel scaling of the training image) and the
checkpoints of :func:`sciml.training.fit`; it resumes only the run it describes,
and refuses another before writing anything. :func:`load_segmenter` rebuilds the
trained :class:`~sciml.geo.model.MaskedUNet` from it, and
:func:`run_pixel_scaling` gives the pixel units an image must be in to be
predicted by it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sciml.datasets.sampling import seed_everything
from sciml.geo.config import SegmenterConfig
from sciml.geo.losses import make_loss_fn
from sciml.geo.model import MaskedUNet
from sciml.geo.pixels import PixelScaling
from sciml.training.runs.record import RESUMABLE_FIELDS, RecordKind, RunRecordError, read_run_record

if TYPE_CHECKING:
    from sciml.training import TrainResult

__all__ = [
    "RUN_CONFIG",
    "RUN_RECORD",
    "RunConfigError",
    "build_segmenter",
    "load_segmenter",
    "run_config",
    "run_pixel_scaling",
    "train_segmenter",
]


#: File of a run folder holding the model's and the training's configuration.
RUN_CONFIG = "model.json"
_FRESH = "pass a new --run-dir (run_dir=) to start a new run, or delete the folder to retrain"
_LAYOUT = {
    1: "the record now names its kind and format",
    2: "the record now holds the run's SegmenterConfig, the U-Net's arguments under 'model'",
}
#: The run record of a segmenter's training run; 2: the record names its kind and format;
#: 3: it holds the :class:`SegmenterConfig`, the U-Net's arguments under ``"model"``.
RUN_RECORD = RecordKind(
    "geo-segmenter", 3, RUN_CONFIG, "a segmenter run", advice=_FRESH, changes=_LAYOUT, sole=False
)
#: A run folder that cannot be used: another configuration, or a damaged record.
RunConfigError = RunRecordError


def run_config(
    config: SegmenterConfig,
    model: MaskedUNet,
    *,
    source: Mapping[str, str | int] | None = None,
    pixels: PixelScaling | None = None,
) -> dict[str, Any]:
    """Everything a run's checkpoints depend on, as written to ``run_dir/model.json``.

    The options of ``config`` (of its loop, those a resumed run must keep: ``epochs``
    excluded, a finished run can be trained further), under ``"model"`` the U-Net's
    constructor arguments, under ``"source"`` what the tiles were cut from, and under
    ``"pixels"`` the training image's pixel scaling.
    """
    options = {k: v for k, v in dataclasses.asdict(config).items() if k != "train"}
    loop = dataclasses.asdict(config.train)
    record = {
        **options,
        "train": {k: v for k, v in loop.items() if k not in RESUMABLE_FIELDS},
        "model": model.config,
        "source": dict(source or {}),
    }
    if pixels is not None:
        record["pixels"] = pixels.record()
    return json.loads(json.dumps(record))  # what reading model.json gives back


def build_segmenter(config: SegmenterConfig, in_channels: int) -> MaskedUNet:
    """The U-Net of ``config`` for images of ``in_channels`` bands, seeded by its seed."""
    seed_everything(config.train.seed)  # the weights' initialisation depends on the seed only
    return MaskedUNet(
        in_channels,
        base_channels=config.base_channels,
        depth=config.depth,
        mask_image=config.masked and config.mask_image,
    )


def _check_tiles(train_dataset: Any, depth: int) -> None:
    """Reject an empty dataset and tiles the U-Net cannot take, before any file is written."""
    if len(train_dataset) == 0:
        raise ValueError("the training dataset has no tile")
    image = train_dataset[0]["image"]
    factor = 2**depth
    if any(size % factor for size in image.shape[1:]):
        raise ValueError(
            f"tiles of {tuple(image.shape[1:])} px do not suit a U-Net of depth "
            f"{depth}: the tile must be divisible by {factor}"
        )


def train_segmenter(
    train_dataset: Any,
    config: SegmenterConfig,
    run_dir: str | Path,
    *,
    val_dataset: Any = None,
    source: Mapping[str, str | int] | None = None,
    pixels: PixelScaling | None = None,
    progress: bool = False,
    handle_signals: bool = True,
) -> TrainResult:
    """Train the :class:`MaskedUNet` of ``config`` with :func:`sciml.training.fit` (Adam).

    Everything is checked before any file is written: the tiles against the U-Net,
    and the run folder (:func:`sciml.training.runs.folder.claim_run_dir`: a folder resumes
    only a run of the same configuration). Then the configuration (:func:`run_config`)
    is written atomically to ``run_dir/model.json`` so that :func:`load_segmenter`
    rebuilds the model. ``checkpoints/best.pt`` holds the epoch with the lowest
    ``val_loss`` (``train_loss`` without a validation set).

    Args:
        train_dataset: :class:`sciml.geo.tiles.SceneTiles` or tiles like them.
        config: The run's options (its loop's ``progress`` and ``handle_signals`` are
            replaced by the keywords of this call).
        run_dir: Run folder; rerunning the same call resumes an interrupted run.
        val_dataset: Tiles scored after every epoch.
        source: What the tiles were cut from (e.g. the scene and its blocks), recorded
            and compared on resume.
        pixels: The training image's pixel scaling, recorded for prediction
            (default: ``train_dataset.scaling`` when it has one, as
            :class:`~sciml.geo.tiles.SceneTiles` do).
        progress: Show a progress bar.
        handle_signals: On SIGTERM/SIGUSR1 checkpoint and return with status
            ``"interrupted"`` (the caller exits with :data:`sciml.training.EXIT_REQUEUE`).

    Returns:
        The :class:`sciml.training.TrainResult`; :func:`load_segmenter` gives the model.

    Raises:
        ValueError: Tiles the model cannot take.
        RunConfigError: ``run_dir`` holds a run of another configuration, or checkpoints
            without its record.
        sciml.training.runs.record.RunDirError: Another process is training in ``run_dir``.
    """
    from sciml.training import fit
    from sciml.training.runs.folder import claim_run_dir

    _check_tiles(train_dataset, config.depth)
    model = build_segmenter(config, int(train_dataset[0]["image"].shape[0]))
    record = run_config(
        config,
        model,
        source=source,
        pixels=pixels if pixels is not None else getattr(train_dataset, "scaling", None),
    )
    loop = dataclasses.replace(config.train, progress=progress, handle_signals=handle_signals)
    _check_checkpoints(Path(run_dir))
    with claim_run_dir(run_dir, RUN_RECORD, record) as claim:
        claim.write()
    seed_everything(loop.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    return fit(
        model,
        optimizer,
        train_dataset,
        make_loss_fn(kind=config.loss, masked=config.masked),
        run_dir=run_dir,
        config=loop,
        val_dataset=val_dataset,
        collate_fn=_collate,
        record=False,  # the run's one record is model.json
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
    config_path, record = _read_run_config(run_dir)
    config = record.get("model")
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} does not describe a MaskedUNet: no 'model'")
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
