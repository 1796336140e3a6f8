"""A split convolution runs on the CPU kernel the unsplit layer gets, and stays exact.

Rounding bounds: a computed sum of ``K`` products differs from the exact one by
at most ``K u`` times the sum of the products' magnitudes (``u = eps / 2``,
first order), so two computations of the same convolution differ by at most
``K eps`` times the convolution of the magnitudes, element by element; ``K``
is the longest sum any output, input-gradient or weight-gradient element takes.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from sciml.distributed import spawn
from sciml.spatial_parallel import SpatialMesh, parallelize, shard, unshard
from sciml.spatial_parallel.layers.kernel import (
    IDENTITY,
    ConvGeometry,
    OneDNNConvolution,
    cpu_backend,
    fast_layout,
    permuted_convolution,
)
from sciml.spatial_parallel.testing import assert_parallel_close, check_parallel

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN"
)

#: A Conv3d(16, 16, 3) on a batch-1 block: oneDNN needs C * D * H > 20480 (float32).
CONV = ConvGeometry((16, 16, 3, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), 1)
#: Half of 48^3 along depth, with its two halo planes: 16 * 26 * 48 = 19968.
BLOCK, UNSPLIT = (1, 16, 26, 48, 48), (1, 16, 48, 48, 48)


def _run(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, geometry: ConvGeometry
) -> torch.Tensor:
    return permuted_convolution(x, w, b, geometry, IDENTITY)


def _grads(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, g: torch.Tensor, fn: Any
) -> list[torch.Tensor]:
    """Output and gradients of input, weight (and bias) for the output gradient ``g``."""
    leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
    y = fn(*leaves) if b is not None else fn(*leaves, None)
    y.backward(g)
    return [y.detach(), *(t.grad for t in leaves)]  # type: ignore[misc]


def _bounds(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    g: torch.Tensor,
    geometry: ConvGeometry,
    dtype: torch.dtype,
) -> list[torch.Tensor]:
    """``K eps`` (of ``dtype``) times the magnitudes' convolution and gradients, per quantity."""
    magnitudes = _grads(
        x.abs(), w.abs(), None if b is None else b.abs(), g.abs(), lambda *t: _run(*t, geometry)
    )
    kernel = math.prod(geometry.weight[2:])
    out_voxels = g.shape[0] * math.prod(g.shape[2:])
    # forward: in/groups * kernel (+ bias); input gradient: out/groups * kernel;
    # weight gradient: every output voxel of the batch (for a transposed one, input voxel)
    terms = max(
        geometry.weight[1] * kernel + 1,
        geometry.weight[0] * kernel,
        out_voxels,
        x.shape[0] * math.prod(x.shape[2:]),
    )
    eps = torch.finfo(dtype).eps
    return [terms * eps * m for m in magnitudes]


GEOMETRIES = [
    pytest.param(
        (2, 4, 7, 9, 8),
        ConvGeometry((6, 2, 3, 2, 4), (1, 2, 3), (1, 0, 2), (2, 1, 1), 2),
        id="conv",
    ),
    pytest.param(
        (2, 4, 5, 6, 4),
        ConvGeometry((4, 3, 3, 2, 4), (2, 1, 3), (1, 0, 2), (1, 2, 1), 1, True, (1, 0, 2)),
        id="transposed",
    ),
]


