"""Hybrid-parallel training of CosmoFlow and the 3D U-Net from sharded volume files.

:func:`train_volumes` runs on every rank of an initialised process group
(``sciml cosmoflow train`` / ``sciml unet3d train`` start it under torchrun,
srun or one process): it builds the :class:`~sciml.spatial_parallel.SpatialMesh`
(``data`` replicas times a spatial grid), reads each rank's block of every
sample (:class:`~sciml.volumes.dataset.ShardedVolumes`, statistics computed
collectively once and cached in the run folder), parallelizes the model and
trains it with :func:`sciml.training.fit`.

* CosmoFlow follows the MLPerf HPC reference: ``Conv3d(k=3) + LeakyReLU(0.3)
  + MaxPool3d(2)`` blocks, a dense 128-64-4 head with dropout, ``1.2 * tanh``
  output, mean squared error, SGD with momentum 0.9, a linear warm-up then a
  step decay of the learning rate (``levels`` blocks of ``width * 2**i``
  filters: 5 and 32 in the reference).
* The U-Net follows LBANN's 3-level 3D U-Net: two ``conv + BatchNorm + ReLU``
  per level, max pooling, transposed convolutions, concatenated skips, a
  per-voxel cross-entropy over the whole volume, Adam.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from sciml.distributed import world
from sciml.models import CosmoFlow, UNet
from sciml.spatial_parallel import SpatialMesh, parallelize, spatial_mean
from sciml.training import RESUMABLE_FIELDS, TrainResult, fit, fit_fused
from sciml.training.runs.record import PlainValue, plain, record_binds
from sciml.training.setup import LossFn, LossOutput
from sciml.training.sweeps import check_sweep
from sciml.volumes.config import MODELS, VolumeTraining
from sciml.volumes.dataset import ShardedVolumes
from sciml.volumes.mesh_record import choose_mesh, full_mesh
from sciml.volumes.stats import run_stats
from sciml.volumes.volume_record import (
    VOLUMES_RECORD,
    check_resume,
    check_val,
    describe,
    record_volumes,
)

__all__ = ["build_model", "learning_rate_factor", "train_volumes", "train_volumes_fused"]

#: Classes of the generated segmentation labels.
CLASSES = 3
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def learning_rate_factor(epoch: int, options: VolumeTraining) -> float:
    """The multiple of the peak learning rate in ``epoch`` (0-based): warm-up, then steps."""
    if epoch < options.warmup_epochs:
        return (epoch + 1) / options.warmup_epochs
    return float(options.decay ** sum(epoch >= e for e in options.decay_epochs))


def build_model(options: VolumeTraining, in_channels: int, outputs: int) -> nn.Module:
    """The run's model (CosmoFlow or the U-Net, module docstring) in ``options.dtype``."""
    return _model(options, in_channels, outputs).to(_DTYPES[options.dtype])


def _model(options: VolumeTraining, in_channels: int, outputs: int) -> nn.Module:
    if options.model == "cosmoflow":
        return CosmoFlow(
            in_channels,
            outputs,
            base_filters=options.width,
            n_conv=options.levels,
            dense=(128, 64),
            dropout=options.dropout,
            output_scale=1.2,
        )
    return UNet(
        in_channels,
        CLASSES,
        dims=3,
        base_channels=options.width,
        depth=options.levels,
        norm="batch",
        upsample="transpose",
    )


