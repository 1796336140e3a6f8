"""The process grid of a training run: ``--mesh auto`` from the planner, recorded with the run.

``sciml cosmoflow|unet3d train --mesh auto --global-batch N`` chooses the grid
this way (:func:`auto_mesh`: :func:`plan_mesh` through
:func:`sciml.volumes.mesh_record.choose_mesh`):

* **What is priced**: the run's own model (its width, levels and dtype) on one
  step's global input ``(N, C, D, H, W)``, ``C, D, H, W`` read from the data
  file, for every ``data x depth x height x width`` grid of the launch's world
  size (:func:`sciml.spatial_parallel.planner.plan.recommend`). The global batch is
  what stays fixed while grids are compared; the fastest grid that fits the
  memory and whose ``data`` divides ``N`` is taken, and each of its replicas
  trains on ``N / data`` samples per step.
* **The profile** (``--profile h100|a100|calibrated|FILE``): by default, on
  CUDA the built-in profile whose name is in the device's name (``NVIDIA H100
  80GB HBM3`` -> ``h100``, the SXM figures), else the calibration cache of
  ``sciml spatial plan --calibrate``; on the CPU the calibration cache. With
  neither it is an error saying what to run: no constants are guessed.
* **The memory per rank** (``--memory 80GiB``): by default the CUDA device's
  total memory; on the CPU the profile's memory (a calibration records the
  machine's physical memory) divided by the ranks on this node.
* **One grid on every rank**: rank 0 decides and every rank takes its decision
  (a gather of objects over the CPU group); an error on rank 0 (no grid fits,
  naming the smallest need; the world cannot split the volume) is raised on
  every rank.
* **Recorded**: the grid a run trains on is written to its record
  (``mesh`` in ``RUN_DIR/volumes.json``) once its inputs are checked
  (:mod:`sciml.volumes.mesh_record`). A run folder
  with a record keeps its grid: ``--mesh auto`` reuses the recorded grid
  without planning again (so a resume is exact even when the planner, the
  profile or the calibration changed since), and an explicit ``--mesh`` that
  differs from the record is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from sciml.distributed.collectives import world
from sciml.distributed.launch import detect_launch
from sciml.spatial_parallel.planner.plan import Plan, recommend
from sciml.spatial_parallel.planner.profile import PROFILES, Profile, default_cache, get_profile
from sciml.volumes.config import MODELS, VolumeTraining
from sciml.volumes.dataset import ShardedVolumes
from sciml.volumes.mesh_record import MeshChoice, choose_mesh, full_mesh
from sciml.volumes.train import CLASSES, build_model

__all__ = ["auto_mesh", "default_profile", "plan_mesh", "rank_memory"]

#: Grids shown in the printed table.
TABLE_ROWS = 3


def auto_mesh(
    data: Path | str,
    options: VolumeTraining,
    run_dir: Path | str,
    *,
    global_batch: int,
    device: torch.device,
    profile: str | None = None,
    memory: float | None = None,
) -> VolumeTraining:
    """``options`` on the grid of ``--mesh auto`` (collective: call on every rank).

    The grid is the run folder's record, else the planner's for this launch's
    world size (:func:`plan_mesh`); each of its data replicas trains on
    ``global_batch / data`` samples per step.

    Args:
        data: The training volumes.
        options: The run's options (their mesh and batch size are replaced).
        run_dir: The run folder (its recorded grid wins).
        global_batch: Samples of one step over all replicas.
        device: This rank's device (it picks the default profile and memory).
        profile: ``h100``, ``a100``, ``calibrated`` or a profile file; ``None``:
            :func:`default_profile`.
        memory: Bytes per rank; ``None``: :func:`rank_memory`'s default.

    Raises:
        ValueError: If ``global_batch`` is not an integer >= 1; on every rank, if no
            grid can be chosen (the planner's reason), or the recorded grid's data
            size does not divide the batch.
    """
    _check_global_batch(global_batch)

    def plan() -> MeshChoice:
        machine = get_profile(profile) if profile else default_profile(device)
        local = detect_launch().local_world_size
        per_rank = rank_memory(memory, machine, device, local_ranks=local)
        return plan_mesh(
            data,
            options,
            global_batch=global_batch,
            world_size=world()[1],
            memory=per_rank,
            profile=machine,
        )

    mesh = choose_mesh(run_dir, None, plan=plan)
    if global_batch % mesh["data"]:
        raise ValueError(
            f"--global-batch {global_batch} does not split over the {mesh['data']} data "
            f"replicas of the grid {mesh}"
        )
    loop = dataclasses.replace(options.config, batch_size=global_batch // mesh["data"])
    return dataclasses.replace(options, mesh=mesh, config=loop)


def default_profile(device: torch.device) -> Profile:
    """The planner profile of ``device`` when ``--profile`` is not given (module docstring).

    Raises:
        ValueError: If no built-in profile matches a CUDA device and there is no
            calibration, or on the CPU without a calibration (says what to run).
    """
    where, calibrate = "this CPU", "sciml spatial plan --calibrate"
    if device.type == "cuda":
        calibrate += " --device cuda"
        name = torch.cuda.get_device_name(device)
        for key in PROFILES:
            if key in name.lower():
                return PROFILES[key]
        where = f"the GPU {name!r} (no built-in profile among {sorted(PROFILES)} matches it)"
    cache = default_cache()
    if cache.exists():
        return get_profile("calibrated")
    raise ValueError(
        f"--mesh auto needs a planner profile for {where}, and there is no calibration at "
        f"{cache}: run `{calibrate}` or pass --profile {'|'.join(PROFILES)}|FILE"
    )


def rank_memory(
    memory: float | None, profile: Profile, device: torch.device, *, local_ranks: int
) -> float:
    """Bytes per rank the grid must fit in: ``memory``, else the device's (module docstring).

    Raises:
        ValueError: If neither ``memory`` nor the device or profile gives one.
    """
    if memory is not None:
        return float(memory)
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    if profile.memory is None:
        raise ValueError(f"profile {profile.name!r} has no memory: give --memory, e.g. 8GiB")
    return profile.memory / max(1, local_ranks)


def plan_mesh(
    data: Path | str,
    options: VolumeTraining,
    *,
    global_batch: int,
    world_size: int,
    memory: float,
    profile: Profile,
) -> MeshChoice:
    """Price every grid of ``world_size`` ranks for the run's model on ``data``; pick one.

    Args:
        data: The training volumes (their channels and shape make the input).
        options: The run's options (model, width, levels, dtype; the mesh is ignored).
        global_batch: Samples of one step over all replicas.
        world_size: Ranks of the launch.
        memory: Bytes per rank.
        profile: The machine.

    Raises:
        ValueError: If no grid fits (naming the smallest need), none can split
            the volume, none that fits has a ``data`` size dividing the batch, or
            the batch is not a positive integer.
    """
    _check_global_batch(global_batch)
    volumes = ShardedVolumes(data, target=MODELS[options.model])
    channels = len(volumes.channels())
    outputs = volumes.target_shape[0] if options.model == "cosmoflow" else CLASSES
    model = build_model(options, channels, outputs)
    plan = recommend(
        model,
        (global_batch, channels, *volumes.shape),
        world=world_size,
        memory=memory,
        profile=profile,
        optimizer="momentum" if options.model == "cosmoflow" else "adam",
    )
    return MeshChoice(_dividing(plan, global_batch), plan.table(top=TABLE_ROWS))


def _check_global_batch(global_batch: int) -> None:
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ValueError(f"global_batch must be an integer >= 1, got {global_batch!r}")


def _dividing(plan: Plan, global_batch: int) -> dict[str, int]:
    """The fastest fitting grid whose data size divides the batch (the planner's errors)."""
    best = plan.best  # raises the planner's error when no grid fits or splits the volume
    for est in (best, *plan.fitting[1:]):
        if global_batch % est.grid[0] == 0:
            return full_mesh(est.mesh)
    sizes = sorted({est.grid[0] for est in plan.fitting})
    raise ValueError(
        f"no grid that fits has a data size dividing the global batch {global_batch} "
        f"(data sizes of the grids that fit: {sizes}); choose a global batch divisible by one"
    )
