"""``sciml spatial ...``: inspect a decomposition, check a parallel model locally."""

from __future__ import annotations

import argparse
import functools
import math
from typing import TYPE_CHECKING

from sciml.cli_args import Subparsers, non_negative_int, positive_int
from sciml.spatial_parallel.partition import MESH_AXES
from sciml.spatial_parallel.planner.options import MODELS, parse_memory
from sciml.spatial_parallel.planner.profile import PROFILES

if TYPE_CHECKING:
    from sciml.spatial_parallel.planner.cost import Grid
    from sciml.spatial_parallel.planner.graph import Graph
    from sciml.spatial_parallel.planner.layers import ConvCost
    from sciml.spatial_parallel.planner.profile import Profile

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


def parse_plan_shape(text: str) -> tuple[int, ...]:
    """``"4x512x512x512"`` (CxDxHxW) or ``"1x4x512x512x512"`` (NxCxDxHxW) -> sizes."""
    parts = text.lower().split("x")
    if len(parts) not in (4, 5):
        raise argparse.ArgumentTypeError(
            f"--shape expects 5 sizes NxCxDxHxW or 4 sizes CxDxHxW (N from --batch), got {text!r}"
        )
    try:
        return tuple(int(positive_int(v.strip())) for v in parts)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(
            f"--shape expects 5 positive sizes NxCxDxHxW (or 4, CxDxHxW), got {text!r}: {err}"
        ) from None