@pytest.mark.parametrize(("shape", "geometry"), GEOMETRIES)
@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_a_permuted_layout_is_the_same_convolution(
    shape: tuple[int, ...], geometry: ConvGeometry, perm: tuple[int, int, int]
) -> None:
    """Forward and every gradient equal the op's in float64, to its rounding."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64, generator=generator)
    w = torch.randn(geometry.weight, dtype=torch.float64, generator=generator)
    out_channels = (
        geometry.weight[1] * geometry.groups if geometry.transposed else geometry.weight[0]
    )
    b = torch.randn(out_channels, dtype=torch.float64, generator=generator)
    g = torch.randn_like(_run(x, w, b, geometry))
    ref = _grads(x, w, b, g, lambda *t: _run(*t, geometry))
    got = _grads(x, w, b, g, lambda *t: permuted_convolution(*t, geometry, perm))  # type: ignore[misc]
    for name, r, o, bound in zip(
        ("output", "input grad", "weight grad", "bias grad"),
        ref,
        got,
        _bounds(x, w, b, g, geometry, torch.float64),
        strict=True,
    ):
        assert o.shape == r.shape, name
        assert bool(((o - r).abs() <= bound).all()), f"{name}: {(o - r).abs().max():.3g}"


DIRECT = [
    pytest.param(BLOCK, CONV, (1, 2, 0), id="thin-block"),
    pytest.param(
        (1, 4, 7, 9, 8),
        ConvGeometry((6, 2, 3, 3, 3), (1, 1, 1), (2, 1, 0), (1, 2, 1), 2),
        (2, 0, 1),
        id="dilated-grouped",
    ),
    pytest.param(
        (1, 4, 7, 9, 8),
        ConvGeometry((6, 2, 3, 2, 4), (1, 2, 3), (1, 0, 2), (2, 1, 1), 2),
        (1, 0, 2),
        id="strided",
    ),
    pytest.param(
        (1, 3, 5, 6, 7),
        ConvGeometry((2, 3, 3, 3, 3), (1, 1, 1), (3, 1, 1), (1, 1, 1), 1),
        (2, 1, 0),
        id="padding-beyond-the-kernel",
    ),
]


@pytest.mark.parametrize(("shape", "geometry", "perm"), DIRECT)
def test_onednn_in_the_block_s_own_layout_is_the_same_convolution(
    shape: tuple[int, ...], geometry: ConvGeometry, perm: tuple[int, int, int]
) -> None:
    """Float32 forward and every gradient within the rounding bound of the float64 op.

    The input gradient is the adjoint convolution at stride 1, else (stride,
    padding beyond the kernel's reach) the op's own backward in ``perm``'s layout.
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64, generator=generator)
    w = torch.randn(geometry.weight, dtype=torch.float64, generator=generator)
    b = torch.randn(geometry.weight[0], dtype=torch.float64, generator=generator)
    g = torch.randn_like(_run(x, w, b, geometry))
    ref = _grads(x, w, b, g, lambda *t: _run(*t, geometry))
    got = _grads(
        x.float(),
        w.float(),
        b.float(),
        g.float(),
        lambda *t: OneDNNConvolution.apply(*t, geometry, perm),
    )
    bounds = _bounds(x, w, b, g, geometry, torch.float32)
    for name, r, o, bound in zip(
        ("output", "input grad", "weight grad", "bias grad"), ref, got, bounds, strict=True
    ):
        assert o.shape == r.shape, name
        assert bool(((o.double() - r).abs() <= bound).all()), f"{name}: {(o - r).abs().max():.3g}"


def _penalty_weight_grad(
    x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, v: torch.Tensor, fn: Any
) -> torch.Tensor:
    """d/dw of <v, dL/dx> for L = <g, conv(x, w)>: a gradient penalty's double backward."""
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(fn(x, w, None), x, g, create_graph=True)
    (grad_w,) = torch.autograd.grad((grad_x * v).sum(), w)
    return grad_w


@pytest.mark.parametrize(("shape", "geometry", "perm"), DIRECT)
def test_onednn_in_the_block_s_own_layout_is_differentiable_twice(
    shape: tuple[int, ...], geometry: ConvGeometry, perm: tuple[int, int, int]
) -> None:
    """A gradient penalty through the direct path, within the float32 bound of float64.

    dL/dx is linear in w, so d<v, dL/dx>/dw is the weight gradient of conv(v, w)
    for the output gradient g: one reduction, bounded like the weight gradient.
    """
    generator = torch.Generator().manual_seed(1)
    x, v = (torch.randn(shape, dtype=torch.float64, generator=generator) for _ in range(2))
    w = torch.randn(geometry.weight, dtype=torch.float64, generator=generator)
    g = torch.randn_like(_run(x, w, None, geometry))
    ref = _penalty_weight_grad(x, w, g, v, lambda *t: _run(*t, geometry))
    got = _penalty_weight_grad(
        x.float(),
        w.float(),
        g.float(),
        v.float(),
        lambda *t: OneDNNConvolution.apply(*t, geometry, perm),
    )
    bound = _bounds(v, w, None, g, geometry, torch.float32)[2]
    assert bool(((got.double() - ref).abs() <= bound).all()), f"{(got - ref).abs().max():.3g}"


def test_the_layout_moves_a_thin_block_onto_onednn() -> None:
    """The block below the threshold gets a layout on oneDNN; the op's own choice says so."""
    assert cpu_backend(BLOCK, torch.float32, CONV) == "Slow3d"
    assert cpu_backend(UNSPLIT, torch.float32, CONV) == "Mkldnn"
    perm = fast_layout(BLOCK, UNSPLIT, torch.float32, CONV)
    moved = (BLOCK[0], BLOCK[1], *(BLOCK[2 + p] for p in perm))
    assert cpu_backend(moved, torch.float32, CONV.permuted(perm)) == "Mkldnn"


@pytest.mark.parametrize(
    ("block", "unsplit", "dtype"),
    [
        pytest.param(BLOCK, BLOCK, torch.float32, id="unsplit-also-native"),
        pytest.param(BLOCK, UNSPLIT, torch.float64, id="float64-never-onednn"),
        pytest.param((1, 16, 48, 48, 26), UNSPLIT, torch.float32, id="already-onednn"),
        pytest.param((1, 16, 3, 3, 48), UNSPLIT, torch.float32, id="no-order-reaches-it"),
    ],
)
def test_the_layout_stays_where_nothing_is_gained(
    block: tuple[int, ...], unsplit: tuple[int, ...], dtype: torch.dtype
) -> None:
    """Only a move onto the unsplit layer's oneDNN is made."""
    assert fast_layout(block, unsplit, dtype, CONV) == IDENTITY


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")  # the switch's own
def test_the_layout_follows_the_oneDNN_switch() -> None:
    """With oneDNN switched off the selector never picks it, and nothing moves."""
    with torch.backends.mkldnn.flags(enabled=False):
        assert fast_layout(BLOCK, UNSPLIT, torch.float32, CONV) == IDENTITY


