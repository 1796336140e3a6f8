"""``sciml spatial ...``: inspect a decomposition, check a parallel model locally."""

from __future__ import annotations

import argparse
from typing import Any


def _mesh(text: str) -> dict[str, int]:
    try:
        pairs = [item.split("=") for item in text.split(",") if item]
        mesh = {key.strip(): int(value) for key, value in pairs}
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"--mesh expects e.g. depth=2,height=2, got {text!r}"
        ) from err
    unknown = set(mesh) - {"data", "depth", "height", "width"}
    if unknown:
        raise argparse.ArgumentTypeError(f"--mesh: unknown axes {sorted(unknown)}")
    return mesh


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in text.lower().split("x"))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--shape expects NxCxDxHxW, got {text!r}") from err
    if len(shape) != 5:
        raise argparse.ArgumentTypeError(f"--shape expects 5 sizes NxCxDxHxW, got {text!r}")
    return shape


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
            print(f"  rank {rank}: block [{lo}, {hi}) output {plan.out_blocks[rank]} "
                  f"reads [{a}, {b}): halo {lo - a} before, {b - hi} after")  # fmt: skip
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    import math

    from sciml.distributed import spawn
    from sciml.spatial_parallel.examples import check_model

    nprocs = math.prod(args.mesh.values())
    results = spawn(check_model, nprocs, args.mesh, args.shape)
    print(f"{'rank':>4} {'coords':>14} {'output':>9} {'in grad':>9} {'par grad':>9} {'ms':>7}")
    for r in results:
        errors = f"{r['output']:>9.1e} {r['input_grad']:>9.1e} {r['param_grad']:>9.1e}"
        print(f"{r['rank']:>4} {str(r['coords']):>14} {errors} {r['seconds'] * 1e3:>7.0f}")
    worst = max(max(r["output"], r["input_grad"], r["param_grad"]) for r in results)
    print("match" if worst < 1e-9 else f"MISMATCH: largest relative difference {worst:.2e}")
    return 0 if worst < 1e-9 else 1


def register(subparsers: Any) -> None:
    """Add the ``spatial`` subcommand group."""
    spatial = subparsers.add_parser("spatial", help="spatially parallel 3D CNNs")
    sub = spatial.add_subparsers(dest="spatial_command", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--mesh", type=_mesh, default={"depth": 2},
                        help="process grid, e.g. depth=2,height=2 or data=2,width=2")  # fmt: skip
    common.add_argument("--shape", type=_shape, default=(1, 2, 16, 16, 16),
                        help="global input NxCxDxHxW (default 1x2x16x16x16)")  # fmt: skip

    plan = sub.add_parser("plan", parents=[common], help="print blocks and halos of a conv layer")
    plan.add_argument("--kernel", type=int, default=3)
    plan.add_argument("--stride", type=int, default=1)
    plan.add_argument("--dilation", type=int, default=1)
    plan.add_argument("--padding", type=int, default=1)
    plan.set_defaults(func=_cmd_plan)

    check = sub.add_parser("check", parents=[common],
                           help="run a small 3D U-Net on local gloo processes and compare it "
                                "with one device")  # fmt: skip
    check.set_defaults(func=_cmd_check)
