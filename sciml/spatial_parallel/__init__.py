"""Spatially parallel 3D CNNs: each sample's volume split over ranks, with halo exchange.

Example (every rank, after ``torch.distributed`` is initialised)::

    from sciml.spatial_parallel import SpatialMesh, mse_loss, parallelize, shard, unshard

    mesh = SpatialMesh(data=1, depth=2, height=2, width=1)
    pmodel = parallelize(model, mesh)       # same class, same state_dict keys
    y_local = pmodel(shard(x_global, mesh))  # this rank's block of model(x_global)
    mse_loss(y_local, shard(target, mesh), mesh).backward()
    y = unshard(y_local, mesh)                # the whole output, on every rank

Blocks follow :func:`torch.tensor_split` along every split axis; the global loss of a
split output is the sum of the ranks' local losses (:func:`spatial_mean` and
:func:`mse_loss` give the terms of a global mean); after ``backward()`` every ``.grad``
equals the single-device gradient. Every layer option is exact or refused by name, and
the model's own forward code sees :class:`~sciml.spatial_parallel.split.tensor.SplitTensor`
blocks whose ops are computed as on the whole tensor or refused (:class:`SplitOpError`).
The conventions, the supported layers and the refusals: ``docs/spatial_parallel.md``;
:mod:`sciml.spatial_parallel.testing` compares a parallel model with its single-device one.
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.spatial_parallel.context import ParallelContext, parallel_context
    from sciml.spatial_parallel.halo.first_order import SecondDerivativeError
    from sciml.spatial_parallel.io import read_block
    from sciml.spatial_parallel.layers import (
        SpatialAvgPool3d,
        SpatialConv3d,
        SpatialConvTranspose3d,
        SpatialMaxPool3d,
        SpatialUpsample,
    )
    from sciml.spatial_parallel.layers.heads import (
        SpatialAdaptiveAvgPool3d,
        SpatialAdaptiveMaxPool3d,
        SpatialDropout,
        SpatialDropout3d,
        SpatialFlatten,
        SpatialLayerNorm,
        SpatialPReLU,
    )
    from sciml.spatial_parallel.layers.norm import (
        SpatialBatchNorm3d,
        SpatialGroupNorm,
        SpatialInstanceNorm3d,
    )
    from sciml.spatial_parallel.loss import global_loss, mse_loss, spatial_mean
    from sciml.spatial_parallel.mesh import SpatialMesh
    from sciml.spatial_parallel.parallelize import gradient_sync, parallelize
    from sciml.spatial_parallel.partition import HaloError, block_bounds
    from sciml.spatial_parallel.sharding import shard, unshard
    from sciml.spatial_parallel.split.op_names import SplitOpError

#: The module of each public name (imported on first use, so that the command line and
#: small modules of this package can be imported without torch).
_HOMES = {
    **dict.fromkeys(
        (
            "SpatialAdaptiveAvgPool3d",
            "SpatialAdaptiveMaxPool3d",
            "SpatialDropout",
            "SpatialDropout3d",
            "SpatialFlatten",
            "SpatialLayerNorm",
            "SpatialPReLU",
        ),
        "layers.heads",
    ),
    "read_block": "io",
    **dict.fromkeys(("ParallelContext", "parallel_context"), "context"),
    **dict.fromkeys(
        (
            "SpatialAvgPool3d",
            "SpatialConv3d",
            "SpatialConvTranspose3d",
            "SpatialMaxPool3d",
            "SpatialUpsample",
        ),
        "layers",
    ),
    **dict.fromkeys(("global_loss", "mse_loss", "spatial_mean"), "loss"),
    "SpatialMesh": "mesh",
    **dict.fromkeys(
        ("SpatialBatchNorm3d", "SpatialGroupNorm", "SpatialInstanceNorm3d"), "layers.norm"
    ),
    **dict.fromkeys(("gradient_sync", "parallelize"), "parallelize"),
    **dict.fromkeys(("HaloError", "block_bounds"), "partition"),
    **dict.fromkeys(("shard", "unshard"), "sharding"),
    "SplitOpError": "split.op_names",
    "SecondDerivativeError": "halo.first_order",
}

__all__ = [
    "HaloError",
    "ParallelContext",
    "SpatialAdaptiveAvgPool3d",
    "SpatialAdaptiveMaxPool3d",
    "SpatialAvgPool3d",
    "SpatialBatchNorm3d",
    "SpatialConv3d",
    "SpatialConvTranspose3d",
    "SpatialDropout",
    "SpatialDropout3d",
    "SpatialFlatten",
    "SpatialGroupNorm",
    "SpatialInstanceNorm3d",
    "SpatialLayerNorm",
    "SpatialMaxPool3d",
    "SpatialMesh",
    "SpatialPReLU",
    "SpatialUpsample",
    "SecondDerivativeError",
    "SplitOpError",
    "block_bounds",
    "global_loss",
    "gradient_sync",
    "mse_loss",
    "parallel_context",
    "parallelize",
    "read_block",
    "shard",
    "spatial_mean",
    "unshard",
]

make_lazy(__name__, _HOMES)
