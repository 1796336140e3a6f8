"""The planner's cost model: memory and step time of one rank for one process grid.

It prices the slowest, fullest rank of a grid ``(data, depth, height, width)``: memory
(parameters, optimizer state, buckets, what autograd keeps, the largest working set) and
step time (per-layer compute at the measured or roofline rate of the kernel its block
gets, halo exchanges and their synchronisation, normalisation and gradient all-reduces,
the optimizer, reading the block). What each term holds and why: ``docs/planner_cost_model.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from sciml.spatial_parallel.partition import DIM_NAMES
from sciml.spatial_parallel.planner.comm import (
    allreduce_exposed,
    assembly_time,
    exchange_time,
    overlapped,
)
from sciml.spatial_parallel.planner.graph import NORM_KINDS, Graph, Layer
from sciml.spatial_parallel.planner.halo import (
    Grid,
    GridError,
    Halo,
    halo_bytes,
    layer_halo,
    local_numel,
)
from sciml.spatial_parallel.planner.layers import ConvCost, conv_of
from sciml.spatial_parallel.planner.profile import Profile

#: Copies of the parameters an optimizer keeps.
OPTIMIZER_STATE = {"sgd": 0, "momentum": 1, "adam": 2}
#: Bytes read and written per parameter element by an optimizer step (in parameter sizes).
OPTIMIZER_PASSES = {"sgd": 3, "momentum": 5, "adam": 7}
CONV_KINDS = ("Conv3d", "ConvTranspose3d", "Linear")
#: Output-sized tensors the split normalisations keep beyond PyTorch's fused
#: kernels (two-pass statistics keep the centred input and the normalised
#: output where the fused kernel keeps the input): measured with
#: ``benchmarks/spatial_plan_validation.py`` (predicted against measured step memory).
SPLIT_NORM_EXTRA = 1
#: Kernels over the block in a split normalisation's forward and backward, and the
#: block-sized tensors they read or write (sum, centring, squares, scaling, weight
#: and bias are kernels of their own; the fused kernel passes about 4 and 8 times).
NORM_KERNELS, NORM_PASSES = (7, 14), (12, 31)
#: Of those passes, the reads from memory: the input forward; the output gradient and
#: the two kept blocks backward. The others re-read or write blocks still in cache
#: (``Profile.cache_bw``): priced all at ``mem_bw``, a U-Net's normalisations came out
#: slower than the whole step's kernels measured by ``torch.profiler``.
NORM_FROM_MEMORY = (1, 3)
#: Blocks a split normalisation's forward holds beyond what it keeps and its
#: output: its input, and the scaled block before the bias is added.
NORM_TRANSIENT = 2
MEMORY_TERMS = (
    *("params", "grads", "optimizer", "buckets", "input"),
    *("activations", "halos", "workspace", "reserved"),
)
TIME_TERMS = ("compute", "halo", "norm", "allreduce", "optimizer", "read")


def _roofline(layer: Layer, grid: Grid, profile: Profile, *, backward: bool, first: bool) -> float:
    """Roofline seconds of one layer's forward or backward on the largest block."""
    out = local_numel(layer.out_shape, grid)
    moved = (local_numel(layer.in_shape, grid) + out) * layer.itemsize
    if layer.cost in NORM_KINDS:
        kernels, passes = NORM_KERNELS[backward], NORM_PASSES[backward]
        cold = NORM_FROM_MEMORY[backward]
        seconds = cold / profile.mem_bw + (passes - cold) / profile.cache_bw
        return kernels * profile.op_overhead + seconds * out * layer.itemsize
    if layer.cost in CONV_KINDS:
        flops = layer.flops * out / math.prod(layer.out_shape)
        local = conv_of(layer, grid, first=first)
        native = local is not None and local.native
        if backward:
            calls = 1 if first else 2  # weight gradient, and data gradient unless first
            rate = profile.native_conv_bwd_rate if native else profile.conv_bwd_rate
            return calls * (profile.op_overhead + flops / rate)
        rate = profile.native_conv_rate if native else profile.conv_rate
        return profile.op_overhead + max(flops / rate, moved / profile.mem_bw)
    return profile.op_overhead + (2 if backward else 1) * moved / profile.mem_bw


