"""``sciml cosmoflow data|register|train`` and ``sciml unet3d data|register|train``.

``register STORE`` records a store changed on purpose after ``data`` wrote it (values or
variables written with zarr or xarray) as it now is (:func:`sciml.datasets.store.register_store`):
``train`` refuses a store that differs from its manifest.

``train`` runs on every process of a launch (torchrun, srun, or one
process), e.g.::

    sciml cosmoflow data cosmo.zarr --samples 64 --size 32
    torchrun --nproc-per-node 4 --no-python sciml cosmoflow train cosmo.zarr
        --run-dir runs/cosmo --mesh data=2,depth=2   (one line)

``--mesh auto --global-batch N`` takes the grid from the planner instead
(:mod:`sciml.volumes.auto_mesh`: the profile, the memory, one decision for
every rank, the grid recorded in ``RUN_DIR/volumes.json`` and kept on resume),
and ``train`` returns :data:`sciml.training.EXIT_REQUEUE` (3) after checkpointing on
SIGUSR1/SIGTERM, so that a batch script can requeue the job (``srun``:
``slurm/cosmoflow.sbatch``).

Under torchrun two things differ, and this is the way that works: the
agent dies of a SIGUSR1 sent to it (leaving its workers running without a
checkpoint), so start it with SIGUSR1 ignored (``trap '' USR1`` in the
script; the workers install their own handler) and send the signal to the
workers, each of which torchrun starts in a session of its own (Slurm's
``--signal`` reaches every process of the step; by hand, ``pkill -USR1 -P
AGENT_PID``); and the agent turns the workers' exit code 3 into 1, so the
run also leaves a marker: ``RUN_DIR/requeue`` exists after an interrupted
run and is removed by a completed one::

    trap '' USR1
    torchrun ... --no-python sciml cosmoflow train DATA --run-dir RUN ...
    if [ -e RUN/requeue ]; then scontrol requeue "$SLURM_JOB_ID"; fi
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from sciml.cli_args import (
    Subparsers,
    add_config_arguments,
    config_from_args,
    non_negative_int,
    positive_float,
    positive_int,
)
from sciml.spatial_parallel.cli import memory_size, parse_mesh
from sciml.volumes.config import VolumeTraining

#: What each workflow's ``data`` writes, and the defaults of its ``train``.
WORKFLOWS: dict[str, dict[str, Any]] = {
    "cosmoflow": {
        "help": "CosmoFlow: regress cosmological parameters from 3D volumes",
        "data": "cosmology-like volumes (4 redshift channels, int16 counts) and their parameters",
        "defaults": {"lr": 0.01, "width": 16, "levels": 4},
    },
    "unet3d": {
        "help": "3D U-Net: segment volumes into voids, sheets and halos",
        "data": "noisy Gaussian random fields and 3-class labels of their structures",
        "defaults": {"lr": 0.001, "width": 16, "levels": 3},
    },
}


#: Per-replica batch when ``--batch-size`` is not given (and the mesh is not ``auto``).
BATCH_SIZE = 4
#: The command line's defaults of both workflows' ``train`` where the library's differ.
TRAIN_DEFAULTS = {"num_workers": 2}


def mesh_option(text: str) -> dict[str, int] | str:
    """``--mesh``: ``data=2,depth=2`` (axes left out are 1) or ``auto`` (the planner's grid)."""
    if text.strip() == "auto":
        return "auto"
    return parse_mesh(text)


def _cmd_data(args: argparse.Namespace) -> int:
    from sciml.volumes.data import write_cosmology, write_segmentation

    write = write_cosmology if args.workflow == "cosmoflow" else write_segmentation
    path = write(args.out, samples=args.samples, size=args.size, seed=args.seed, chunks=args.chunks)
    print(f"wrote {args.samples} samples of {args.size}^3 voxels to {path}")
    return 0


def _cmd_register(args: argparse.Namespace) -> int:
    from sciml.datasets.store import register_store

    manifest, changed = register_store(args.store)
    shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    print(f"registered {args.store} as it now is ({manifest}); files changed: {shown or 'none'}")
    return 0


def _check_mesh_options(args: argparse.Namespace) -> None:
    """Options that only ``--mesh auto`` takes, and the batch it needs, named."""
    if args.mesh != "auto":
        only_auto = {"--global-batch": args.global_batch, "--profile": args.profile}
        only_auto["--memory"] = args.memory
        given = [name for name, value in only_auto.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: only with --mesh auto")
        return
    if args.batch_size is not None:
        raise ValueError(
            "--mesh auto takes --global-batch (the samples of a step over all replicas), not "
            "--batch-size: the chosen grid's data replicas split the global batch"
        )
    if args.global_batch is None:
        raise ValueError(
            "--mesh auto needs --global-batch N: the samples of one step over all replicas, "
            "which stay fixed while the planner compares grids"
        )


def _cmd_train(args: argparse.Namespace) -> int:
    from sciml.distributed import init_distributed, print0
    from sciml.io_utils import atomic_write_text
    from sciml.training import EXIT_REQUEUE
    from sciml.volumes.train import train_volumes

    _check_mesh_options(args)
    options = config_from_args(VolumeTraining, args)
    loop = dataclasses.replace(
        options.config, batch_size=args.batch_size or BATCH_SIZE, progress=not args.no_progress
    )
    options = dataclasses.replace(options, model=args.workflow, config=loop)
    with init_distributed(timeout=args.timeout) as ctx:
        if args.mesh == "auto":
            from sciml.volumes.auto_mesh import auto_mesh

            options = auto_mesh(
                args.data,
                options,
                args.run_dir,
                global_batch=args.global_batch,
                device=ctx.device,
                profile=args.profile,
                memory=args.memory,
            )
        else:
            options = dataclasses.replace(options, mesh=args.mesh or {})
        result = train_volumes(args.data, options, args.run_dir, val=args.val, device=ctx.device)
        print0(f"{result.status} after {result.global_step} steps; run folder {result.run_dir}")
        marker = result.run_dir / "requeue"
        if ctx.rank == 0 and result.status == "interrupted":
            atomic_write_text(marker, f"interrupted after {result.global_step} steps\n")
        elif ctx.rank == 0:
            marker.unlink(missing_ok=True)
    return EXIT_REQUEUE if result.status == "interrupted" else 0


def _add_data(sub: Subparsers, workflow: str, about: str) -> None:
    data = sub.add_parser("data", help=f"write {about}")
    data.add_argument("out", type=Path, help="Zarr store to create")
    data.add_argument("--samples", type=positive_int, default=64, help="number of volumes")
    data.add_argument("--size", type=positive_int, default=32, help="edge of each cubic volume")
    data.add_argument(
        "--seed", type=non_negative_int, default=0, help="sample i depends on (seed, i)"
    )
    data.add_argument("--chunks", type=positive_int, default=None, help="chunk edge (size // 4)")
    data.set_defaults(func=_cmd_data, workflow=workflow)


def _add_register(sub: Subparsers, workflow: str) -> None:
    register = sub.add_parser(
        "register",
        help="record a store changed on purpose (written to with zarr or xarray) as it now "
        "is: rewrite its manifest (sciml.datasets.store.register_store)",
    )
    register.add_argument("store", type=Path, help="Zarr store (from the data command)")
    register.set_defaults(func=_cmd_register, workflow=workflow)


def _add_train(sub: Subparsers, workflow: str, defaults: dict[str, object]) -> None:
    """``train``: the launch options by hand, the rest generated from :class:`VolumeTraining`."""
    train = sub.add_parser("train", help="train on every process of a torchrun/srun launch")
    train.add_argument("data", type=Path, help="training volumes (from the data command)")
    train.add_argument(
        "--run-dir", type=Path, required=True, help="run folder (resumed if present)"
    )
    train.add_argument("--val", type=Path, default=None, help="validation volumes")
    train.add_argument(
        "--mesh",
        type=mesh_option,
        default=None,
        help="process grid, e.g. data=2,depth=2 (none: one rank), or auto: the planner's "
        "fastest grid that fits (sciml.volumes.auto_mesh); a resumed run keeps the grid "
        "recorded in RUN_DIR/volumes.json",
    )
    train.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help=f"samples per replica and step ({BATCH_SIZE} when omitted; not with --mesh auto)",
    )
    train.add_argument(
        "--global-batch",
        type=positive_int,
        default=None,
        help="with --mesh auto: samples per step over all replicas, split by the chosen grid",
    )
    train.add_argument(
        "--profile",
        default=None,
        help="with --mesh auto: planner profile h100, a100, calibrated or a profile .json; "
        "unset: the GPU's built-in profile, else the --calibrate cache",
    )
    train.add_argument(
        "--memory",
        type=memory_size,
        default=None,
        help="with --mesh auto: memory per rank, e.g. 80GiB; unset: the GPU's, on the CPU "
        "the profile's over the ranks of the node",
    )
    add_config_arguments(train, VolumeTraining)
    train.add_argument(
        "--timeout", type=positive_float, default=600.0, help="seconds a collective may wait"
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=_cmd_train, workflow=workflow, **defaults)


def register(subparsers: Subparsers) -> None:
    """Add ``cosmoflow`` and ``unet3d`` with their ``data``, ``register`` and ``train`` commands."""
    for workflow, about in WORKFLOWS.items():
        group = subparsers.add_parser(workflow, help=str(about["help"]))
        sub = group.add_subparsers(dest="action", metavar="ACTION", required=True)
        _add_data(sub, workflow, str(about["data"]))
        _add_register(sub, workflow)
        _add_train(sub, workflow, {**TRAIN_DEFAULTS, **about["defaults"]})
