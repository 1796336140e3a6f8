"""Spatially parallel 3D CNNs: each sample's volume split over ranks, with halo exchange.

Example (every rank, after ``torch.distributed`` is initialised)::

    from sciml.spatial_parallel import SpatialMesh, mse_loss, parallelize, shard, unshard

    mesh = SpatialMesh(data=1, depth=2, height=2, width=1)
    pmodel = parallelize(model, mesh)       # same class, same state_dict keys
    y_local = pmodel(shard(x_global, mesh))  # this rank's block of model(x_global)
    mse_loss(y_local, shard(target, mesh), mesh).backward()
    y = unshard(y_local, mesh)                # the whole output, on every rank

Conventions:

* Blocks follow :func:`torch.tensor_split` along every split axis (sizes need
  not divide); the batch is split the same way over the ``data`` replicas.
* Split outputs: the global loss is the *sum* of the ranks' local losses
  (:func:`spatial_mean` / :func:`mse_loss` give the terms of a global mean).
  Replicated outputs (after ``AdaptiveAvgPool3d(1)`` or ``Flatten`` and a
  dense head): each rank's local loss *is* the global loss.
* After ``backward()`` every ``.grad`` equals the single-device gradient of
  the global loss, averaged over the data-parallel replicas (bucketed
  all-reduce overlapped with the backward pass), and each rank's input
  gradient is its block of the global input gradient. BatchNorm statistics
  and running statistics are those of the whole global batch.
* Global shapes: :func:`shard` marks its block with the global shape, and
  the parallel model traces the single-device model on the ``meta`` device
  for it, so its layers know their global shapes without communicating
  (``parallelize(..., input_shape=(D, H, W))`` declares it for unmarked
  inputs; otherwise one small all-reduce starts each forward pass; see
  :mod:`sciml.spatial_parallel.shapes`).
* Devices: ``parallelize(..., device=...)`` moves the model before rank 0's
  parameters are broadcast and refuses parameters on a device the process
  group cannot take. ``torch.autocast`` works as on one device (bfloat16
  results, normalisation statistics in float32).
* Dropout draws the single-device mask of the global tensor from the shared
  random state (seed every rank alike) and keeps its block.

Every constructor option of a swapped layer is either exact (checked
against the single-device layer by :mod:`sciml.spatial_parallel.testing`) or
refused. Not supported (``parallelize`` raises, naming the layer and
option): 2D layers, adaptive pooling to sizes other than 1 and adaptive max
pooling, ``Upsample`` modes other than nearest/nearest-exact/trilinear, max
pooling with ``return_indices``, ``ConvTranspose3d`` with a padding mode
other than zeros or a forward ``output_size``, ``Flatten(start_dim=0)``
(the batch is split over replicas), options that ``torch.nn`` itself rejects
at the first forward pass (pool padding over half the kernel, a transposed
convolution's ``output_padding`` not below its stride or dilation,
``align_corners`` with a nearest mode), dense layers applied to a split
volume, and a halo wider than a neighbour's block (:class:`HaloError`: use
fewer ranks along that axis or a larger input).

The model's own forward code sees its split inputs as
:class:`~sciml.spatial_parallel.split.tensor.SplitTensor` blocks: their
shapes are the global ones, reductions, pads, concatenations, slices and
reshapes along split axes are computed as on the whole tensor, and any other
op that touches a split axis (a functional convolution, ``cumsum`` along
depth, ...) raises :class:`SplitOpError` naming the op, the axis and the
line (:mod:`sciml.spatial_parallel.split.dispatch` lists the tables).

:mod:`sciml.spatial_parallel.testing` compares a parallel model with its
single-device model (``sciml spatial check``, the tests and notebook 01 use it).
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
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
    from sciml.spatial_parallel.split.tensor import SplitOpError

#: The module of each public name (imported on first use, so that the command line and
#: small modules of this package can be imported without torch).
_HOMES = {
    **dict.fromkeys(
        (
            "SpatialAdaptiveAvgPool3d",
            "SpatialDropout",
            "SpatialDropout3d",
            "SpatialFlatten",
            "SpatialLayerNorm",
            "SpatialPReLU",
        ),
        "layers.heads",
    ),
    "read_block": "io",
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
    "SplitOpError": "split.tensor",
    "SecondDerivativeError": "halo.first_order",
}

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
    "parallelize",
    "read_block",
    "shard",
    "spatial_mean",
    "unshard",
]

make_lazy(__name__, _HOMES)
