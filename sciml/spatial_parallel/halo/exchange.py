"""One halo exchange of a tensor along a :class:`HaloPlan`, and its adjoint.

:class:`Exchange` posts the sends and receives of a plan as one
:func:`torch.distributed.batch_isend_irecv` call per direction (forward, then
backward), materializes boxes of the extended input from the received halos, the own
block and the padding, and routes their gradients back in the backward pass.
The autograd functions that drive it are in :mod:`sciml.spatial_parallel.halo`.

Every rank posts its operations in one canonical order, sorted by
``(peer, tag, kind)``: a rank's sends to a peer appear in the same order as the
peer's matching receives, which is the order NCCL matches messages between a
pair of ranks in (it ignores tags), so the exchange cannot cross-match or
deadlock.

Waiting for messages is a ``torch.profiler`` range (``halo_wait_forward``,
``halo_wait_backward``) and is added to every active :class:`HaloTimer`.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist

from sciml.spatial_parallel.constants import constant
from sciml.spatial_parallel.halo.overlap import Box, intersect
from sciml.spatial_parallel.halo.plan import HaloPlan, Index, Region

_ACTIVE_TIMERS: list[HaloTimer] = []


class HaloTimer:
    """Opt-in timer: seconds spent waiting for halo messages while it is active, by phase.

    Example::

        with HaloTimer() as timer:
            model(x).sum().backward()
        timer.seconds  # {"forward": ..., "backward": ...}

    Every wait of every exchange on this process counts, whichever thread runs it
    (the autograd engine runs CUDA backward passes on its own threads).
    """

    def __init__(self) -> None:
        """Start with no waiting counted."""
        self.seconds: dict[str, float] = {}

    @property
    def total(self) -> float:
        """Seconds waited in all phases."""
        return sum(self.seconds.values())

    def add(self, phase: str, seconds: float) -> None:
        """Count ``seconds`` of waiting in ``phase``."""
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def __enter__(self) -> HaloTimer:
        """Start counting the waits of this process."""
        _ACTIVE_TIMERS.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop counting."""
        _ACTIVE_TIMERS.remove(self)


def take(x: torch.Tensor, axes: tuple[int, ...], index: tuple[Index, ...]) -> torch.Tensor:
    """``x`` at ``index`` on ``axes`` (a view for slices, a gather for index lists)."""
    for axis, idx in zip(axes, index, strict=True):
        if isinstance(idx, slice):
            x = x.narrow(axis, idx.start, idx.stop - idx.start)
        else:
            x = x.index_select(axis, constant(idx, device=x.device))
    return x


def _add_at(
    target: torch.Tensor, axes: tuple[int, ...], index: tuple[Index, ...], value: torch.Tensor
) -> None:
    """``target[index] += value``, the adjoint of :func:`take` (repeated indices add up)."""
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
        value = value.new_zeros(shape).index_add_(axis, constant(idx, device=value.device), value)
    axis, idx = gathered[0]
    target.index_add_(axis, constant(idx, device=target.device), value)


def _sub_index(index: Index, lo: int, hi: int) -> Index:
    if isinstance(index, slice):
        return slice(index.start + lo, index.start + hi)
    return index[lo:hi]


def _local_index(region: Region, within: Box) -> tuple[Index, ...]:
    """Indices into this rank's block of the part ``within`` of a ``"local"`` region."""
    return tuple(_sub_index(i, lo, hi) for i, (lo, hi) in zip(region.index, within, strict=True))


def narrow(x: torch.Tensor, axes: tuple[int, ...], box: Box) -> torch.Tensor:
    """The view of ``x`` on ``box`` along ``axes``."""
    for axis, (lo, hi) in zip(axes, box, strict=True):
        x = x.narrow(axis, lo, hi - lo)
    return x


def _gloo_cuda(x: torch.Tensor, group: dist.ProcessGroup) -> bool:
    """Whether ``x`` is a CUDA tensor that the group's backend cannot send (gloo only)."""
    return x.is_cuda and "nccl" not in dist.get_backend_config(group)


