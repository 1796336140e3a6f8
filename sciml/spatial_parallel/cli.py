"""``sciml spatial ...``: inspect a decomposition, check a parallel model locally."""

from __future__ import annotations

import argparse
import functools
import math

from sciml.cli import Subparsers, non_negative_int, positive_int
from sciml.spatial_parallel.mesh import MESH_AXES

#: U-Net depth of ``sciml spatial check``: every spatial size must divide by 2**depth.
CHECK_DEPTH = 2


def parse_mesh(text: str) -> dict[str, int]:
    """``"depth=2,height=2"`` -> ``{"depth": 2, "height": 2}`` (positive sizes, known axes)."""
    mesh: dict[str, int] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--mesh expects e.g. depth=2,height=2, got {text!r}")
        if key not in MESH_AXES:
            raise argparse.ArgumentTypeError(
                f"--mesh: unknown axis {key!r}; the axes are {', '.join(MESH_AXES)}"
            )
        if key in mesh:
            raise argparse.ArgumentTypeError(f"--mesh: axis {key!r} given twice in {text!r}")
        try:
            mesh[key] = positive_int(value.strip())  # type: ignore[assignment]
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(
                f"--mesh expects e.g. depth=2,height=2; {key}={value.strip()!r}: {err}"
            ) from None
    return mesh


def parse_shape(text: str) -> tuple[int, int, int, int, int]:
    """``"1x2x16x16x16"`` -> ``(1, 2, 16, 16, 16)`` (five positive sizes)."""
    parts = text.lower().split("x")
    if len(parts) != 5:
        raise argparse.ArgumentTypeError(f"--shape expects 5 sizes NxCxDxHxW, got {text!r}")
    try:
        shape = tuple(positive_int(v.strip()) for v in parts)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(
            f"--shape expects 5 positive sizes NxCxDxHxW, got {text!r}: {err}"
        ) from None
    return shape  # type: ignore[return-value]


def _cmd_plan(args: argparse.Namespace) -> int:
    from sciml.spatial_parallel.partition import DIM_NAMES, Window, window_plan

    window = Window(args.kernel, args.stride, args.dilation, args.padding, args.padding)
    for name, size in zip(DIM_NAMES, args.shape[2:], strict=True):
        parts = args.mesh.get(name, 1)
        plan = window_plan(window, size, parts, layer="conv", dim=name)
        print(f"{name}: global {size} -> {plan.out_size} over {parts} rank(s)")
        for rank in range(parts):
            lo, hi = plan.blocks[rank]
            a, b = plan.needs[rank]
            print(
                f"  rank {rank}: block [{lo}, {hi}) output {plan.out_blocks[rank]} "
                f"reads [{a}, {b}): halo {max(0, lo - a)} before, {max(0, b - hi)} after"
            )
    return 0


def check_shape(mesh: dict[str, int], shape: tuple[int, ...]) -> None:
    """Raise ValueError unless the check's U-Net can run on ``shape`` split over ``mesh``."""
    from sciml.spatial_parallel.partition import DIM_NAMES

    factor = 2**CHECK_DEPTH
    for name, size in zip(DIM_NAMES, shape[2:], strict=True):
        parts = mesh.get(name, 1)
        if size % factor:
            raise ValueError(
                f"--shape: the check's U-Net (depth {CHECK_DEPTH}) needs spatial sizes "
                f"divisible by {factor}, got {name} = {size}"
            )
        if size // factor < parts:
            raise ValueError(
                f"--shape: {name} = {size} is too small for {parts} ranks: the U-Net's coarsest "
                f"level has {size // factor} voxel(s) along {name}, fewer than the ranks"
            )


def _cmd_check(args: argparse.Namespace) -> int:
    import torch

    from sciml.distributed import spawn
    from sciml.models import UNet
    from sciml.spatial_parallel.testing import check_parallel

    check_shape(args.mesh, args.shape)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    model = UNet(args.shape[1], 2, base_channels=4, depth=CHECK_DEPTH)
    nprocs = math.prod(args.mesh.values())
    run = functools.partial(check_parallel, dtype=dtype, seed=args.seed)
    results = spawn(run, nprocs, args.mesh, model, args.shape)
    print("largest relative error against the float64 single-device model (its bound)")
    header = [f"{name:>19}" for name in ("output", "input grad", "param grads")]
    print(f"{'rank':>4} {'coords':>14} {' '.join(header)} {'ms':>6}")
    for r in results:
        cells = []
        for prefix in ("out", "xgrad", "grad:"):
            keys = [k for k in r.errors if k.startswith(prefix)]
            worst = max(keys, key=lambda k: r.errors[k] / max(r.bounds[k], 1e-300))
            cells.append(f"{r.errors[worst]:.1e} ({r.bounds[worst]:.0e})".rjust(19))
        print(f"{r.rank:>4} {str(r.coords):>14} {' '.join(cells)} {r.seconds * 1e3:>6.0f}")
    failures = {r.rank: r.failures() for r in results if not r.ok}
    if failures:
        for rank, bad in failures.items():
            print(f"MISMATCH on rank {rank}: {bad}")
        return 1
    print("match")
    return 0


def register(subparsers: Subparsers) -> None:
    """Add the ``spatial`` subcommand group."""
    spatial = subparsers.add_parser("spatial", help="spatially parallel 3D CNNs")
    sub = spatial.add_subparsers(dest="spatial_command", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--mesh",
        type=parse_mesh,
        default={"depth": 2},
        help="process grid: comma-separated AXIS=SIZE with axes data, depth, height, width "
        "(e.g. depth=2,height=2 or data=2,width=2); omitted axes have size 1",
    )
    common.add_argument(
        "--shape",
        type=parse_shape,
        default=(1, 2, 16, 16, 16),
        help="global input size NxCxDxHxW (five positive integers)",
    )

    plan = sub.add_parser("plan", parents=[common], help="print blocks and halos of a conv layer")
    plan.add_argument("--kernel", type=positive_int, default=3, help="kernel size")
    plan.add_argument("--stride", type=positive_int, default=1, help="stride")
    plan.add_argument("--dilation", type=positive_int, default=1, help="dilation")
    plan.add_argument(
        "--padding", type=non_negative_int, default=1, help="zero padding on each side"
    )
    plan.set_defaults(func=_cmd_plan)

    check = sub.add_parser(
        "check",
        parents=[common],
        help="run a small 3D U-Net on local gloo processes (one per mesh rank) and compare "
        "it with one device",
    )
    check.add_argument(
        "--dtype",
        choices=("float64", "float32"),
        default="float64",
        help="dtype of the checked models (the reference is always float64)",
    )
    check.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the weights and inputs"
    )
    check.set_defaults(func=_cmd_check)
