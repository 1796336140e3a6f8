"""Partition maths: blocks, sliding-window halos and the pieces each rank assembles.

Every tensor in a spatially parallel model is split like :func:`torch.tensor_split`:
along a dimension of global size ``L`` over ``P`` ranks, rank ``r`` owns
``[lo_r, hi_r)`` and the first ``L % P`` blocks hold one extra element. A
layer's output is split the same way over its own global size, so each rank
computes the input range its output block needs (its *window*), and
:func:`plan_dim` cuts that range into pieces: its own data, data from a
neighbour (the halo), and padding outside the global volume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Boundary = Literal["fill", "replicate", "reflect", "circular"]
DIM_NAMES = ("depth", "height", "width")
#: The axes of the process grid, in rank order (``width`` fastest).
MESH_AXES = ("data", *DIM_NAMES)


class HaloError(ValueError):
    """A block is too small to supply the halo a neighbouring rank needs."""


def _check_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def block_bounds(size: int, parts: int) -> tuple[tuple[int, int], ...]:
    """``[lo, hi)`` of each of ``parts`` blocks of ``size`` (``torch.tensor_split`` order).

    Raises:
        ValueError: If ``size`` is not an integer >= 0 or ``parts`` not one >= 1.
    """
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (size, parts)) or (
        parts < 1 or size < 0
    ):
        raise ValueError(
            f"cannot split size {size!r} into {parts!r} blocks: expected integers size >= 0 "
            f"and parts >= 1"
        )
    base, extra = divmod(size, parts)
    bounds, lo = [], 0
    for index in range(parts):
        hi = lo + base + (index < extra)
        bounds.append((lo, hi))
        lo = hi
    return tuple(bounds)


@dataclass(frozen=True)
class Window:
    """Sliding-window geometry of a layer along one dimension.

    Output ``o`` reads inputs ``o * stride - pad_lo + j * dilation`` for ``j < kernel``.
    """

    kernel: int
    stride: int = 1
    dilation: int = 1
    pad_lo: int = 0
    pad_hi: int = 0
    ceil_mode: bool = False

    def __post_init__(self) -> None:
        """Reject non-integer or out-of-range sizes."""
        for name in ("kernel", "stride", "dilation"):
            _check_int(f"Window {name}", getattr(self, name), 1)
        for name in ("pad_lo", "pad_hi"):
            _check_int(f"Window {name}", getattr(self, name), 0)

    @property
    def reach(self) -> int:
        """Input extent of one window."""
        return self.dilation * (self.kernel - 1) + 1

    def output_size(self, size: int) -> int:
        """Global output size for a global input ``size`` (PyTorch's formula)."""
        span = size + self.pad_lo + self.pad_hi - self.reach
        out = (span + (self.stride - 1 if self.ceil_mode else 0)) // self.stride + 1
        if self.ceil_mode and (out - 1) * self.stride >= size + self.pad_lo:
            out -= 1  # the last window must start inside the input or left padding
        if out < 1:
            raise ValueError(
                f"input size {size} (+ padding {self.pad_lo}+{self.pad_hi}) is smaller than the "
                f"window extent {self.reach}"
            )
        return out

    def input_range(self, out_lo: int, out_hi: int) -> tuple[int, int]:
        """Virtual input range ``[a, b)`` read by outputs ``[out_lo, out_hi)``."""
        if out_hi <= out_lo:
            return (0, 0)
        a = out_lo * self.stride - self.pad_lo
        return (a, (out_hi - 1) * self.stride - self.pad_lo + self.reach)


@dataclass(frozen=True)
class TransposeWindow:
    """Geometry of a transposed convolution along one dimension."""

    kernel: int
    stride: int = 1
    dilation: int = 1
    padding: int = 0
    output_padding: int = 0

    def __post_init__(self) -> None:
        """Reject non-integer or out-of-range sizes."""
        for name in ("kernel", "stride", "dilation"):
            _check_int(f"TransposeWindow {name}", getattr(self, name), 1)
        for name in ("padding", "output_padding"):
            _check_int(f"TransposeWindow {name}", getattr(self, name), 0)

    def output_size(self, size: int) -> int:
        """Global output size (PyTorch's formula)."""
        reach = self.dilation * (self.kernel - 1)
        return (size - 1) * self.stride - 2 * self.padding + reach + self.output_padding + 1

    def input_range(self, out_lo: int, out_hi: int, size: int) -> tuple[int, int]:
        """Inputs ``[a, b)`` (within ``[0, size)``) feeding outputs ``[out_lo, out_hi)``."""
        if out_hi <= out_lo:
            return (0, 0)
        reach = self.dilation * (self.kernel - 1)
        a = max(0, -(-(out_lo + self.padding - reach) // self.stride))
        b = min(size, (out_hi - 1 + self.padding) // self.stride + 1)
        return (a, max(a, b))


@dataclass(frozen=True)
class Piece:
    """A run of the assembled (extended) input along one dimension.

    ``source`` is the index (along this dimension) of the rank holding the
    data, or ``None`` for a constant fill; ``index`` lists the global input
    indices, in order.
    """

    source: int | None
    index: tuple[int, ...]

    @property
    def size(self) -> int:
        """Number of elements."""
        return len(self.index)

    def local(self, lo: int) -> slice | tuple[int, ...]:
        """Indices into the source block starting at ``lo``: a slice when contiguous."""
        first = self.index[0] - lo
        if self.index == tuple(range(self.index[0], self.index[0] + self.size)):
            return slice(first, first + self.size)
        return tuple(i - lo for i in self.index)


@dataclass(frozen=True)
class DimPlan:
    """Who needs what along one dimension, for every rank of that dimension.

    Attributes:
        size: Global input size.
        out_size: Global output size.
        blocks: Input block of each rank.
        out_blocks: Output block of each rank.
        needs: Virtual input range each rank's output block reads.
        pieces: For each rank, the pieces that assemble its needed range.
    """

    size: int
    out_size: int
    blocks: tuple[tuple[int, int], ...]
    out_blocks: tuple[tuple[int, int], ...]
    needs: tuple[tuple[int, int], ...]
    pieces: tuple[tuple[Piece, ...], ...]

    @property
    def parts(self) -> int:
        """Number of ranks along this dimension."""
        return len(self.blocks)


def _owner(index: int, blocks: Sequence[tuple[int, int]]) -> int:
    for rank, (lo, hi) in enumerate(blocks):
        if lo <= index < hi:
            return rank
    raise AssertionError(f"index {index} outside every block {blocks}")


def _source_index(v: int, size: int, boundary: Boundary) -> int | None:
    """Global index that virtual position ``v`` reads, or ``None`` for a fill."""
    if 0 <= v < size:
        return v
    if boundary == "fill":
        return None
    if boundary == "replicate":
        return min(max(v, 0), size - 1)
    if boundary == "circular":
        return v % size
    # reflect (without repeating the edge), as torch.nn.functional.pad
    period = 2 * (size - 1)
    if period == 0:
        return 0
    v = abs(v) % period
    return v if v < size else period - v


def _pieces(
    need: tuple[int, int], size: int, blocks: Sequence[tuple[int, int]], boundary: Boundary
) -> tuple[Piece, ...]:
    runs: list[tuple[int | None, list[int]]] = []
    for v in range(*need):
        g = _source_index(v, size, boundary)
        source = None if g is None else _owner(g, blocks)
        if runs and runs[-1][0] == source:
            runs[-1][1].append(-1 if g is None else g)
        else:
            runs.append((source, [-1 if g is None else g]))
    return tuple(Piece(source, tuple(index)) for source, index in runs)


def plan_dim(
    size: int,
    parts: int,
    out_size: int,
    needs: Sequence[tuple[int, int]],
    *,
    boundary: Boundary = "fill",
    layer: str = "layer",
    dim: str = "depth",
) -> DimPlan:
    """Plan the assembly of every rank's needed input range along one dimension.

    Args:
        size: Global input size.
        parts: Ranks along this dimension.
        out_size: Global output size (split like the input).
        needs: Virtual input range ``[a, b)`` read by each rank's output block.
        boundary: What positions outside ``[0, size)`` hold: a constant
            (``"fill"``), the edge value, a mirror image or the periodic image.
        layer: Layer name, for error messages.
        dim: Dimension name, for error messages.

    Raises:
        HaloError: If a rank needs data from a rank that is not its neighbour,
            i.e. a block is smaller than the halo it must supply.
    """
    blocks = block_bounds(size, parts)
    _check_int("plan_dim out_size", out_size, 0)
    if len(needs) != parts:
        raise ValueError(f"{layer}: {len(needs)} needed ranges for {parts} ranks along {dim}")
    if boundary not in ("fill", "replicate", "reflect", "circular"):
        raise ValueError(f"{layer}: unknown boundary {boundary!r}")
    if boundary == "reflect" and any(a < -(size - 1) or b > 2 * size - 1 for a, b in needs):
        raise HaloError(
            f"{layer}: reflect padding along {dim} needs more than the input size {size} allows"
        )
    pieces = tuple(_pieces(need, size, blocks, boundary) for need in needs)
    for rank, rank_pieces in enumerate(pieces):
        for piece in rank_pieces:
            if piece.source is None or piece.source == rank:
                continue
            gap = (piece.source - rank) % parts if boundary == "circular" else piece.source - rank
            if abs(gap) != 1 and not (boundary == "circular" and gap in (1, parts - 1)):
                raise HaloError(
                    f"{layer}: along {dim}, rank {rank} needs input indices "
                    f"{piece.index[0]}..{piece.index[-1]} held by rank {piece.source}, which is "
                    f"not its neighbour: the blocks {[hi - lo for lo, hi in blocks]} of the "
                    f"global size {size} are smaller than the halo "
                    f"(needed range {needs[rank]}, own block {blocks[rank]}); use fewer ranks "
                    f"along {dim} or a larger input"
                )
    return DimPlan(size, out_size, blocks, block_bounds(out_size, parts), tuple(needs), pieces)


def window_plan(
    window: Window, size: int, parts: int, *, boundary: Boundary = "fill", layer: str, dim: str
) -> DimPlan:
    """:func:`plan_dim` for a sliding-window layer (convolution, pooling)."""
    try:
        out_size = window.output_size(size)
    except ValueError as err:
        raise ValueError(f"{layer}: along {dim}, {err}") from None
    needs = [window.input_range(lo, hi) for lo, hi in block_bounds(out_size, parts)]
    return plan_dim(size, parts, out_size, needs, boundary=boundary, layer=layer, dim=dim)


def same_padding(kernel: int, dilation: int) -> tuple[int, int]:
    """``(left, right)`` padding of ``padding="same"`` (PyTorch puts the extra on the right)."""
    total = dilation * (kernel - 1)
    return total // 2, total - total // 2


__all__ = [
    "DIM_NAMES",
    "Boundary",
    "DimPlan",
    "HaloError",
    "Piece",
    "TransposeWindow",
    "Window",
    "block_bounds",
    "plan_dim",
    "same_padding",
    "window_plan",
]
