"""Hybrid-parallel training of CosmoFlow and a 3D U-Net from sharded volume files.

:mod:`sciml.volumes.data` generates the data sets (``sciml cosmoflow data``,
``sciml unet3d data``); the volumes are read block by block by
:class:`sciml.volumes.dataset.ShardedVolumes`.
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.volumes.data import write_cosmology, write_segmentation

#: The module of each public name (imported on first use, so that ``sciml cosmoflow
#: --help`` does not import xarray).
_HOMES = dict.fromkeys(("write_cosmology", "write_segmentation"), "data")

__all__ = ["write_cosmology", "write_segmentation"]

make_lazy(__name__, _HOMES)
