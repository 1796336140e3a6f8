"""Spatially parallel versions of the 3D layers: each rank computes its output block.

Every layer is a subclass of the ``torch.nn`` layer it replaces (same
parameters, same ``state_dict`` keys) built with ``from_module``. Sliding-window
layers (convolution, pooling) assemble the input range their output block
needs with a halo exchange; with ``overlap=True`` they compute the interior of
the block while the halos travel and the boundary shell afterwards, in the
forward and in the backward pass.

One module per family: :mod:`.base` (the mixin every layer shares),
:mod:`.window` (halo exchange and overlap of sliding windows), :mod:`.conv`,
:mod:`.pool`, :mod:`.conv_transpose`, :mod:`.upsample`, :mod:`.norm`, :mod:`.heads`.
Which torch layer each replaces, and how the planner prices it, is one table:
:mod:`.table` (a new layer is a module here and an entry there).
"""

from sciml.spatial_parallel.layers.base import SpatialLayer
from sciml.spatial_parallel.layers.conv import SpatialConv3d
from sciml.spatial_parallel.layers.conv_transpose import SpatialConvTranspose3d
from sciml.spatial_parallel.layers.pool import SpatialAvgPool3d, SpatialMaxPool3d
from sciml.spatial_parallel.layers.upsample import SpatialUpsample

__all__ = [
    "SpatialAvgPool3d",
    "SpatialConv3d",
    "SpatialConvTranspose3d",
    "SpatialLayer",
    "SpatialMaxPool3d",
    "SpatialUpsample",
]
