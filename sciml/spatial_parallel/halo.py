"""Halo exchange: assemble the input range a rank's output block needs.

:func:`build_halo_plan` turns the per-dimension :class:`DimPlan` of a layer
into the regions of this rank's *extended* input (own data, data received
from a neighbour, padding) and the regions it sends. Regions are products of
per-dimension pieces, so edges and corners of multi-dimensional splits come
straight from the diagonal neighbours in one round of non-blocking
point-to-point messages.

:class:`Exchange` runs one exchange and its adjoint; :func:`halo_extend` wraps
it as an autograd function, and :func:`halo_start` / :func:`halo_finish` split
it in two so that a layer can compute its interior while messages are in
flight (forward and backward).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import DimPlan

#: Seconds spent waiting for halo messages, by phase (cleared by the caller; for benchmarks).
STATS: dict[str, float] = {}

Index = slice | tuple[int, ...]
Box = tuple[tuple[int, int], ...]  # [lo, hi) per explicit axis, in extended coordinates


@dataclass(frozen=True)
class Region:
    """A box of the extended input and where its data come from.

    ``kind`` is ``"local"`` (``index`` into this rank's block), ``"recv"``
    (from global rank ``peer`` with message ``tag``) or ``"fill"``.
    """

    box: Box
    kind: str
    peer: int = -1
    tag: int = 0
    index: tuple[Index, ...] = ()


@dataclass(frozen=True)
class Send:
    """A box of this rank's block (``index``) sent to global rank ``peer`` as ``tag``."""

    peer: int
    tag: int
    index: tuple[Index, ...]


@dataclass(frozen=True)
class HaloPlan:
    """This rank's part of one layer's halo exchange.

    Attributes:
        axes: Tensor axes (2, 3 or 4) assembled explicitly.
        plans: The :class:`DimPlan` of each of those axes.
        coords: This rank's index along each of those axes.
        ext: Extended size along each of those axes.
        regions: Pieces of the extended input.
        sends: Pieces of this rank's block that neighbours need.
        fill: Value of padding outside the global volume.
    """

    axes: tuple[int, ...]
    plans: tuple[DimPlan, ...]
    coords: tuple[int, ...]
    ext: tuple[int, ...]
    regions: tuple[Region, ...]
    sends: tuple[Send, ...]
    fill: float
    group: Any = None

    @property
    def full_box(self) -> Box:
        """The whole extended input."""
        return tuple((0, n) for n in self.ext)

    @property
    def needs_exchange(self) -> bool:
        """True when anything must be sent or received."""
        return bool(self.sends) or any(r.kind == "recv" for r in self.regions)


def _offsets(pieces: tuple[Any, ...]) -> list[tuple[int, int]]:
    spans, lo = [], 0
    for piece in pieces:
        spans.append((lo, lo + piece.size))
        lo += piece.size
    return spans


def build_halo_plan(
    mesh: SpatialMesh, axes: tuple[int, ...], plans: tuple[DimPlan, ...], *, fill: float = 0.0
) -> HaloPlan:
    """Regions and sends of this rank for the per-axis plans ``plans`` of ``axes``."""
    spatial = mesh.spatial_coords
    coords = tuple(spatial[axis - 2] for axis in axes)

    def rank_at(changes: dict[int, int]) -> int:
        full = list(spatial)
        for axis, coord in changes.items():
            full[axis - 2] = coord
        return mesh.rank_of(mesh.data_index, *full)

    def combos(where: tuple[int, ...]) -> list[tuple[int, tuple[Any, ...], tuple[Any, ...]]]:
        per_axis = [plan.pieces[c] for plan, c in zip(plans, where, strict=True)]
        spans = [_offsets(p) for p in per_axis]
        return [
            (
                tag,
                tuple(per_axis[k][i] for k, i in enumerate(choice)),
                tuple(spans[k][i] for k, i in enumerate(choice)),
            )
            for tag, choice in enumerate(itertools.product(*(range(len(p)) for p in per_axis)))
        ]

    regions = []
    for tag, pieces, box in combos(coords):
        if any(p.source is None for p in pieces):
            regions.append(Region(box, "fill"))
            continue
        sources = tuple(p.source for p in pieces)
        if sources == coords:
            index = tuple(
                p.local(plan.blocks[c][0]) for p, plan, c in zip(pieces, plans, coords, strict=True)
            )
            regions.append(Region(box, "local", index=index))
        else:
            peer = rank_at(dict(zip(axes, sources, strict=True)))
            regions.append(Region(box, "recv", peer=peer, tag=tag))
    sends = []
    for where in itertools.product(*(range(plan.parts) for plan in plans)):
        if where == coords:
            continue
        for tag, pieces, _ in combos(where):
            if tuple(p.source for p in pieces) == coords:
                index = tuple(
                    p.local(plan.blocks[c][0])
                    for p, plan, c in zip(pieces, plans, coords, strict=True)
                )
                sends.append(Send(rank_at(dict(zip(axes, where, strict=True))), tag, index))
    ext = tuple(sum(p.size for p in plan.pieces[c]) for plan, c in zip(plans, coords, strict=True))
    return HaloPlan(axes, plans, coords, ext, tuple(regions), tuple(sends), fill, mesh.halo_group)


def _take(x: torch.Tensor, axes: tuple[int, ...], index: tuple[Index, ...]) -> torch.Tensor:
    for axis, idx in zip(axes, index, strict=True):
        if isinstance(idx, slice):
            x = x.narrow(axis, idx.start, idx.stop - idx.start)
        else:
            x = x.index_select(axis, torch.tensor(idx, device=x.device))
    return x


def _add_at(
    target: torch.Tensor, axes: tuple[int, ...], index: tuple[Index, ...], value: torch.Tensor
) -> None:
    """``target[index] += value``, the adjoint of :func:`_take` (repeated indices add up)."""
    gathered = [(a, i) for a, i in zip(axes, index, strict=True) if not isinstance(i, slice)]
    for axis, idx in zip(axes, index, strict=True):
        if isinstance(idx, slice):
            target = target.narrow(axis, idx.start, idx.stop - idx.start)
    if not gathered:
        target.add_(value)
        return
    for axis, idx in gathered[1:][::-1]:
        shape = list(value.shape)
        shape[axis] = target.shape[axis]
        value = value.new_zeros(shape).index_add_(
            axis, torch.tensor(idx, device=value.device), value
        )
    axis, idx = gathered[0]
    target.index_add_(axis, torch.tensor(idx, device=target.device), value)


def _clip(box: Box, within: Box) -> Box | None:
    out = tuple((max(a, c), min(b, d)) for (a, b), (c, d) in zip(box, within, strict=True))
    return None if any(lo >= hi for lo, hi in out) else out


def _sub_index(index: Index, lo: int, hi: int) -> Index:
    if isinstance(index, slice):
        return slice(index.start + lo, index.start + hi)
    return index[lo:hi]


def _narrow(x: torch.Tensor, axes: tuple[int, ...], box: Box) -> torch.Tensor:
    for axis, (lo, hi) in zip(axes, box, strict=True):
        x = x.narrow(axis, lo, hi - lo)
    return x


def _gloo_cuda(x: torch.Tensor) -> bool:
    return x.is_cuda and dist.get_backend() == "gloo"


class Exchange:
    """One halo exchange of a tensor ``x`` along a :class:`HaloPlan`, and its adjoint."""

    def __init__(self, plan: HaloPlan, x: torch.Tensor, group: dist.ProcessGroup) -> None:
        self.plan, self.x, self.group = plan, x, group
        self.like, self.shape = x.new_empty(0), tuple(x.shape)  # survive release()
        self.recv: dict[int, torch.Tensor] = {}
        self.requests: list[Any] = []
        self.staged: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.grad_parts: list[tuple[tuple[Index, ...], torch.Tensor]] = []
        self.grad_recv: dict[int, torch.Tensor] = {}
        self.sent_grads: list[torch.Tensor] = []
        self.returned: list[tuple[tuple[Index, ...], torch.Tensor | None]] = []
        self.backward_started = False
        #: Materialize only the received halos (own data and padding read as zeros).
        self.halo_only = False

    def _shape(self, box: Box) -> list[int]:
        shape = list(self.shape)
        for axis, (lo, hi) in zip(self.plan.axes, box, strict=True):
            shape[axis] = hi - lo
        return shape

    def _isend(self, tensor: torch.Tensor, peer: int, tag: int) -> None:
        tensor = tensor.contiguous()
        if _gloo_cuda(tensor):
            tensor = tensor.cpu()
        self.sent_grads.append(tensor)  # keep alive until the request completes
        self.requests.append(dist.isend(tensor, dst=peer, group=self.group, tag=tag))

    def _irecv(self, buffer: torch.Tensor, peer: int, tag: int) -> torch.Tensor:
        target = buffer
        if _gloo_cuda(buffer):
            target = torch.empty(buffer.shape, dtype=buffer.dtype)
            self.staged.append((target, buffer))
        self.requests.append(dist.irecv(target, src=peer, group=self.group, tag=tag))
        return buffer

    def _wait(self, phase: str) -> None:
        start = time.perf_counter()
        for request in self.requests:
            request.wait()
        STATS[phase] = STATS.get(phase, 0.0) + time.perf_counter() - start
        for host, device in self.staged:
            device.copy_(host)
        self.requests, self.staged, self.sent_grads = [], [], []

    # forward -------------------------------------------------------------------------------
    def start(self) -> None:
        """Post the receives and sends of the forward exchange."""
        for number, region in enumerate(self.plan.regions):
            if region.kind == "recv":
                buffer = self.x.new_empty(self._shape(region.box))
                self.recv[number] = self._irecv(buffer, region.peer, region.tag)
        for send in self.plan.sends:
            self._isend(_take(self.x, self.plan.axes, send.index), send.peer, send.tag)

    def wait(self) -> None:
        """Complete the forward exchange."""
        self._wait("forward")

    def materialize(self, box: Box) -> torch.Tensor:
        """The extended input restricted to ``box`` (after :meth:`wait`)."""
        axes = self.plan.axes
        out = self.x.new_empty(self._shape(box))
        for number, region in enumerate(self.plan.regions):
            part = _clip(region.box, box)
            if part is None:
                continue
            target = _narrow(
                out,
                axes,
                tuple((lo - c, hi - c) for (lo, hi), (c, _) in zip(part, box, strict=True)),
            )
            within = tuple(
                (lo - r, hi - r) for (lo, hi), (r, _) in zip(part, region.box, strict=True)
            )
            if region.kind == "fill" or (self.halo_only and region.kind == "local"):
                target.fill_(0.0 if self.halo_only else self.plan.fill)
            elif region.kind == "recv":
                target.copy_(_narrow(self.recv[number], axes, within))
            else:
                index = tuple(
                    _sub_index(i, lo, hi) for i, (lo, hi) in zip(region.index, within, strict=True)
                )
                target.copy_(_take(self.x, axes, index))
        return out

    # backward ------------------------------------------------------------------------------
    def start_backward(self, grads: list[tuple[Box, torch.Tensor]]) -> None:
        """Route the gradients of materialized boxes: send halo parts back, keep local parts."""
        self.backward_started = True
        axes = self.plan.axes
        for number, region in enumerate(self.plan.regions):
            if region.kind == "fill" or (self.halo_only and region.kind == "local"):
                continue
            for box, grad in grads:
                part = _clip(region.box, box)
                if part is None:
                    continue
                source = _narrow(
                    grad,
                    axes,
                    tuple((lo - c, hi - c) for (lo, hi), (c, _) in zip(part, box, strict=True)),
                )
                within = tuple(
                    (lo - r, hi - r) for (lo, hi), (r, _) in zip(part, region.box, strict=True)
                )
                if region.kind == "local":
                    index = tuple(
                        _sub_index(i, lo, hi)
                        for i, (lo, hi) in zip(region.index, within, strict=True)
                    )
                    self.grad_parts.append((index, source))
                else:
                    if number not in self.grad_recv:
                        self.grad_recv[number] = grad.new_zeros(self._shape(region.box))
                    _narrow(self.grad_recv[number], axes, within).add_(source)
        for number, region in enumerate(self.plan.regions):
            if region.kind == "recv":
                back = self.grad_recv.get(number)
                if back is None:
                    back = self.like.new_zeros(self._shape(region.box))
                self._isend(back, region.peer, region.tag)
        self.grad_recv = {}
        for send in self.plan.sends:
            shape = list(self.shape)
            for axis, idx in zip(axes, send.index, strict=True):
                shape[axis] = idx.stop - idx.start if isinstance(idx, slice) else len(idx)
            buffer = self._irecv(self.like.new_empty(shape), send.peer, send.tag)
            self.returned.append((send.index, buffer))

    def finish_backward(self, grad_x: torch.Tensor | None) -> torch.Tensor:
        """Wait for the neighbours' halo gradients and add everything into ``grad_x``."""
        if not self.backward_started:  # no box of this rank read a halo: still answer the peers
            self.start_backward([])
        self._wait("backward")
        axes = self.plan.axes
        parts = self.grad_parts + self.returned
        self.grad_parts, self.returned = [], []
        if grad_x is None:
            grad_x = _whole_local(parts, self.like, self.shape, axes)
        elif not grad_x.is_contiguous():
            grad_x = grad_x.contiguous()
        for index, value in parts:
            if value is not None:
                _add_at(grad_x, axes, index, value)
        return grad_x

    def release(self) -> None:
        """Drop the input and the received halos once the extended input is built."""
        self.x = None  # type: ignore[assignment]
        self.recv = {}


def _whole_local(
    parts: list[tuple[tuple[Index, ...], torch.Tensor | None]],
    like: torch.Tensor,
    shape: tuple[int, ...],
    axes: tuple[int, ...],
) -> torch.Tensor:
    """Start the input gradient from a part covering the whole block (no zero fill) if any."""
    for number, (index, value) in enumerate(parts):
        covers = all(
            isinstance(i, slice) and i.start == 0 and i.stop == shape[a]
            for a, i in zip(axes, index, strict=True)
        )
        if covers and value is not None:
            parts[number] = (index, None)
            return value.clone(memory_format=torch.contiguous_format)
    return like.new_zeros(shape)


class _HaloExtend(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, plan: HaloPlan) -> torch.Tensor:
        exchange = Exchange(plan, x, plan.group)
        exchange.start()
        exchange.wait()
        ctx.exchange = exchange
        out = exchange.materialize(plan.full_box)
        exchange.release()
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        exchange: Exchange = ctx.exchange
        exchange.start_backward([(exchange.plan.full_box, grad)])
        return exchange.finish_backward(None), None


def halo_extend(x: torch.Tensor, plan: HaloPlan) -> torch.Tensor:
    """``x`` extended (or trimmed) to the input range its output block needs.

    When the rank needs only its own data and nothing is exchanged, the result
    is a view of ``x`` (no copy).
    """
    regions = plan.regions
    if (
        not plan.needs_exchange
        and len(regions) == 1
        and regions[0].kind == "local"
        and all(isinstance(i, slice) for i in regions[0].index)
    ):
        return _take(x, plan.axes, regions[0].index)
    return _HaloExtend.apply(x, plan)


class _HaloStart(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, exchange: Exchange) -> tuple[torch.Tensor, torch.Tensor]:
        exchange.start()
        ctx.exchange = exchange
        return x.view_as(x), x.new_zeros(0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None, _token: Any) -> tuple[torch.Tensor, None]:
        return ctx.exchange.finish_backward(grad), None


class _HaloFinish(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, token: torch.Tensor, exchange: Exchange, *boxes: Box) -> Any:
        exchange.wait()
        ctx.exchange, ctx.boxes = exchange, boxes
        out = tuple(exchange.materialize(box) for box in boxes)
        exchange.release()
        return out

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        pairs = [(box, g) for box, g in zip(ctx.boxes, grads, strict=True) if g is not None]
        ctx.exchange.start_backward(pairs)
        return (ctx.exchange.like.new_zeros(0), None, *(None for _ in ctx.boxes))


def halo_start(x: torch.Tensor, plan: HaloPlan) -> tuple[torch.Tensor, torch.Tensor, Exchange]:
    """Post the exchange of ``x``; returns ``x`` (to compute the interior from), a token
    for :func:`halo_finish`, and the exchange."""
    exchange = Exchange(plan, x, plan.group)
    alias, token = _HaloStart.apply(x, exchange)
    return alias, token, exchange


def halo_finish(
    token: torch.Tensor, exchange: Exchange, boxes: list[Box], *, halo_only: bool = False
) -> tuple[torch.Tensor, ...]:
    """Wait for the exchange and return the extended input restricted to each box.

    With ``halo_only`` the rank's own data and the padding read as zeros: the
    boxes then hold only what the neighbours sent (for additive corrections).
    In the backward pass the halo gradients of these boxes are sent back
    while the interior's backward runs; :func:`halo_start`'s backward adds
    them up.
    """
    exchange.halo_only = halo_only
    return _HaloFinish.apply(token, exchange, *boxes)