def test_an_invalid_shape_is_left_to_the_op() -> None:
    """A kernel larger than the padded input: no layout, and the op raises its own error."""
    geometry = ConvGeometry((16, 16, 3, 3, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1), 1)
    assert fast_layout((1, 16, 2, 48, 48), UNSPLIT, torch.float32, geometry) == IDENTITY


def split_rank(kind: str, size: int) -> dict[str, Any]:
    """One depth-split layer in float32 against the float64 unsplit op, and the kernels run."""
    mesh = SpatialMesh(depth=2)
    torch.manual_seed(0)
    layer: nn.Module = getattr(nn, kind)(16, 16, 3, padding=1)
    x = torch.randn(1, 16, size, size, size)
    reference = layer.double()
    x64 = x.double().requires_grad_()
    y64 = reference(x64)
    g = torch.randn(y64.shape)
    y64.backward(g.double())
    geometry = ConvGeometry(
        tuple(layer.weight.shape),
        (1, 1, 1),
        (1, 1, 1),
        (1, 1, 1),
        1,
        transposed=kind == "ConvTranspose3d",
    )
    w64, b64 = layer.weight.detach().clone(), layer.bias.detach().clone()
    bounds = _bounds(x.double(), w64, b64, g.double(), geometry, torch.float32)
    pmodel = parallelize(nn.Sequential(layer.float()), mesh)
    x_local = shard(x, mesh).requires_grad_()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        y_local = pmodel(x_local)
        y_local.backward(shard(g, mesh))
    ops = {event.name for event in prof.events()}
    onednn_inputs = [
        tuple(event.input_shapes[0])
        for event in prof.events()
        if event.name == "aten::mkldnn_convolution"
    ]
    quantities = {
        "output": (unshard(y_local.detach(), mesh), y64, bounds[0]),
        "input grad": (unshard(x_local.grad, mesh), x64.grad, bounds[1]),  # type: ignore[arg-type]
        "weight grad": (layer.weight.grad, reference.weight.grad, bounds[2]),
        "bias grad": (layer.bias.grad, reference.bias.grad, bounds[3]),
    }
    excess = {
        name: float(((got.detach().double() - ref).abs() - bound).max())
        for name, (got, ref, bound) in quantities.items()
    }
    return {
        "ops": ops,
        "onednn_inputs": onednn_inputs,
        "excess": excess,
        "local": tuple(x_local.shape),
    }


@pytest.mark.parametrize("kind", ["Conv3d", "ConvTranspose3d"])
def test_a_depth_split_layer_runs_on_onednn_and_stays_exact(kind: str) -> None:
    """A 40^3 x 16 layer split in two along depth: its halved blocks get oneDNN, as unsplit.

    16 x 22 x 40 = 14080 puts the blocks with their halos below oneDNN's threshold in
    their own layout (the unsplit 16 x 40 x 40 = 25600 is above it).
    """
    for rank in spawn(split_rank, 2, kind, 40, timeout=300):
        # oneDNN's transposed convolution has no aten op of its own: no native kernel ran
        if kind == "Conv3d":
            # forward, then the input gradient (the adjoint), on the blocks in their own
            # layout: no copy into a permuted one and back
            assert rank["onednn_inputs"] == [(1, 16, 22, 40, 40), (1, 16, 20, 40, 40)], rank
        assert not any(op.startswith("aten::slow_conv") for op in rank["ops"]), rank["ops"]
        assert all(e <= 0 for e in rank["excess"].values()), rank["excess"]


def test_a_permuted_convolution_is_laid_out_as_the_op_s_own() -> None:
    """Model code that views a convolution's output works on the permuted one too."""
    x = torch.randn(1, 16, 26, 48, 48)
    w = torch.randn(CONV.weight)
    y = permuted_convolution(x, w, None, CONV, fast_layout(BLOCK, UNSPLIT, torch.float32, CONV))
    assert y.is_contiguous() and y.shape == (1, 16, 24, 48, 48)


def test_an_overlapped_split_keeps_the_stride_of_an_unsplit_axis() -> None:
    """Height split, stride 2 along the unsplit width: the additive overlap path is exact.

    It convolved with stride 1 on every axis, and a rank's output had twice the width.
    """
    layer = nn.Conv3d(2, 2, 3, padding=1, stride=(1, 1, 2))
    run = functools.partial(check_parallel, overlap=True, dtype=torch.float64)
    assert_parallel_close(spawn(run, 2, {"height": 2}, layer, (1, 2, 6, 8, 8)))
