"""Hybrid-parallel training of CosmoFlow and a 3D U-Net from sharded volume files.

:mod:`sciml.volumes.data` generates the data sets (``sciml cosmoflow data``,
``sciml unet3d data``); the volumes are read block by block by
:class:`sciml.xrvolumes.ShardedVolumes`.
"""

from sciml.volumes.data import write_cosmology, write_segmentation

__all__ = ["write_cosmology", "write_segmentation"]
