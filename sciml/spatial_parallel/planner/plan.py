"""Pick the process grid: every ``data x depth x height x width`` grid of a world size, priced.

Example::

    from sciml.models import CosmoFlow
    from sciml.spatial_parallel.planner import recommend

    plan = recommend(CosmoFlow(), (4, 4, 512, 512, 512), world=2048, memory="80GiB",
                     profile="h100")
    plan.mesh            # {"data": 4, "depth": 8, ...}: SpatialMesh(**plan.mesh)
    plan.best.time       # seconds per term: compute, halo, norm, allreduce, optimizer, read
    print(plan.table())  # the recommendation, the runners-up, the grids that do not fit

The model is traced once (:mod:`~sciml.spatial_parallel.planner.graph`), each grid is
priced by :mod:`~sciml.spatial_parallel.planner.cost` with a
:class:`~sciml.spatial_parallel.planner.profile.Profile`, and the fastest grid whose peak
memory per rank fits the limit is recommended. Grids that cannot split the model (a block
smaller than a halo, more replicas than samples) are listed with the reason.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from sciml.distributed.cores import usable_cores
from sciml.progress import phase
from sciml.spatial_parallel.planner.cost import (
    MEMORY_TERMS,
    TIME_TERMS,
    Estimate,
    Grid,
    GridError,
    check_options,
    estimate,
)
from sciml.spatial_parallel.planner.graph import Graph, trace
from sciml.spatial_parallel.planner.halo import layer_halo
from sciml.spatial_parallel.planner.layers import (
    ConvCost,
    conv_of,
    load_costs,
    measure_convs,
    save_costs,
)
from sciml.spatial_parallel.planner.options import MODELS, parse_memory
from sciml.spatial_parallel.planner.profile import Profile, get_profile

#: Says when convolutions are timed (``INFO``, :mod:`sciml.progress`).
logger = logging.getLogger(__name__)


def build_model(name: str, in_channels: int) -> nn.Module:
    """The model the command line plans for: ``"cosmoflow"`` or ``"unet"`` (defaults).

    ``cosmoflow`` is ``CosmoFlow(in_channels, 4)``, ``unet`` is
    ``UNet(in_channels, 2)`` (3D, batch norm, 16 base channels, depth 3).
    """
    from sciml.models import CosmoFlow, UNet

    if name == "cosmoflow":
        return CosmoFlow(in_channels, 4)
    if name == "unet":
        return UNet(in_channels, 2)
    raise ValueError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")


def grids(world: int) -> list[Grid]:
    """Every ``(data, depth, height, width)`` of positive integers whose product is ``world``."""
    _check_count("world", world)
    divisors = [d for d in range(1, world + 1) if world % d == 0]
    return [
        (a, b, c, world // (a * b * c))
        for a in divisors
        for b in divisors
        if (world // a) % b == 0
        for c in divisors
        if (world // (a * b)) % c == 0
    ]


@dataclass(frozen=True)
class Plan:
    """The priced grids of one model, sample shape, world size and memory limit.

    Attributes:
        graph: The traced model.
        world: Ranks.
        memory_limit: Bytes per rank.
        profile: The machine.
        fitting: Grids that fit, fastest first.
        too_big: Grids that split the model but exceed the limit, smallest first.
        unsplittable: ``(grid, reason)`` of grids that cannot split the model.
    """

    graph: Graph
    world: int
    memory_limit: float
    profile: Profile
    fitting: tuple[Estimate, ...]
    too_big: tuple[Estimate, ...]
    unsplittable: tuple[tuple[Grid, str], ...]

    @property
    def best(self) -> Estimate:
        """The fastest grid that fits.

        Raises:
            ValueError: If no grid fits, naming the smallest memory needed.
        """
        if self.fitting:
            return self.fitting[0]
        if self.too_big:
            least = self.too_big[0]
            raise ValueError(
                f"no grid of {self.world} ranks fits in {self.memory_limit / 2**30:.3g} GiB per "
                f"rank for input {self.graph.sample_shape}: the smallest, {least.mesh}, needs "
                f"{least.peak_memory / 2**30:.3g} GiB; use more ranks or a smaller sample"
            )
        reason = self.unsplittable[0][1] if self.unsplittable else "no grids"
        raise ValueError(
            f"no grid of {self.world} ranks can split input {self.graph.sample_shape}: {reason}"
        )

    @property
    def mesh(self) -> dict[str, int]:
        """The recommended grid as ``SpatialMesh`` keywords (what ``--mesh`` parses to)."""
        return self.best.mesh

    def table(self, *, top: int = 5) -> str:
        """The recommendation and runners-up with a per-term breakdown, as text."""
        head = (
            f"{'grid d x D x H x W':>20} {'step ms':>9} "
            + " ".join(f"{t:>9}" for t in TIME_TERMS)
            + f" {'GiB/rank':>9}"
        )
        lines = [
            f"{self.graph.sample_shape} on {self.world} ranks, "
            f"{self.memory_limit / 2**30:.3g} GiB each, profile {self.profile.name}",
            head,
        ]
        rows = list(self.fitting[:top])
        for rank, est in enumerate(rows):
            grid = " x ".join(str(v) for v in est.grid)
            terms = " ".join(f"{est.time[t] * 1e3:>9.3g}" for t in TIME_TERMS)
            mark = "*" if rank == 0 else " "
            lines.append(
                f"{mark}{grid:>19} {est.step_time * 1e3:>9.4g} {terms} "
                f"{est.peak_memory / 2**30:>9.3g}"
            )
        if not rows:
            lines.append("  no grid fits")
        lines.append(
            f"{len(self.fitting)} grid(s) fit, {len(self.too_big)} exceed the memory, "
            f"{len(self.unsplittable)} cannot split the input"
        )
        if self.fitting:
            best = self.fitting[0]
            lines.append(
                "memory of the recommendation (GiB): "
                + ", ".join(f"{t} {best.memory[t] / 2**30:.3g}" for t in MEMORY_TERMS)
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """The plan as plain JSON-ready values (every priced grid, every term)."""
        return {
            "sample_shape": list(self.graph.sample_shape),
            "world": self.world,
            "memory_limit_bytes": self.memory_limit,
            "profile": self.profile.name,
            "recommended": self.fitting[0].to_dict() if self.fitting else None,
            "fitting": [e.to_dict() for e in self.fitting],
            "too_big": [e.to_dict() for e in self.too_big],
            "unsplittable": [{"grid": list(g), "reason": r} for g, r in self.unsplittable],
        }


def costs_path(profile_path: Path | str) -> Path:
    """Where the measured convolutions of a calibrated profile are cached (next to it)."""
    path = Path(profile_path)
    return path.with_name(path.stem + "_convs.json")


def measure_costs(
    graph: Graph,
    grid_list: Iterable[Grid],
    *,
    cache: Path | str | None = None,
    repeats: int = 5,
    concurrency: int | None = None,
) -> dict[str, ConvCost]:
    """Time every local convolution ``graph`` runs on the grids of ``grid_list``, on this CPU.

    Each is timed beside the grid's other ranks, up to ``concurrency`` (``None``:
    :func:`sciml.distributed.cores.usable_cores`, the calibrated profile's). Shapes already
    in ``cache`` (a :func:`costs_path` file) are not measured again; the new ones
    are added to it. Grids that cannot split the model are skipped.

    Raises:
        ValueError: If ``concurrency`` is not a positive integer.
    """
    cores = usable_cores() if concurrency is None else _check_count("concurrency", concurrency)
    known = load_costs(cache) if cache is not None and Path(cache).exists() else {}
    wanted = []
    for grid in grid_list:
        try:
            for layer in graph.layers:
                layer_halo(layer, grid)
        except GridError:
            continue
        for index, layer in enumerate(graph.layers):
            conv = conv_of(layer, grid, first=index == 0, ranks=min(math.prod(grid), cores))
            if conv is not None and conv.key not in known:
                wanted.append(conv)
    fresh: dict[str, ConvCost] = {}
    if wanted:
        with phase(logger, f"timing {len(wanted)} local convolutions of the model on this CPU"):
            fresh = measure_convs(wanted, repeats=repeats)
    if cache is not None and fresh:
        save_costs(fresh, cache)
    return {**known, **fresh}


def _check_count(name: str, value: object) -> int:
    """``value`` if it is a positive integer, else a ValueError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _check_limits(*, world: object, memory: object) -> None:
    _check_count("world", world)
    if (
        not isinstance(memory, int | float)
        or isinstance(memory, bool)
        or not (math.isfinite(memory) and memory > 0)
    ):
        raise ValueError(f"memory must be a positive number of bytes, got {memory!r}")