def memory_size(text: str) -> float:
    """``--memory`` values: ``80GiB``, ``40GB``, ``512MiB`` -> bytes."""
    try:
        return parse_memory(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _plan_shape(args: argparse.Namespace) -> tuple[int, int, int, int, int]:
    """The global ``(N, C, D, H, W)`` of ``--shape`` and ``--batch``."""
    if len(args.shape) == 4:
        return (args.batch or 1, *args.shape)
    if args.batch is not None and args.batch != args.shape[0]:
        raise ValueError(
            f"--batch {args.batch} contradicts the batch {args.shape[0]} of --shape "
            f"{'x'.join(map(str, args.shape))}; give one of them"
        )
    return args.shape


def _print_blocks(args: argparse.Namespace, shape: tuple[int, ...]) -> None:
    from sciml.spatial_parallel.partition import DIM_NAMES, Window, window_plan

    mesh = args.mesh or {"depth": 2}
    window = Window(args.kernel, args.stride, args.dilation, args.padding, args.padding)
    for name, size in zip(DIM_NAMES, shape[2:], strict=True):
        parts = mesh.get(name, 1)
        plan = window_plan(window, size, parts, layer="conv", dim=name)
        print(f"{name}: global {size} -> {plan.out_size} over {parts} rank(s)")
        for rank in range(parts):
            lo, hi = plan.blocks[rank]
            a, b = plan.needs[rank]
            print(
                f"  rank {rank}: block [{lo}, {hi}) output {plan.out_blocks[rank]} "
                f"reads [{a}, {b}): halo {max(0, lo - a)} before, {max(0, b - hi)} after"
            )


def _profile(args: argparse.Namespace) -> Profile:
    from sciml.spatial_parallel.planner.calibrate import calibrate
    from sciml.spatial_parallel.planner.profile import get_profile, load_profile, save_profile

    if args.calibrate:
        profile = calibrate(device=args.device)
        path = save_profile(profile, args.cache)
        print(f"calibrated this machine ({args.device}); profile cached at {path}")
        return profile
    if args.profile == "calibrated" and args.cache is not None:
        return load_profile(args.cache)
    return get_profile(args.profile)


def _conv_costs(
    args: argparse.Namespace, graph: Graph, grid_list: list[Grid]
) -> dict[str, ConvCost]:
    """Measured convolutions for a calibrated profile (measured now with --calibrate)."""
    from sciml.spatial_parallel.planner.layers import load_costs
    from sciml.spatial_parallel.planner.plan import costs_path, measure_costs
    from sciml.spatial_parallel.planner.profile import default_cache

    if args.device != "cpu" or (not args.calibrate and args.profile != "calibrated"):
        return {}  # per-shape convolutions are measured on the CPU only
    path = costs_path(args.cache or default_cache())
    if args.calibrate:
        return measure_costs(graph, grid_list, cache=path)
    return load_costs(path) if path.exists() else {}


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from sciml.spatial_parallel.planner.cost import estimate
    from sciml.spatial_parallel.planner.graph import trace
    from sciml.spatial_parallel.planner.plan import build_model, grids, plan_graph

    shape = _plan_shape(args)
    if args.model is None:
        for option in ("world", "memory", "json"):
            if getattr(args, option) not in (None, False):
                raise ValueError(f"--{option} needs --model (the grid planner)")
        if args.calibrate:
            _profile(args)
            return 0
        _print_blocks(args, shape)
        return 0
    grid = None
    if args.mesh is not None:
        grid = tuple(args.mesh.get(axis, 1) for axis in ("data", "depth", "height", "width"))
        if args.world is not None and args.world != math.prod(grid):
            raise ValueError(
                f"--mesh {args.mesh} has {math.prod(grid)} ranks but --world is {args.world}"
            )
    elif args.world is None:
        raise ValueError("--model needs --world (the number of ranks to plan for) or --mesh")
    profile = _profile(args)
    memory = args.memory if args.memory is not None else profile.memory
    if memory is None:
        raise ValueError(f"profile {profile.name!r} has no device memory: give --memory")
    graph = trace(build_model(args.model, shape[1]), shape)
    costs = _conv_costs(args, graph, [grid] if grid else grids(args.world))
    if grid is not None:
        est = estimate(graph, grid, profile, optimizer=args.optimizer, costs=costs)
        print(json.dumps(est.to_dict(memory), indent=1) if args.json else est.describe(memory))
        return 0
    plan = plan_graph(
        graph,
        world=args.world,
        memory=memory,
        profile=profile,
        optimizer=args.optimizer,
        costs=costs,
    )
    print(json.dumps(plan.to_dict(), indent=1) if args.json else plan.table(top=args.top))
    return 0 if plan.fitting else 1


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

    plan = sub.add_parser(
        "plan",
        help="pick the process grid for a model (--model), or print the blocks and halos of "
        "one convolution on --mesh",
    )
    plan.add_argument(
        "--mesh",
        type=parse_mesh,
        default=None,
        help="with --model: price this grid only; without: the grid whose conv blocks to "
        "print (depth=2 when omitted)",
    )
    plan.add_argument(
        "--shape",
        type=parse_plan_shape,
        default=(1, 2, 16, 16, 16),
        help="global input CxDxHxW (batch N from --batch) or NxCxDxHxW",
    )
    plan.add_argument(
        "--batch",
        type=positive_int,
        default=None,
        help="global batch N when --shape gives CxDxHxW (1 when omitted)",
    )
    plan.add_argument("--model", choices=MODELS, default=None, help="the model to plan for")
    plan.add_argument("--world", type=positive_int, default=None, help="ranks to plan for")
    plan.add_argument(
        "--memory",
        type=memory_size,
        default=None,
        help="memory per rank, e.g. 80GiB or 40GB (the profile's device memory when omitted)",
    )
    plan.add_argument(
        "--profile",
        default="h100",
        help=f"machine profile: {', '.join(PROFILES)}, 'calibrated' (the --calibrate cache) "
        "or a profile .json",
    )
    plan.add_argument(
        "--calibrate",
        action="store_true",
        help="measure this machine's constants, cache them and plan with them",
    )
    plan.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="device --calibrate measures",
    )
    plan.add_argument(
        "--cache",
        default=None,
        help="profile file --calibrate writes and --profile calibrated reads; unset: "
        "planner_profile.json under $SCIML_CACHE_DIR or $XDG_CACHE_HOME/sciml",
    )
    plan.add_argument(
        "--optimizer",
        choices=("adam", "momentum", "sgd"),
        default="adam",
        help="optimizer whose state counts in memory",
    )
    plan.add_argument("--top", type=positive_int, default=5, help="grids shown in the table")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--kernel", type=positive_int, default=3, help="kernel size (no --model)")
    plan.add_argument("--stride", type=positive_int, default=1, help="stride (no --model)")
    plan.add_argument("--dilation", type=positive_int, default=1, help="dilation (no --model)")
    plan.add_argument(
        "--padding",
        type=non_negative_int,
        default=1,
        help="zero padding on each side (no --model)",
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
