"""``interpolate`` and adaptive pooling of a split volume, as on the global tensor.

Nearest interpolation picks its source elements globally and re-splits them
to the standard blocks; trilinear interpolation reads a halo as the split
``nn.Upsample`` does (it runs one); adaptive pooling takes any output size.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel.layers.adaptive import adaptive_avg_pool, adaptive_max_pool
from sciml.spatial_parallel.layers.upsample import SpatialUpsample
from sciml.spatial_parallel.partition import block_bounds
from sciml.spatial_parallel.split.op_names import aten_name, refuse
from sciml.spatial_parallel.split.redistribute import redistribute_along
from sciml.spatial_parallel.split.tensor import (
    SplitContext,
    SplitTensor,
    first_split,
    global_result,
    unwrap,
    wrap_split,
)


def interpolate_blocks(
    ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``F.interpolate`` of a split block: nearest re-split globally, trilinear with halos."""
    x = first_split(func, args, kwargs)
    names = ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")
    options = dict(zip(names, args[1:], strict=False)) | kwargs
    mode = options.get("mode", "nearest")
    if mode == "trilinear" and not options.get("antialias"):
        return _trilinear(ctx, func, x, options)
    if mode not in ("nearest", "nearest-exact"):
        raise refuse(
            func,
            x._split,
            f"mode={mode!r} is not computed on blocks; use nn.Upsample (parallelize swaps it "
            f"for its halo-exchanging version), mode='trilinear' or mode='nearest'",
        )
    gout = tuple(global_result(func, args, kwargs).shape)
    spatial = len(x._gshape) - 2
    if any(d < 2 for d, _ in x._split):
        raise refuse(func, x._split, "it interpolates dims 2..; the batch or channel dim is split")
    out = unwrap(x)
    split = dict(x._split)
    for dim in range(2, 2 + spatial):
        single = [1] * spatial
        single[dim - 2] = x._gshape[dim]
        probe = torch.arange(x._gshape[dim], dtype=torch.float64).reshape(1, 1, *single)
        scale = options.get("scale_factor")
        if scale is not None and not options.get("recompute_scale_factor"):
            factor = scale[dim - 2] if isinstance(scale, tuple | list) else scale
            target: dict[str, Any] = {
                "scale_factor": [1.0] * (dim - 2) + [factor] + [1.0] * (1 + spatial - dim)
            }
        else:
            target = {"size": [1] * (dim - 2) + [gout[dim]] + [1] * (1 + spatial - dim)}
        source = F.interpolate(probe, mode=mode, **target).reshape(-1).long()
        if dim not in split:
            out = out.index_select(dim, source.to(out.device))
            continue
        axis = split[dim]
        blocks = block_bounds(x._gshape[dim], ctx.mesh.grid[axis])
        pieces = []
        for a, b in blocks:
            inside = ((source >= a) & (source < b)).nonzero().reshape(-1)
            lo = int(inside[0]) if len(inside) else int((source < a).sum())
            pieces.append(((lo, lo + len(inside)),))
        lo, hi = pieces[ctx.mesh.spatial_coords[axis]][0]
        a = blocks[ctx.mesh.spatial_coords[axis]][0]
        out = out.index_select(dim, (source[lo:hi] - a).to(out.device))
        out = redistribute_along(ctx, out, dim, axis, tuple(pieces), gout[dim])
    return wrap_split(out, ctx, gout, x._split)


def _trilinear(ctx: SplitContext, func: Any, x: SplitTensor, options: dict[str, Any]) -> Any:
    """Trilinear ``interpolate`` of a volume block: the split ``Upsample`` layer's halo reads."""
    if len(x._gshape) != 5 or any(d != a + 2 for d, a in x._split):
        raise refuse(func, x._split, "trilinear interpolation takes an (N, C, D, H, W) volume")
    key = tuple(
        repr(options.get(k))
        for k in ("size", "scale_factor", "align_corners", "recompute_scale_factor")
    )
    layer = ctx.helpers.get(key)
    if layer is None:
        upsample = nn.Upsample(
            size=options.get("size"),
            scale_factor=options.get("scale_factor"),
            mode="trilinear",
            align_corners=options.get("align_corners"),
            recompute_scale_factor=options.get("recompute_scale_factor"),
        )
        layer = ctx.helpers[key] = SpatialUpsample.from_module(
            upsample, ctx.mesh, name="F.interpolate"
        )
    layer._traced = x._gshape
    out = layer(unwrap(x))
    sizes = [size for size, _ in layer._sizes(x._gshape[2:])]
    return wrap_split(out, ctx, (*x._gshape[:2], *sizes), x._split)


def adaptive_pool_blocks(
    ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``F.adaptive_avg_pool3d``/``F.adaptive_max_pool3d`` of a volume block to any size.

    The result is split as the input (a size-1 dim on the first rank along its axis).
    """
    x = first_split(func, args, kwargs)
    if len(x._gshape) != 5 or any(d != a + 2 for d, a in x._split):
        raise refuse(func, x._split, "adaptive pooling takes an (N, C, D, H, W) volume")
    glob = global_result(func, args, kwargs)
    if isinstance(glob, tuple):
        raise refuse(
            func,
            x._split,
            "return_indices=True gives indices into the global volume, which no rank holds",
        )
    gout = tuple(glob.shape)
    pool = adaptive_max_pool if "max" in aten_name(func) else adaptive_avg_pool
    out = pool(ctx.mesh, unwrap(x), x._gshape[2:], gout[2:])
    return wrap_split(out, ctx, gout, x._split)
