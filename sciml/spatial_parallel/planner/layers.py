"""Per-shape calibration: time and workspace of each rank's local convolutions, measured.

A profile's rates price a convolution by its FLOPs; on a CPU the library
picks a different algorithm per shape (an unfolded ``vol2col`` matrix, or
oneDNN), with times and scratch memory a single rate cannot follow: PyTorch
sends a batch-1 convolution with a small ``N x C x D x H`` (at most 20480)
to ``vol2col``, several times slower per sample than oneDNN at batch 2. Pooling
layers are measured the same way (:data:`POOL_KINDS`): the CPU's max pooling
with indices computes at a few ns per input element, far below the memory
bandwidth a roofline would price it at. As in
Dryden et al.'s performance model, :func:`measure_convs` times the very
convolutions the ranks run (:func:`local_conv`: the largest block with its
halos, the native padding left on unsplit dims) forward and backward, each
from cold caches (:func:`cache_evictor`: activations stream in a step), and
the resident-set growth beyond their outputs (each in a fresh process: see
:func:`measure_convs`); the planner uses these
:class:`ConvCost` entries instead of the roofline where it has them.
:func:`load_costs` / :func:`save_costs` keep them next to the profile.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from sciml.distributed.cpu_allocator import keep_freed_memory, mmap_large_allocations
from sciml.io_utils import atomic_write_text
from sciml.spatial_parallel.layers.kernel import (
    IDENTITY,
    ConvGeometry,
    cpu_backend,
    fast_layout,
    layout_convolution,
)
from sciml.spatial_parallel.partition import TransposeWindow, Window
from sciml.spatial_parallel.planner.graph import Layer
from sciml.spatial_parallel.planner.halo import Grid, largest
from sciml.spatial_parallel.planner.measure import (
    cache_evictor,
    clock,
    reset_peak,
    status_bytes,
)

Triple = tuple[int, int, int]
#: Window layers measured like convolutions (no weight).
POOL_KINDS = ("MaxPool3d", "AvgPool3d")
#: Convolutions a :class:`LocalConv` can time.
CONV_KINDS = ("Conv3d", "ConvTranspose3d")
#: Layers a :class:`LocalConv` can time.
LOCAL_KINDS = (*CONV_KINDS, *POOL_KINDS)


@dataclass(frozen=True)
class LocalConv:
    """One rank's convolution or pooling: its input block (with halos) and the layer's geometry.

    ``out_channels`` of a pooling layer is its channels, ``groups`` 1. ``ranks``:
    the processes that run it at once on the node's cores (the grid's ranks, up
    to the cores): co-running ranks share memory bandwidth, caches and the page
    fault path, so it is timed beside ``ranks - 1`` copies of itself.
    """

    kind: str
    in_shape: tuple[int, int, int, int, int]
    out_channels: int
    kernel: Triple
    stride: Triple
    dilation: Triple
    padding: Triple
    groups: int
    first: bool
    ceil_mode: bool = False
    ranks: int = 1
    layout: Triple = IDENTITY

    def __post_init__(self) -> None:
        """Refuse a kind it cannot run, fewer than one rank, or a layout not of 3 axes."""
        if self.kind not in LOCAL_KINDS:
            raise ValueError(f"LocalConv kind must be one of {LOCAL_KINDS}, got {self.kind!r}")
        if not isinstance(self.ranks, int) or isinstance(self.ranks, bool) or self.ranks < 1:
            raise ValueError(f"LocalConv ranks must be a positive integer, got {self.ranks!r}")
        if sorted(self.layout) != [0, 1, 2]:
            raise ValueError(
                f"LocalConv layout must order the spatial axes 0, 1, 2, got {self.layout!r}"
            )

    @property
    def geometry(self) -> ConvGeometry:
        """The convolution's parameters (a convolution kind only)."""
        return ConvGeometry(
            _weight_shape(self),
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            transposed=self.kind == "ConvTranspose3d",
        )

    @property
    def native(self) -> bool:
        """Whether PyTorch's CPU convolution runs it, in its layout, on its native kernel.

        In float32, as :func:`measure_convs` times it; ``False`` for a pooling layer.
        """
        if self.kind not in CONV_KINDS:
            return False
        shape = (*self.in_shape[:2], *(self.in_shape[2 + axis] for axis in self.layout))
        kernel = cpu_backend(shape, torch.float32, self.geometry.permuted(self.layout))
        return kernel.startswith("Slow")

    @property
    def key(self) -> str:
        """A string naming the shape (the cache key)."""
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class ConvCost:
    """Measured seconds and scratch bytes of a local convolution, forward and backward."""

    forward_s: float
    backward_s: float
    forward_bytes: float
    backward_bytes: float