def plan_graph(
    graph: Graph,
    *,
    world: int,
    memory: float,
    profile: Profile,
    optimizer: str = "adam",
    bucket_mb: float = 25.0,
    costs: Mapping[str, ConvCost] | None = None,
) -> Plan:
    """Price every grid of ``world`` ranks for a traced model (see :func:`recommend`).

    ``costs`` are measured local convolutions (:func:`measure_costs`) used instead of the
    profile's rates where they match.
    """
    _check_limits(world=world, memory=memory)
    check_options(optimizer=optimizer, bucket_mb=bucket_mb)
    fitting: list[Estimate] = []
    too_big: list[Estimate] = []
    unsplittable: list[tuple[Grid, str]] = []
    for grid in grids(world):
        try:
            est = estimate(
                graph, grid, profile, optimizer=optimizer, bucket_mb=bucket_mb, costs=costs
            )
        except GridError as err:
            unsplittable.append((grid, str(err)))
            continue
        (fitting if est.peak_memory <= memory else too_big).append(est)

    def split_axes(est: Estimate) -> tuple[int, Grid]:
        return (sum(p > 1 for p in est.grid[1:]), est.grid)

    fitting.sort(key=lambda e: (e.step_time, *split_axes(e)))
    too_big.sort(key=lambda e: (e.peak_memory, e.step_time))
    return Plan(
        graph, world, float(memory), profile, tuple(fitting), tuple(too_big), tuple(unsplittable)
    )