#: An operation to post: ``(peer, tag, 0 for a send or 1 for a receive, tensor)``.
Operation = tuple[int, int, int, torch.Tensor]


class Exchange:
    """One halo exchange of a tensor ``x`` along a :class:`HaloPlan`, and its adjoint."""

    def __init__(self, plan: HaloPlan, x: torch.Tensor, group: dist.ProcessGroup) -> None:
        """Prepare the exchange of ``x`` along ``plan`` within ``group`` (nothing is sent yet)."""
        self.plan, self.x, self.group = plan, x, group
        self.like, self.shape = x.new_empty(0), tuple(x.shape)  # survive release()
        self.recv: dict[int, torch.Tensor] = {}
        self.ops: list[Operation] = []
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
        if _gloo_cuda(tensor, self.group):
            tensor = tensor.cpu()
        self.sent_grads.append(tensor)  # keep alive until the request completes
        self.ops.append((peer, tag, 0, tensor))

    def _irecv(self, buffer: torch.Tensor, peer: int, tag: int) -> torch.Tensor:
        target = buffer
        if _gloo_cuda(buffer, self.group):
            target = torch.empty(buffer.shape, dtype=buffer.dtype)
            self.staged.append((target, buffer))
        self.ops.append((peer, tag, 1, target))
        return buffer

    def _post(self) -> None:
        """Post the collected operations as one batch, sorted by peer, tag and kind.

        Under NCCL the requests' ``wait`` makes the current stream wait for the
        exchange; the sent tensors stay referenced (``sent_grads``) until then.
        """
        ops, self.ops = sorted(self.ops, key=lambda op: op[:3]), []
        functions = (dist.isend, dist.irecv)
        batch = [
            dist.P2POp(functions[kind], t, peer, self.group, tag) for peer, tag, kind, t in ops
        ]
        if batch:
            self.requests = dist.batch_isend_irecv(batch)

    def _wait(self, phase: str) -> None:
        with torch.profiler.record_function(f"halo_wait_{phase}"):
            start = time.perf_counter()
            for request in self.requests:
                request.wait()
            seconds = time.perf_counter() - start
        for timer in _ACTIVE_TIMERS:
            timer.add(phase, seconds)
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
            self._isend(take(self.x, self.plan.axes, send.index), send.peer, send.tag)
        self._post()

    def wait(self) -> None:
        """Complete the forward exchange."""
        self._wait("forward")

    def _zero(self, region: Region) -> bool:
        """True for regions that read as padding: the fill, and the own block with ``halo_only``."""
        return region.kind == "fill" or (self.halo_only and region.kind == "local")

    def materialize(self, box: Box) -> torch.Tensor:
        """The extended input restricted to ``box`` (after :meth:`wait`)."""
        axes = self.plan.axes
        out = self.x.new_empty(self._shape(box))
        for number, region in enumerate(self.plan.regions):
            hit = intersect(box, region.box)
            if hit is None:
                continue
            in_box, within = hit
            target = narrow(out, axes, in_box)
            if self._zero(region):
                target.fill_(0.0 if self.halo_only else self.plan.fill)
            elif region.kind == "recv":
                target.copy_(narrow(self.recv[number], axes, within))
            else:
                target.copy_(take(self.x, axes, _local_index(region, within)))
        return out

    # backward ------------------------------------------------------------------------------
    def start_backward(self, grads: list[tuple[Box, torch.Tensor]]) -> None:
        """Route the gradients of materialized boxes: send halo parts back, keep local parts."""
        self.backward_started = True
        axes = self.plan.axes
        for number, region in enumerate(self.plan.regions):
            if self._zero(region):
                continue
            for box, grad in grads:
                hit = intersect(box, region.box)
                if hit is None:
                    continue
                in_box, within = hit
                source = narrow(grad, axes, in_box)
                if region.kind == "local":
                    self.grad_parts.append((_local_index(region, within), source))
                else:
                    if number not in self.grad_recv:
                        self.grad_recv[number] = grad.new_zeros(self._shape(region.box))
                    narrow(self.grad_recv[number], axes, within).add_(source)
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
        self._post()

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