def _loss_fn(options: VolumeTraining, mesh: SpatialMesh) -> LossFn:
    def cosmoflow(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> LossOutput:
        x, y = batch
        pred = model(x)
        return {
            "loss": nn.functional.mse_loss(pred, y),
            "mae": (pred - y).abs().mean().detach(),
        }

    def unet3d(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> LossOutput:
        x, labels = batch
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, labels, reduction="none")
        hits = (logits.argmax(1) == labels).to(logits.dtype)
        return {"loss": spatial_mean(loss, mesh), "accuracy": spatial_mean(hits, mesh).detach()}

    return cosmoflow if options.model == "cosmoflow" else unet3d


def _check_levels(options: VolumeTraining, data: ShardedVolumes) -> None:
    """Refuse ``--levels`` that the volumes of ``data`` are too small or too odd for.

    The U-Net halves every size ``levels`` times and doubles it back, so each
    size must divide by ``2**levels``; CosmoFlow's poolings need each size to
    be at least ``2**levels``.

    Raises:
        ValueError: Naming ``--levels``, the store, its sizes and the levels that fit.
    """
    factor, sizes = 2**options.levels, data.shape
    if options.model == "unet3d":
        fits = all(n % factor == 0 for n in sizes)
        need = f"each of its sizes must divide by 2**{options.levels} = {factor}"
        best = max((lv for lv in range(1, 32) if all(n % 2**lv == 0 for n in sizes)), default=0)
    else:
        fits = min(sizes) >= factor
        need = f"each of its sizes must be at least 2**{options.levels} = {factor}"
        best = max(min(sizes).bit_length() - 1, 0)
    if not fits:
        what = "the U-Net halves" if options.model == "unet3d" else "CosmoFlow pools"
        hint = f"--levels {best} fits" if best else "no --levels fits"
        raise ValueError(
            f"--levels {options.levels}: {what} the volume {options.levels} times, so {need}; "
            f"the volumes of {data.path} are {'x'.join(map(str, sizes))} (z, y, x) ({hint})"
        )


def _open(options: VolumeTraining, mesh: SpatialMesh, path: Path, option: str) -> ShardedVolumes:
    """``path``'s volumes for this rank (no statistics yet); errors name ``option``."""
    try:
        return ShardedVolumes(
            path, mesh=mesh, target=MODELS[options.model], dtype=_DTYPES[options.dtype]
        )
    except ValueError as err:
        raise type(err)(f"{option}: {err}") from err


def _options_record(options: VolumeTraining) -> dict[str, PlainValue]:
    """The options a resumed run must keep (the grid asked for is recorded as chosen)."""
    kept = {k: v for k, v in asdict(options).items() if k not in ("mesh", "config")}
    loop = {k: v for k, v in asdict(options.config).items() if k not in RESUMABLE_FIELDS}
    return {k: plain(v) for k, v in (kept | {"config": loop}).items()}


def _mesh(sizes: dict[str, int]) -> SpatialMesh:
    """The mesh of a grid's sizes (:data:`~sciml.spatial_parallel.mesh.MESH_AXES`)."""
    return SpatialMesh(
        data=sizes["data"], depth=sizes["depth"], height=sizes["height"], width=sizes["width"]
    )


def _datasets(
    options: VolumeTraining,
    sizes: dict[str, int],
    train: Path,
    val: Path | None,
    run_dir: Path,
) -> tuple[ShardedVolumes, ShardedVolumes | None, dict[str, PlainValue]]:
    """The volumes and the run's record, every check done before the statistics pass."""
    mesh = _mesh(sizes)
    train_set = _open(options, mesh, train, "DATA")
    val_set = None if val is None else _open(options, mesh, val, "--val")
    train_record = describe(train_set)
    val_record = None if val_set is None else describe(val_set)
    if val_record is not None:
        check_val(train_record, val_record)
    grid: dict[str, PlainValue] = dict(full_mesh(sizes))
    record = _options_record(options) | {"train": train_record, "val": val_record, "mesh": grid}
    _check_levels(options, train_set)
    check_resume(run_dir, record)
    started = record_binds(run_dir, VOLUMES_RECORD)  # else its statistics may be of other data
    stats = run_stats(train_set, run_dir, replica=(mesh.data_index, mesh.data), cached=started)
    train_set.set_stats(stats)
    if val_set is not None:
        val_set.set_stats(stats)
    stats_record: dict[str, PlainValue] = dict(stats.record())
    return train_set, val_set, record | {"norm_stats": stats_record}


@dataclass(frozen=True)
class _Run:
    """What ``fit`` needs for one run, its records written."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LambdaLR
    train_set: ShardedVolumes
    val_set: ShardedVolumes | None
    loss_fn: LossFn


def _prepare(
    train: Path | str,
    options: VolumeTraining,
    run_dir: Path,
    val: Path | str | None,
    device: torch.device | None,
) -> _Run:
    """Check the run's inputs, read its statistics, build its model and record it."""
    sizes = choose_mesh(run_dir, options.mesh)  # another grid than the recorded one is refused
    train_set, val_set, record = _datasets(
        options, sizes, Path(train), None if val is None else Path(val), run_dir
    )
    mesh = _mesh(sizes)
    outputs = train_set.target_shape[0] if options.model == "cosmoflow" else CLASSES
    torch.manual_seed(options.config.seed)
    model = build_model(options, len(train_set.channels()), outputs)
    # The volume shape is declared, so no forward pass asks the ranks for it.
    model = parallelize(model.to(device or torch.device("cpu")), mesh, input_shape=train_set.shape)
    if options.model == "cosmoflow":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(
            model.parameters(), lr=options.lr, momentum=0.9
        )
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=options.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: learning_rate_factor(epoch, options)
    )
    record_volumes(run_dir, record)
    return _Run(model, optimizer, schedule, train_set, val_set, _loss_fn(options, mesh))