@dataclass(frozen=True)
class Estimate:
    """Memory and step time of the fullest, slowest rank of one grid.

    Attributes:
        grid: ``(data, depth, height, width)``.
        memory: Bytes per term of :data:`MEMORY_TERMS`.
        time: Seconds per term of :data:`TIME_TERMS`.
    """

    grid: Grid
    memory: dict[str, float]
    time: dict[str, float]

    @property
    def peak_memory(self) -> float:
        """Bytes per rank, all terms."""
        return sum(self.memory.values())

    @property
    def step_memory(self) -> float:
        """Bytes a training step allocates and frees: activations, halos, workspace."""
        return sum(self.memory[t] for t in ("activations", "halos", "workspace"))

    @property
    def step_time(self) -> float:
        """Seconds per training step, all terms."""
        return sum(self.time.values())

    @property
    def mesh(self) -> dict[str, int]:
        """The grid as ``SpatialMesh`` keywords (the dict ``--mesh`` parses to)."""
        return dict(zip(("data", *DIM_NAMES), self.grid, strict=True))

    def to_dict(self, memory_limit: float | None = None) -> dict[str, object]:
        """JSON-ready values: the mesh, the totals and every term (and ``fits`` given a limit)."""
        out: dict[str, object] = {
            "mesh": self.mesh,
            "step_time_s": self.step_time,
            "peak_memory_bytes": self.peak_memory,
            "time_s": self.time,
            "memory_bytes": self.memory,
        }
        if memory_limit is not None:
            out["fits"] = self.peak_memory <= memory_limit
        return out

    def describe(self, memory_limit: float) -> str:
        """Step time and memory per term, as text."""
        fits = "fits" if self.peak_memory <= memory_limit else "does NOT fit"
        lines = [
            f"grid {self.mesh}: step {self.step_time * 1e3:.4g} ms, "
            f"{self.peak_memory / 2**30:.3g} GiB per rank ({fits} in "
            f"{memory_limit / 2**30:.3g} GiB)"
        ]
        lines += [f"  time {t:>11} {self.time[t] * 1e3:>10.4g} ms" for t in TIME_TERMS]
        lines += [f"  memory {t:>9} {self.memory[t] / 2**30:>10.4g} GiB" for t in MEMORY_TERMS]
        return "\n".join(lines)


def _activations(
    graph: Graph, grid: Grid, scratch: list[tuple[float, float]], transient: list[float]
) -> tuple[float, float]:
    """Bytes kept for backward, and the largest working set on top of them.

    Layer ``i``'s forward holds the tensors saved by the layers before it and
    by itself, its output, its scratch and its transients (``transient``:
    inputs and temporaries alive only during its forward); its backward (which
    frees the tensors of the layers after it) those saved by layers ``0..i``,
    its output and input gradients (none for the first layer: the model's
    input needs none) and its scratch. ``scratch`` is ``(forward, backward)``
    bytes per layer.
    """
    kept = [0.0] * len(graph.layers)
    for s in graph.saved:
        index = min(s.layer, len(kept) - 1)
        kept[index] += (local_numel(s.shape, grid) if s.split else math.prod(s.shape)) * s.itemsize
    for index, layer in enumerate(graph.layers):
        if layer.cost in NORM_KINDS:
            kept[index] += SPLIT_NORM_EXTRA * local_numel(layer.out_shape, grid) * layer.itemsize
    total, running, peak = sum(kept), 0.0, 0.0
    for index, (layer, nbytes, (fwd, bwd), extra) in enumerate(
        zip(graph.layers, kept, scratch, transient, strict=True)
    ):
        out = local_numel(layer.out_shape, grid) * layer.itemsize
        grad_in = local_numel(layer.in_shape, grid) * layer.itemsize if index else 0
        running += nbytes
        peak = max(peak, running + out + fwd + extra)
        peak = max(peak, running + out + grad_in + bwd)
    return total, max(0.0, peak - total)


def _layer_costs(
    layer: Layer,
    grid: Grid,
    halo: Halo,
    profile: Profile,
    costs: Mapping[str, ConvCost],
    *,
    first: bool,
) -> tuple[float, float, float, float]:
    """Forward and backward seconds and scratch bytes: measured where known, else roofline."""
    conv = conv_of(layer, grid, first=first, ranks=profile.computing(math.prod(grid)))
    cost = costs.get(conv.key) if conv is not None else None
    slow = profile.contention(math.prod(grid))
    if cost is not None:
        return (
            cost.forward_s * slow,
            cost.backward_s * slow,
            cost.forward_bytes,
            cost.backward_bytes,
        )
    fwd = _roofline(layer, grid, profile, backward=False, first=first)
    bwd = _roofline(layer, grid, profile, backward=True, first=first)
    return fwd * slow, bwd * slow, 0.0, 0.0


def check_options(*, optimizer: object, bucket_mb: object) -> None:
    """Raise ValueError naming a bad optimizer or bucket size."""
    if optimizer not in OPTIMIZER_STATE:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_STATE)}, got {optimizer!r}")
    if (
        not isinstance(bucket_mb, int | float)
        or isinstance(bucket_mb, bool)
        or not (math.isfinite(bucket_mb) and bucket_mb > 0)
    ):
        raise ValueError(f"bucket_mb must be a finite number > 0, got {bucket_mb!r}")


def _check_grid(grid: object) -> None:
    if (
        not isinstance(grid, tuple)
        or len(grid) != 4
        or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 1 for p in grid)
    ):
        raise ValueError(
            f"grid must be 4 positive integers (data, depth, height, width), got {grid!r}"
        )


