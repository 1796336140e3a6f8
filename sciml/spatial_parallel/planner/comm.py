"""Communication in the planner's step time: halo messages, their overlap, the gradient all-reduce.

Halo exchange: a fixed cost per split layer and direction (the profile's
``halo_overhead``, and its ``sync_wait`` for the peers), then
``latency + bytes / bandwidth`` per neighbour the worst rank receives from
(faces, and the edges and corners of a split along several dims from the
diagonal neighbours: :func:`~sciml.spatial_parallel.planner.halo.halo_messages`),
priced by the profile's point-to-point model
(inside or between nodes by the neighbour's rank distance); with overlap
the interior computes while the messages travel and the boundary shells run
after them. Without overlap a layer assembles its extended input (block and
halos) in a new tensor and its backward splits that gradient back into the
block's: one pass over the block and halos each way (:func:`assembly_time`).

Gradient all-reduce: buckets in the order the backward pass fills them, each
issued when its last gradient is ready, serialised; only what outlasts the
backward pass is exposed, and the step's wait for them is one synchronisation
(``sync_wait``).
"""

from __future__ import annotations

import math

from sciml.spatial_parallel.planner.graph import Graph, Layer
from sciml.spatial_parallel.planner.halo import (
    Grid,
    Halo,
    halo_bytes,
    halo_messages,
    largest,
    local_numel,
)
from sciml.spatial_parallel.planner.profile import Profile


def exchange_time(layer: Layer, grid: Grid, halo: Halo, profile: Profile) -> float:
    """Seconds of one layer's halo exchange, one direction, on the fullest rank."""
    seconds = profile.halo_overhead + profile.sync_wait
    for message in halo_messages(layer, grid, halo):
        seconds += message.senders * profile.p2p(message.nbytes, stride=message.distance)
    return seconds


def assembly_time(layer: Layer, grid: Grid, halo: Halo, profile: Profile) -> float:
    """Seconds of assembling the extended input (one direction), without overlap.

    The forward reads the block and writes block and halos; the backward reads
    the extended gradient's block part and writes the block's gradient (the halo
    parts travel as messages): ``(2 block + halos) / mem_bw`` either way, to the
    fullest rank. With overlap the interior reads the block in place.
    """
    if profile.overlap or not any(halo.received):
        return 0.0
    block = local_numel(layer.in_shape, grid) * layer.itemsize
    return (2 * block + halo_bytes(layer, grid, halo)) / profile.mem_bw


def overlapped(
    compute: float, exchange: float, layer: Layer, halo: Halo, grid: Grid, profile: Profile
) -> float:
    """Seconds of a layer's compute and halo exchange together (one direction).

    Without overlap they add up; with it the interior (outputs that need no
    halo) computes while the messages travel, then the boundary shells, each a
    call of its own.
    """
    if not exchange:
        return compute
    if not profile.overlap:
        return compute + exchange
    out = [largest(s, p) for s, p in zip(layer.out_shape[2:], grid[1:], strict=True)]
    inner = math.prod(max(0, o - b) for o, b in zip(out, halo.boundary, strict=True))
    interior = inner / max(1, math.prod(out))
    shells = 2 * sum(1 for r in halo.received if r)
    return (
        max(exchange, compute * interior) + compute * (1 - interior) + shells * profile.op_overhead
    )


def allreduce_exposed(
    graph: Graph,
    grid: Grid,
    profile: Profile,
    backward: list[float],
    bucket_bytes: float,
    *,
    slow: float = 1.0,
) -> float:
    """Bucketed gradient all-reduce left over after the backward pass (bucket by bucket).

    ``slow``: the slow-down of each all-reduce by ranks sharing cores.
    """
    ranks = math.prod(grid)
    if ranks == 1:
        return 0.0
    clock, ready, buckets, size = 0.0, 0.0, [], 0.0
    for layer, seconds in zip(reversed(graph.layers), reversed(backward), strict=True):
        clock += seconds
        nbytes = layer.params * 4.0
        if size and size + nbytes > bucket_bytes:
            buckets.append((ready, size))
            size = 0.0
        if nbytes:
            size, ready = size + nbytes, clock
    if size:
        buckets.append((ready, size))
    end = 0.0
    for ready, nbytes in buckets:
        end = max(end, ready) + profile.allreduce(nbytes, ranks) * slow
    return max(0.0, end - clock) + profile.sync_wait * slow