def recommend(
    model: nn.Module | str,
    sample_shape: Sequence[int],
    *,
    world: int,
    memory: float | str | None = None,
    profile: Profile | str | Path = "h100",
    optimizer: str = "adam",
    bucket_mb: float = 25.0,
    costs: Mapping[str, ConvCost] | None = None,
) -> Plan:
    """Price every grid of ``world`` ranks for ``model`` on a global batch of ``sample_shape``.

    Args:
        model: A module ``parallelize`` accepts, or a name of :data:`MODELS`.
        sample_shape: Global input ``(N, C, D, H, W)`` of one training step.
        world: Number of ranks.
        memory: Bytes per rank (or a string such as ``"80GiB"``); ``None``: the profile's.
        profile: A :class:`Profile`, a name of ``PROFILES``, ``"calibrated"`` or a JSON path.
        optimizer: ``"adam"``, ``"momentum"`` or ``"sgd"`` (its state counts in memory).
        bucket_mb: Gradient bucket size of ``parallelize``, MiB.
        costs: Measured local convolutions (:func:`measure_costs`), for a calibrated profile.

    Returns:
        The :class:`Plan`; ``plan.mesh`` is the recommended grid (it raises if none fits).

    Raises:
        ValueError: On a bad shape, world, memory, profile or optimizer, or a
            layer ``parallelize`` cannot split.
    """
    prof = profile if isinstance(profile, Profile) else get_profile(profile)
    if isinstance(memory, str):
        memory = parse_memory(memory)
    if memory is None:
        if prof.memory is None:
            raise ValueError(f"profile {prof.name!r} has no device memory: give memory=")
        memory = prof.memory
    _check_limits(world=world, memory=memory)
    check_options(optimizer=optimizer, bucket_mb=bucket_mb)
    if isinstance(model, str):
        shape = tuple(sample_shape)
        if len(shape) != 5:
            raise ValueError(f"sample_shape must be 5 sizes (N, C, D, H, W), got {shape}")
        model = build_model(model, shape[1])
    graph = trace(model, sample_shape)
    return plan_graph(
        graph,
        world=world,
        memory=memory,
        profile=prof,
        optimizer=optimizer,
        bucket_mb=bucket_mb,
        costs=costs,
    )