def estimate(
    graph: Graph,
    grid: Grid,
    profile: Profile,
    *,
    optimizer: str = "adam",
    bucket_mb: float = 25.0,
    costs: Mapping[str, ConvCost] | None = None,
) -> Estimate:
    """Memory and step time per rank of ``graph`` on ``grid``.

    Args:
        graph: The traced model.
        grid: ``(data, depth, height, width)``.
        profile: The machine.
        optimizer: ``"adam"``, ``"momentum"`` or ``"sgd"``.
        bucket_mb: Gradient bucket size, MiB.
        costs: Measured local convolutions
            (:mod:`~sciml.spatial_parallel.planner.layers`), by key; the times are of one
            rank alone, so they are scaled by the profile's contention.

    Raises:
        GridError: If the grid cannot split the activations (more replicas than
            samples, or a block smaller than a halo).
    """
    _check_grid(grid)
    check_options(optimizer=optimizer, bucket_mb=bucket_mb)
    if grid[0] > graph.sample_shape[0]:
        raise GridError(
            f"data={grid[0]} replicas but the batch has {graph.sample_shape[0]} samples"
        )
    halos = [layer_halo(layer, grid) for layer in graph.layers]
    params = graph.params * 4.0
    forward, backward, scratch, transient = [], [], [], []
    halo_mem = halo_time = norm = 0.0
    spatial = math.prod(grid[1:])
    slow = profile.contention(math.prod(grid))
    held: list[tuple[int, float]] = []  # (last layer, bytes) of blocks the code holds on to
    for index, (layer, halo) in enumerate(zip(graph.layers, halos, strict=True)):
        fwd, bwd, fwd_bytes, bwd_bytes = _layer_costs(
            layer, grid, halo, profile, costs or {}, first=index == 0
        )
        exchange = 0.0
        if any(halo.received):
            exchange = exchange_time(layer, grid, halo, profile)
            exchange += assembly_time(layer, grid, halo, profile)
            exchange *= slow
        block_bytes = local_numel(layer.in_shape, grid) * layer.itemsize
        passing = sum(nbytes for last, nbytes in held if last >= index)  # this forward only
        if any(halo.received):
            extra = halo_bytes(layer, grid, halo)
            halo_mem += extra + (block_bytes if layer.input_kept else 0.0)
            if index:  # the extended input's gradient, before it is split (not the model input's)
                bwd_bytes += block_bytes + extra
            if not layer.input_kept:
                # the input block lives on next to the extended copy while the code holds it
                passing += block_bytes
                held.append((index + layer.input_held, block_bytes))
        if layer.cost in NORM_KINDS:
            passing += NORM_TRANSIENT * local_numel(layer.out_shape, grid) * layer.itemsize
        if layer.output_held:  # an output autograd does not keep, held by the code
            out_bytes = local_numel(layer.out_shape, grid) * layer.itemsize
            held.append((index + layer.output_held, out_bytes))
        scratch.append((fwd_bytes, bwd_bytes))
        transient.append(passing)
        forward.append(overlapped(fwd, exchange, layer, halo, grid, profile))
        # the model's input needs no gradient: the first layer sends no halo gradient back
        backward.append(overlapped(bwd, exchange if index else 0.0, layer, halo, grid, profile))
        halo_time += forward[-1] - fwd + backward[-1] - bwd
        if layer.cost in NORM_KINDS:
            ranks = math.prod(grid) if layer.cost == "BatchNorm3d" else spatial
            if ranks > 1:  # one rank's statistics need no collective
                reduce = profile.allreduce(2 * layer.channels * 4.0, ranks) + profile.sync_wait
                norm += 4 * reduce * slow
    saved, work = _activations(graph, grid, scratch, transient)
    compute = sum(forward) + sum(backward) - halo_time
    block = local_numel(graph.sample_shape, grid) * graph.layers[0].itemsize
    memory = {
        "params": params,
        "grads": params,
        "optimizer": OPTIMIZER_STATE[optimizer] * params,
        "buckets": params,
        "input": float(block),
        "activations": float(saved),
        "halos": halo_mem,
        "workspace": work,
        "reserved": profile.reserved,
    }
    read = block / profile.read_bw
    step = sum(forward) + sum(backward) + norm
    time = {
        "compute": compute,
        "halo": halo_time,
        "norm": norm,
        "allreduce": allreduce_exposed(
            graph, grid, profile, backward, bucket_mb * 2**20, slow=slow
        ),
        "optimizer": (OPTIMIZER_PASSES[optimizer] * params / profile.mem_bw + profile.op_overhead)
        * slow,
        "read": max(0.0, read - step),  # the loader reads the next block during this step
    }
    return Estimate(grid, memory, time)
