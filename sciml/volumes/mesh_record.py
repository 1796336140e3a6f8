"""A run's process grid, decided once for every rank and kept in the run's record.

:func:`choose_mesh` (collective) gives every rank rank 0's decision: the grid
recorded in the run folder when there is one (``mesh`` of ``RUN_DIR/volumes.json``,
:mod:`sciml.volumes.volume_record`; an explicit grid that differs is refused; ``--mesh
auto`` takes it without planning again, so a resume is exact whatever changed since),
else the grid asked for, else the planner's (``plan``, see :mod:`sciml.volumes.auto_mesh`).
Until the run's first checkpoint the recorded grid does not bind: a run that failed before
it takes another grid asked for. :func:`sciml.volumes.train.train_volumes` records the
grid with the rest of the run once its inputs are checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sciml.distributed.collectives import on_rank0, world
from sciml.spatial_parallel.mesh import MESH_AXES
from sciml.training.runs.record import record_binds
from sciml.volumes.volume_record import RECORD, VOLUMES_RECORD, read_volumes_record

__all__ = ["MeshChoice", "choose_mesh", "full_mesh", "read_record"]


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
    """``sizes`` with every axis of the mesh (missing axes are 1).

    Raises:
        ValueError: For an unknown axis or a size that is not an integer >= 1.
    """
    unknown = sorted(set(sizes) - set(MESH_AXES))
    if unknown:
        raise ValueError(f"mesh axes {unknown} are unknown; the axes are {MESH_AXES}")
    bad = {k: v for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1}
    if bad:
        raise ValueError(f"mesh sizes must be integers >= 1, got {bad}")
    return {axis: sizes.get(axis, 1) for axis in MESH_AXES}


def read_record(run_dir: Path | str) -> dict[str, int] | None:
    """The grid recorded in ``run_dir`` (``None``: none recorded).

    Raises:
        ValueError: If the record cannot be read, is of another format or holds no grid.
    """
    record = read_volumes_record(run_dir)
    if record is None:
        return None
    mesh = record.get("mesh")
    if (
        isinstance(mesh, dict)
        and set(mesh) == set(MESH_AXES)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in mesh.values())
    ):
        return full_mesh(mesh)
    raise ValueError(
        f"{Path(run_dir) / RECORD} does not record a grid: expected sizes of {MESH_AXES}, "
        f"got {mesh}"
    )


def _decide(
    run_dir: Path, mesh: Mapping[str, int] | None, plan: Callable[[], MeshChoice] | None
) -> tuple[dict[str, int], str]:
    """Rank 0: the grid and what to print (see :func:`choose_mesh`)."""
    recorded = read_record(run_dir)
    if recorded is not None and mesh is not None and not record_binds(run_dir, VOLUMES_RECORD):
        recorded = None  # a run that never checkpointed: the grid asked for replaces it
    if recorded is not None:
        if mesh is not None and full_mesh(mesh) != recorded:
            raise ValueError(
                f"--mesh {full_mesh(mesh)} differs from the grid {recorded} recorded in "
                f"{run_dir / RECORD} when this run started; resume with that grid (or --mesh "
                "auto), or start a new --run-dir"
            )
        note = f"the grid recorded in {run_dir / RECORD}: {recorded}" if mesh is None else ""
        return recorded, note
    if mesh is not None:
        return full_mesh(mesh), ""
    if plan is None:
        raise ValueError("choosing the grid (mesh=None) needs the planner's choice (plan=)")
    choice = plan()
    return full_mesh(choice.mesh), f"--mesh auto chose {choice.mesh}:\n{choice.table}"


def choose_mesh(
    run_dir: Path | str,
    mesh: Mapping[str, int] | None,
    *,
    plan: Callable[[], MeshChoice] | None = None,
) -> dict[str, int]:
    """The run's grid, the same on every rank (collective: call on every rank).

    Rank 0 reads the record of ``run_dir``, else takes ``mesh`` or, for
    ``mesh=None`` (``--mesh auto``), calls ``plan`` and prints its table; every
    rank returns rank 0's decision.

    Args:
        run_dir: The run folder.
        mesh: The grid asked for (missing axes are 1), or ``None`` for the planner's.
        plan: Makes the planner's choice (called on rank 0 only, only when needed).

    Raises:
        ValueError: On every rank, if rank 0 could not decide (its error, named).
    """
    chosen, note = on_rank0(lambda: _decide(Path(run_dir), mesh, plan))
    if world()[0] == 0 and note:
        print(note, flush=True)
    return chosen
