"""OSM road masks for tree segmentation from an incomplete street-tree inventory.

Public API::

    from sciml.geo import load_roads, road_mask
    roads = load_roads("city.osm.pbf")   # or an osmnx graph, or its edges
    mask = road_mask(roads, like="ortho.tif", width="osm")

Modules: ``osm`` (road and OSM layers), ``widths`` (metric widths, UTM
buffering), ``grid`` (a raster's grid), ``mask`` (in-memory and streamed
masks), ``trees`` (inventories -> crown labels), ``rasters`` (GeoTIFF, mask,
label and vector I/O), ``tiles`` (training tiles, stitched inference, no-data
pixels), ``model`` (masked U-Net), ``losses`` (masked losses), ``training``
(run folders, training and loading), ``scores`` (pixel metrics, AUC,
thresholds), ``scene`` and ``experiment`` (synthetic Helsinki scene, masked
vs unmasked; the OSBS study), ``plots``, ``cli``; the demo section is
:mod:`sciml.demos.geo`. Each public name is imported from its module on first
use, so that ``import sciml.geo`` (and the ``sciml`` command line, which
registers ``sciml.geo.cli``) stays free of geopandas, rasterio and torch
until a geo function is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.geo.grid import RasterGrid
    from sciml.geo.mask import (
        rasterize_geometries,
        road_mask,
        road_polygons,
        write_road_mask,
    )
    from sciml.geo.osm import ROAD_CLASSES, load_roads, read_osm_layer
    from sciml.geo.trees import load_trees, tree_instances, tree_labels
    from sciml.geo.widths import WIDTH_TABLE, buffer_roads, road_widths, utm_crs

#: The module of each public name.
_HOMES = {
    "RasterGrid": "grid",
    **dict.fromkeys(
        ("rasterize_geometries", "road_mask", "road_polygons", "write_road_mask"), "mask"
    ),
    **dict.fromkeys(("ROAD_CLASSES", "load_roads", "read_osm_layer"), "osm"),
    **dict.fromkeys(("load_trees", "tree_instances", "tree_labels"), "trees"),
    **dict.fromkeys(("WIDTH_TABLE", "buffer_roads", "road_widths", "utm_crs"), "widths"),
}

__all__ = [
    "ROAD_CLASSES",
    "WIDTH_TABLE",
    "RasterGrid",
    "buffer_roads",
    "load_roads",
    "load_trees",
    "rasterize_geometries",
    "read_osm_layer",
    "road_mask",
    "road_polygons",
    "road_widths",
    "tree_instances",
    "tree_labels",
    "utm_crs",
    "write_road_mask",
]

make_lazy(__name__, _HOMES)