def local_conv(
    kind: str,
    windows: Sequence[Window | TransposeWindow],
    in_block: tuple[int, int, int, int, int],
    out_channels: int,
    out_block: Triple,
    parts: Triple,
    *,
    groups: int,
    first: bool,
) -> LocalConv:
    """The convolution a rank runs to make ``out_block`` from ``in_block`` and its halos.

    Along a split dim (``parts > 1``) a convolution reads the whole range its
    output block needs, halos and padding assembled, and pads no more; along
    the others it keeps its own padding. A transposed convolution is priced
    on its input block with its own padding.
    """
    n, c, *spatial = in_block
    extents, pads, ceil = [], [], False
    for window, size, out, split in zip(windows, spatial, out_block, parts, strict=True):
        if isinstance(window, Window) and split > 1:
            extents.append((out - 1) * window.stride + window.reach if out else 0)
            pads.append(0)
        elif isinstance(window, Window):
            extents.append(size)
            pads.append(window.pad_lo)
            ceil = ceil or window.ceil_mode
        else:
            extents.append(size)
            pads.append(window.padding)
    return LocalConv(
        kind=kind,
        in_shape=(n, c, *extents),  # type: ignore[arg-type]
        out_channels=out_channels,
        kernel=tuple(w.kernel for w in windows),  # type: ignore[arg-type]
        stride=tuple(w.stride for w in windows),  # type: ignore[arg-type]
        dilation=tuple(w.dilation for w in windows),  # type: ignore[arg-type]
        padding=tuple(pads),  # type: ignore[arg-type]
        groups=groups,
        first=first,
        ceil_mode=ceil,
    )


def conv_of(layer: Layer, grid: Grid, *, first: bool, ranks: int = 1) -> LocalConv | None:
    """The local convolution or pooling the fullest rank runs for ``layer``.

    ``None`` for other layers, and for a pooling layer that reads the model's
    input (no backward: the roofline prices it). ``ranks``: those computing at once.
    A convolution comes in the layout the split layer gives it on the CPU
    (:func:`~sciml.spatial_parallel.layers.kernel.fast_layout`: the unsplit
    layer's kernel).
    """
    measured = layer.cost in CONV_KINDS or (layer.cost in POOL_KINDS and not first)
    if not measured or layer.windows is None:
        return None
    n, c, *spatial = layer.in_shape
    parts = grid[1:]
    block = (largest(n, grid[0]), c, *(largest(s, p) for s, p in zip(spatial, parts, strict=True)))
    out = tuple(largest(s, p) for s, p in zip(layer.out_shape[2:], parts, strict=True))
    conv = local_conv(
        layer.cost,
        layer.windows,
        block,  # type: ignore[arg-type]
        layer.out_shape[1],
        out,  # type: ignore[arg-type]
        parts,
        groups=layer.groups,
        first=first,
    )
    if layer.cost in CONV_KINDS:
        unsplit = (block[0], *layer.in_shape[1:])
        layout = fast_layout(conv.in_shape, unsplit, torch.float32, conv.geometry)
        conv = replace(conv, layout=layout)
    return replace(conv, ranks=ranks)