def train_volumes(
    train: Path | str,
    options: VolumeTraining,
    run_dir: Path | str,
    *,
    val: Path | str | None = None,
    device: torch.device | None = None,
    preempt_after: int | None = None,
) -> TrainResult:
    """Train on every rank of the initialised process group; see the module docstring.

    Args:
        train: The training volumes (``sciml cosmoflow data`` / ``sciml unet3d data``).
        options: The run's options (:class:`~sciml.volumes.config.VolumeTraining`).
        run_dir: The run folder (checkpoints, ``metrics.csv``, ``perf.csv`` and the
            run's record ``volumes.json``: its options, volumes, grid and statistics); an
            interrupted run resumes from it, on the recorded grid, options and volumes only
            (from its first checkpoint on: a run that failed before it reruns in the same
            folder with corrected inputs).
        val: Validation volumes, normalised with the training statistics.
        device: Where the model runs (default: the CPU).
        preempt_after: Act on this rank as on SIGUSR1 once this optimiser step is
            done (see :func:`sciml.training.fit`): the run checkpoints and stops.

    Raises:
        ValueError: If the mesh does not match the number of processes or the
            grid recorded in ``run_dir``, the files are damaged, do not fit the
            model, each other (``val``) or the volumes recorded in ``run_dir``, or the
            options differ from those recorded there (a resumed run keeps them);
            all checked before the statistics pass (named in the command line's
            terms: ``DATA``, ``--val``, ``--levels``, ``--run-dir``).
    """
    run_dir = Path(run_dir)
    run = _prepare(train, options, run_dir, val, device)
    # a run that never checkpointed has nothing to resume: it starts over
    started = record_binds(run_dir, VOLUMES_RECORD)
    return fit(
        run.model,
        run.optimizer,
        run.train_set,
        run.loss_fn,
        run_dir=run_dir,
        config=options.config,
        val_dataset=run.val_set,
        scheduler=run.schedule,
        resume=started,
        preempt_after=preempt_after,
        record=False,  # the run's one record is volumes.json
    )


def train_volumes_fused(
    trains: Sequence[Path | str],
    options: Sequence[VolumeTraining],
    run_dirs: Sequence[Path | str],
    *,
    vals: Sequence[Path | str] | None = None,
    device: torch.device | None = None,
    preempt_after: int | None = None,
) -> list[TrainResult]:
    """Train several runs of one network in one process, fused; each as :func:`train_volumes`.

    The runs share the architecture and the training loop's settings and differ in seed
    (``options[k].config.seed``), learning rate and data: each reads its own training
    volumes (as many as the others) and validation volumes, and writes its own run folder,
    which is what :func:`train_volumes` writes for it (:func:`sciml.training.fit_fused`).
    One process only, on a mesh of one rank.

    Args:
        trains: Each run's training volumes.
        options: Each run's options.
        run_dirs: Each run's folder (resumed as :func:`train_volumes` resumes it).
        vals: Each run's validation volumes.
        device: Where the models run (default: the CPU).
        preempt_after: Stop every run after this optimiser step, as on SIGUSR1.

    Raises:
        ValueError: Lists of different lengths, runs that cannot be fused (named), and
            every error of :func:`train_volumes`.
    """
    count = len(trains)
    wanted = {"options": len(options), "run_dirs": len(run_dirs)}
    if vals is not None:
        wanted["vals"] = len(vals)
    if not count or any(n != count for n in wanted.values()):
        raise ValueError(
            f"train_volumes_fused needs one entry per run in each list, got {count} trains and "
            + ", ".join(f"{n} {name}" for name, n in wanted.items())
        )
    if world()[1] > 1:
        raise ValueError(
            "train_volumes_fused trains its runs in one process; under torch.distributed train "
            "each run with train_volumes"
        )
    check_sweep(options, run_dirs, label="options[{}]")
    lengths = [
        len(_open(opts, SpatialMesh(), Path(train), f"trains[{k}]"))
        for k, (train, opts) in enumerate(zip(trains, options, strict=True))
    ]
    if len(set(lengths)) > 1:
        raise ValueError(
            f"the runs' training volumes hold {lengths} samples: fused runs take the same steps, "
            "so each run needs as many volumes"
        )
    runs = [
        _prepare(train, opts, Path(run_dir), None if vals is None else vals[k], device)
        for k, (train, opts, run_dir) in enumerate(zip(trains, options, run_dirs, strict=True))
    ]
    # a sweep none of whose runs checkpointed has nothing to resume, as train_volumes
    started = any(record_binds(run_dir, VOLUMES_RECORD) for run_dir in run_dirs)
    return fit_fused(
        [run.model for run in runs],
        [run.optimizer for run in runs],
        [run.train_set for run in runs],
        runs[0].loss_fn,
        run_dirs=list(run_dirs),
        configs=[opts.config for opts in options],
        val_dataset=[run.val_set for run in runs],
        schedulers=[run.schedule for run in runs],
        resume=started,
        preempt_after=preempt_after,
        record=False,  # the run's one record is volumes.json
    )
