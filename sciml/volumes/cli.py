"""``sciml cosmoflow data|train`` and ``sciml unet3d data|train``.

``train`` runs on every process of a launch (torchrun, srun, or one
process), e.g.::

    sciml cosmoflow data cosmo.zarr --samples 64 --size 32
    torchrun --nproc-per-node 4 --no-python sciml cosmoflow train cosmo.zarr
        --run-dir runs/cosmo --mesh data=2,depth=2   (one line)

and returns :data:`sciml.training.EXIT_REQUEUE` (3) after checkpointing on
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
from pathlib import Path

from sciml.cli import (
    Subparsers,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from sciml.spatial_parallel.cli import parse_mesh

#: What each workflow's ``data`` writes, and the defaults of its ``train``.
WORKFLOWS = {
    "cosmoflow": {
        "help": "CosmoFlow: regress cosmological parameters from 3D volumes",
        "data": "cosmology-like volumes (4 redshift channels, int16 counts) and their parameters",
        "lr": 0.01,
        "width": 16,
        "levels": 4,
    },
    "unet3d": {
        "help": "3D U-Net: segment volumes into voids, sheets and halos",
        "data": "noisy Gaussian random fields and 3-class labels of their structures",
        "lr": 0.001,
        "width": 16,
        "levels": 3,
    },
}


def mesh_option(text: str) -> dict[str, int]:
    """``--mesh``: ``data=2,depth=2`` (axes left out are 1); ``auto`` is not available yet."""
    if text.strip() == "auto":
        raise argparse.ArgumentTypeError(
            "--mesh auto needs the planner (sciml spatial plan), which is not available yet; "
            "give the sizes, e.g. --mesh data=2,depth=2"
        )
    return parse_mesh(text)


def epoch_list(text: str) -> tuple[int, ...]:
    """``--decay-epochs``: comma-separated epochs, e.g. ``32,64`` (empty: no decay)."""
    try:
        return tuple(positive_int(item) for item in text.split(",") if item.strip())  # type: ignore[misc]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated epochs >= 1, e.g. 32,64, got {text!r}"
        ) from None


def _cmd_data(args: argparse.Namespace) -> int:
    from sciml.volumes.data import write_cosmology, write_segmentation

    write = write_cosmology if args.workflow == "cosmoflow" else write_segmentation
    path = write(args.out, samples=args.samples, size=args.size, seed=args.seed, chunks=args.chunks)
    print(f"wrote {args.samples} samples of {args.size}^3 voxels to {path}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from sciml.distributed import init_distributed, print0
    from sciml.io_utils import atomic_write_text
    from sciml.training import EXIT_REQUEUE, TrainConfig
    from sciml.volumes.train import VolumeTraining, train_volumes

    config = TrainConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        seed=args.seed,
        num_workers=args.workers,
        micro_batches=args.micro_batches,
        precision=args.precision,
        checkpoint_every=args.checkpoint_every,
        progress=not args.no_progress,
    )
    options = VolumeTraining(
        args.workflow,
        mesh=args.mesh or {},
        config=config,
        lr=args.lr,
        width=args.width,
        levels=args.levels,
        dropout=args.dropout,
        warmup_epochs=args.warmup_epochs,
        decay_epochs=args.decay_epochs,
        decay=args.decay,
        dtype=args.dtype,
    )
    with init_distributed(timeout=args.timeout) as ctx:
        result = train_volumes(args.data, args.run_dir, options, val=args.val, device=ctx.device)
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


def _add_train(sub: Subparsers, workflow: str, defaults: dict[str, object]) -> None:
    train = sub.add_parser("train", help="train on every process of a torchrun/srun launch")
    train.add_argument("data", type=Path, help="training volumes (from the data command)")
    train.add_argument(
        "--run-dir", type=Path, required=True, help="run folder (resumed if present)"
    )
    train.add_argument("--val", type=Path, default=None, help="validation volumes")
    train.add_argument(
        "--mesh", type=mesh_option, default=None, help="process grid, e.g. data=2,depth=2 (none: 1)"
    )
    train.add_argument("--epochs", type=positive_int, default=10, help="passes over the data")
    train.add_argument(
        "--batch-size", type=positive_int, default=4, help="samples per replica and step"
    )
    train.add_argument(
        "--lr", type=positive_float, default=defaults["lr"], help="peak learning rate"
    )
    train.add_argument("--seed", type=non_negative_int, default=0, help="seed of weights and order")
    train.add_argument(
        "--workers", type=non_negative_int, default=2, help="loader processes per rank"
    )
    train.add_argument(
        "--micro-batches", type=positive_int, default=1, help="gradient accumulation parts"
    )
    train.add_argument(
        "--precision", choices=("fp32", "bf16"), default="fp32", help="autocast dtype"
    )
    train.add_argument(
        "--dtype", choices=("float32", "float64"), default="float32", help="weights and data"
    )
    train.add_argument(
        "--checkpoint-every", type=positive_int, default=None, help="also checkpoint every N steps"
    )
    train.add_argument(
        "--width", type=positive_int, default=defaults["width"], help="first level's filters"
    )
    train.add_argument(
        "--levels", type=positive_int, default=defaults["levels"], help="conv blocks / poolings"
    )
    train.add_argument(
        "--dropout",
        type=non_negative_float,
        default=0.0,
        help="dropout of CosmoFlow's dense layers",
    )
    train.add_argument(
        "--warmup-epochs", type=non_negative_int, default=0, help="linear warm-up epochs"
    )
    train.add_argument(
        "--decay-epochs", type=epoch_list, default=(), help="epochs of step decay, e.g. 32,64"
    )
    train.add_argument(
        "--decay", type=positive_float, default=0.25, help="factor of each step decay"
    )
    train.add_argument(
        "--timeout", type=positive_float, default=600.0, help="seconds a collective may wait"
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=_cmd_train, workflow=workflow)


def register(subparsers: Subparsers) -> None:
    """Add ``cosmoflow`` and ``unet3d`` with their ``data`` and ``train`` commands."""
    for workflow, about in WORKFLOWS.items():
        group = subparsers.add_parser(workflow, help=str(about["help"]))
        sub = group.add_subparsers(dest="action", metavar="ACTION", required=True)
        _add_data(sub, workflow, str(about["data"]))
        _add_train(sub, workflow, about)