def _run(conv: LocalConv, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    if conv.kind == "MaxPool3d":
        return F.max_pool3d(
            x, conv.kernel, conv.stride, conv.padding, conv.dilation, conv.ceil_mode
        )
    if conv.kind == "AvgPool3d":
        return F.avg_pool3d(x, conv.kernel, conv.stride, conv.padding, conv.ceil_mode)
    return layout_convolution(x, weight, None, conv.geometry, conv.layout)


def _weight_shape(conv: LocalConv) -> tuple[int, ...]:
    """The weight's shape (empty for a pooling layer)."""
    c = conv.in_shape[1]
    if conv.kind in POOL_KINDS:
        return (0,)
    if conv.kind == "Conv3d":
        return (conv.out_channels, c // conv.groups, *conv.kernel)
    return (c, conv.out_channels // conv.groups, *conv.kernel)


def _tensors(conv: LocalConv) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Input, weight (empty for a pooling layer) and output gradient of ``conv`` (random)."""
    weight = torch.randn(_weight_shape(conv), requires_grad=conv.kind not in POOL_KINDS)
    x = torch.randn(conv.in_shape, requires_grad=not conv.first)
    return x, weight, torch.ones_like(_run(conv, x, weight))


def _seconds(conv: LocalConv, *, repeats: int) -> tuple[float, float]:
    """Forward and backward seconds, the best of ``repeats`` after a warm-up, from cold caches.

    Before each timed call a buffer twice the last-level cache is written, so
    that the convolution reads its input (and the backward its output gradient
    and saved input) from memory, as in a training step whose activations
    stream through the cache: timed hot, the small blocks of split grids ran
    from the cache and came out too fast. On one intra-op thread the clock is
    this thread's CPU time (:func:`~sciml.spatial_parallel.planner.measure.clock`),
    which time another process takes from it does not inflate.
    """
    x, weight, grad = _tensors(conv)
    evict = cache_evictor()
    timer = clock()
    fwd, bwd = [], []
    for _ in range(repeats + 1):
        if dist.is_initialized():
            dist.barrier()  # the ranks of a measurement run it together
        evict()
        start = timer()
        y = _run(conv, x, weight)
        fwd.append(timer() - start)
        evict()
        start = timer()
        y.backward(grad)
        bwd.append(timer() - start)
        x.grad = weight.grad = None
        del y
    return min(fwd[1:]), min(bwd[1:])  # the least disturbed by other load


def _forward_kept(
    conv: LocalConv, x: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, float]:
    """The forward's output, and the bytes of it and of the new tensors autograd saves.

    New: not the input or weight (a max pooling's indices, say).
    """
    saved: list[torch.Tensor] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        y = _run(conv, x, weight)
    known = {t.untyped_storage().data_ptr() for t in (x, weight, y)}
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved}
    new = sum(n for ptr, n in storages.items() if ptr not in known)
    return y, float(y.numel() * y.element_size() + new)


def _scratch(conv: LocalConv, *, repeats: int) -> tuple[float, float]:
    """Resident-set growth of the forward and backward beyond their results (median).

    The forward's results are its output and what autograd saves for the
    backward beyond the inputs (a max pooling's indices): the planner counts
    those as kept activations.
    """
    x, weight, grad = _tensors(conv)
    fwd, bwd = [], []
    cpu = torch.device("cpu")
    for _ in range(repeats + 1):
        before = status_bytes("VmRSS")
        reset_peak(cpu)
        y, kept = _forward_kept(conv, x, weight)
        fwd.append(status_bytes("VmHWM") - before - kept)
        before = status_bytes("VmRSS")
        reset_peak(cpu)
        y.backward(grad)
        grads = (0 if conv.first else x.numel()) * x.element_size()
        bwd.append(status_bytes("VmHWM") - before - grads)
        x.grad = weight.grad = None
        del y
    return max(0.0, statistics.median(fwd[1:])), max(0.0, statistics.median(bwd[1:]))


def _all_seconds(convs: list[LocalConv], repeats: int) -> list[tuple[float, float]]:
    """:func:`_seconds` of each convolution (a rank function: a fresh process, freed memory kept).

    Under :func:`keep_freed_memory`, as in training: a convolution pays no page
    faults for the scratch and outputs the one before it freed.
    """
    keep_freed_memory()
    return [_seconds(conv, repeats=repeats) for conv in convs]


def _all_scratch(convs: list[LocalConv], repeats: int) -> list[tuple[float, float]]:
    """:func:`_scratch` of each convolution (a rank function: a fresh process, mmap throughout)."""
    mmap_large_allocations()
    return [_scratch(conv, repeats=repeats) for conv in convs]


def measure_convs(
    convs: Iterable[LocalConv], *, repeats: int = 5, threads: int = 1
) -> dict[str, ConvCost]:
    """Time (and measure the scratch memory of) each distinct local convolution on the CPU.

    ``threads`` intra-op threads: one, as ``sciml.distributed.spawn`` gives each rank. A
    convolution of ``ranks`` > 1 is timed in that many processes at once, and
    the slowest one's time kept. Times
    and scratch are measured in fresh processes (:func:`sciml.distributed.spawn.spawn`):
    the times are taken as training runs (:func:`keep_freed_memory`), the
    scratch needs :func:`mmap_large_allocations`, under which every large
    tensor page-faults afresh and runs slower than in training, and a heap that
    earlier work left behind would hide part of the scratch.
    """
    from sciml.distributed.spawn import spawn

    wanted = [c for c in {c.key: c for c in convs}.values() if math.prod(c.in_shape) > 0]
    if not wanted:
        return {}
    seconds: dict[str, tuple[float, float]] = {}
    for ranks in sorted({c.ranks for c in wanted}):
        group = [c for c in wanted if c.ranks == ranks]
        times = spawn(_all_seconds, ranks, group, repeats, threads=threads)
        for index, conv in enumerate(group):
            seconds[conv.key] = (
                max(rank[index][0] for rank in times),
                max(rank[index][1] for rank in times),
            )
    shapes = list({replace(c, ranks=1).key: replace(c, ranks=1) for c in wanted}.values())
    scratch = dict(
        zip(
            [c.key for c in shapes],
            spawn(_all_scratch, 1, shapes, repeats, threads=threads)[0],
            strict=True,
        )
    )
    return {
        conv.key: ConvCost(*seconds[conv.key], *scratch[replace(conv, ranks=1).key])
        for conv in wanted
    }


def save_costs(costs: Mapping[str, ConvCost], path: Path | str) -> Path:
    """Merge ``costs`` into the JSON cache at ``path`` (atomic write)."""
    path = Path(path)
    merged = {key: asdict(cost) for key, cost in load_costs(path).items()} if path.exists() else {}
    merged.update({key: asdict(cost) for key, cost in costs.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(merged, indent=0, sort_keys=True))
    return path


def load_costs(path: Path | str) -> dict[str, ConvCost]:
    """The measured costs cached at ``path``.

    Raises:
        ValueError: If the file is not such a cache.
    """
    try:
        data = json.loads(Path(path).read_text())
        return {key: ConvCost(**value) for key, value in data.items()}
    except (OSError, json.JSONDecodeError, TypeError, AttributeError) as err:
        raise ValueError(f"cannot read the convolution costs {path}: {err}") from None
