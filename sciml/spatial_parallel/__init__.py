"""Spatially parallel 3D CNNs: each sample's volume split over ranks, with halo exchange.

Example (every rank, after ``torch.distributed`` is initialised)::

    from sciml.spatial_parallel import SpatialMesh, parallelize, shard, unshard

    mesh = SpatialMesh(data=1, depth=2, height=2, width=1)
    pmodel = parallelize(model, mesh)
    y_local = pmodel(shard(x_global, mesh))
    y = unshard(y_local, mesh)
"""

from sciml.spatial_parallel.heads import (
    SpatialAdaptiveAvgPool3d,
    SpatialDropout,
    SpatialDropout3d,
    SpatialFlatten,
)
from sciml.spatial_parallel.layers import (
    SpatialAvgPool3d,
    SpatialConv3d,
    SpatialConvTranspose3d,
    SpatialMaxPool3d,
    SpatialUpsample,
)
from sciml.spatial_parallel.loss import global_loss, mse_loss, spatial_mean
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.norm import SpatialBatchNorm3d, SpatialGroupNorm
from sciml.spatial_parallel.parallelize import gradient_sync, parallelize
from sciml.spatial_parallel.partition import HaloError, block_bounds
from sciml.spatial_parallel.sharding import shard, unshard

__all__ = [
    "HaloError",
    "SpatialAdaptiveAvgPool3d",
    "SpatialAvgPool3d",
    "SpatialBatchNorm3d",
    "SpatialConv3d",
    "SpatialConvTranspose3d",
    "SpatialDropout",
    "SpatialDropout3d",
    "SpatialFlatten",
    "SpatialGroupNorm",
    "SpatialMaxPool3d",
    "SpatialMesh",
    "SpatialUpsample",
    "block_bounds",
    "global_loss",
    "gradient_sync",
    "mse_loss",
    "parallelize",
    "shard",
    "spatial_mean",
    "unshard",
]
