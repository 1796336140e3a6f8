"""The process grid of a training run: ``--mesh auto`` from the planner, recorded with the run.

``sciml cosmoflow|unet3d train --mesh auto --global-batch N`` chooses the grid
this way (:func:`choose_mesh`, :func:`plan_mesh`):

* **What is priced**: the run's own model (its width, levels and dtype) on one
  step's global input ``(N, C, D, H, W)``, ``C, D, H, W`` read from the data
  file, for every ``data x depth x height x width`` grid of the launch's world
  size (:func:`sciml.spatial_parallel.planner.recommend`). The global batch is
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
* **Recorded**: a run's grid is written to ``RUN_DIR/mesh.json`` (with the
  plan's table when chosen automatically) before it trains. A run folder with
  a record keeps its grid: ``--mesh auto`` reuses the recorded grid without
  planning again (so a resume is exact even when the planner, the profile or
  the calibration changed since), and an explicit ``--mesh`` that differs from
  the record is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from sciml.collectives import gather_objects, world
from sciml.io_utils import atomic_write_text
from sciml.spatial_parallel.mesh import MESH_AXES
from sciml.spatial_parallel.planner import Plan, recommend
from sciml.spatial_parallel.planner_profile import PROFILES, Profile, default_cache, get_profile
from sciml.volumes.train import CLASSES, MODELS, VolumeTraining, build_model
from sciml.xrvolumes import ShardedVolumes

__all__ = [
    "RECORD",
    "MeshChoice",
    "choose_mesh",
    "default_profile",
    "plan_mesh",
    "rank_memory",
    "read_record",
]

#: The file of a run folder that records its grid.
RECORD = "mesh.json"
#: Grids shown in the printed and recorded table.
TABLE_ROWS = 3


@dataclass(frozen=True)
class MeshChoice:
    """A grid chosen by the planner.

    Attributes:
        mesh: Sizes of every axis of :data:`~sciml.spatial_parallel.mesh.MESH_AXES`.
        table: The plan's table (the choice and the runners-up).
    """

    mesh: dict[str, int]
    table: str


def full_mesh(sizes: Mapping[str, int]) -> dict[str, int]:
    """``sizes`` with every axis of the mesh (missing axes are 1)."""
    return {axis: int(sizes.get(axis, 1)) for axis in MESH_AXES}


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
            the volume, or none that fits has a ``data`` size dividing the batch.
    """
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


def read_record(run_dir: Path | str) -> dict[str, int] | None:
    """The grid recorded in ``run_dir`` (``None``: none recorded).

    Raises:
        ValueError: If the record cannot be read or is not a grid.
    """
    path = Path(run_dir) / RECORD
    if not path.exists():
        return None
    try:
        mesh = json.loads(path.read_text())["mesh"]
        if set(mesh) == set(MESH_AXES) and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in mesh.values()
        ):
            return full_mesh(mesh)
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"cannot read the run's grid from {path}: {err}") from None
    raise ValueError(f"{path} does not record a grid: expected sizes of {MESH_AXES}, got {mesh}")


def _decide(
    run_dir: Path, mesh: Mapping[str, int] | None, plan: Callable[[], MeshChoice] | None
) -> tuple[dict[str, int], str]:
    """Rank 0: the grid and what to print (see :func:`choose_mesh`); writes the record."""
    recorded = read_record(run_dir)
    if recorded is not None:
        if mesh is not None and full_mesh(mesh) != recorded:
            raise ValueError(
                f"--mesh {full_mesh(mesh)} differs from the grid {recorded} recorded in "
                f"{run_dir / RECORD} when this run started; resume with that grid (or --mesh "
                "auto), or start a new --run-dir"
            )
        return recorded, f"the grid recorded in {run_dir / RECORD}: {recorded}"
    if mesh is None:
        if plan is None:
            raise ValueError("--mesh auto needs the planner's inputs (plan=)")
        choice = plan()
        chosen, note = choice.mesh, f"--mesh auto chose {choice.mesh}:\n{choice.table}"
    else:
        chosen, note = full_mesh(mesh), ""
    size = world()[1]
    if math.prod(chosen.values()) != size:
        raise ValueError(
            f"--mesh {chosen} has {math.prod(chosen.values())} ranks but the world size is {size}"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"mesh": chosen, "source": "auto" if mesh is None else "given", "plan": note or None}
    atomic_write_text(run_dir / RECORD, json.dumps(record, indent=1) + "\n")
    return chosen, note


def choose_mesh(
    run_dir: Path | str,
    mesh: Mapping[str, int] | None,
    *,
    plan: Callable[[], MeshChoice] | None = None,
) -> dict[str, int]:
    """The run's grid, the same on every rank (collective: call on every rank).

    Rank 0 reads the record of ``run_dir``, else takes ``mesh`` or (``mesh=None``,
    ``--mesh auto``) calls ``plan``, prints the plan's table, writes the record,
    and every rank returns its decision (see the module docstring).

    Args:
        run_dir: The run folder.
        mesh: The grid asked for (missing axes are 1), or ``None`` for the planner's.
        plan: Makes the planner's choice (only called on rank 0, only when needed).

    Raises:
        ValueError: On every rank, if rank 0 could not decide (its error, named).
    """
    rank = world()[0]
    decision: tuple[dict[str, int] | None, str]
    error: Exception | None = None
    if rank == 0:
        try:
            decision = _decide(Path(run_dir), mesh, plan)
        except Exception as err:  # noqa: BLE001 - sent to every rank, raised below
            error, decision = err, (None, f"{type(err).__name__}: {err}")
    else:
        decision = (None, "")
    chosen, note = gather_objects(decision)[0]
    if error is not None:
        raise error
    if chosen is None:
        raise ValueError(f"rank 0 could not choose the grid: {note}")
    if rank == 0 and note:
        print(note, flush=True)
    return chosen
