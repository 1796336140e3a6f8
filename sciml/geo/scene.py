"""An aerial-like scene rendered from real OSM geometry, with complete tree truth.

No aerial imagery of the bundled OSM extracts ships with any package, so this
module paints one: buildings (with shadows), water, grass and parks, roads and
sidewalks from the real OSM polygons and lines, and tree crowns for the real
``natural=tree`` nodes plus synthetic park and garden trees. The street-tree
inventory is the set of trees inside the road mask (the buffered roads), as a
city inventory lists every tree along its streets and none in parks; the
complete truth (every crown) is kept aside for evaluation.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely
import xarray as xr
from scipy import ndimage

from sciml.geo.grid import RasterGrid
from sciml.geo.mask import rasterize_geometries, road_mask
from sciml.geo.osm import load_roads, read_osm_layer
from sciml.geo.trees import load_trees, tree_instances, tree_labels
from sciml.geo.widths import utm_crs

_GREEN_LANDUSE = ("grass", "meadow", "village_green", "recreation_ground", "cemetery", "forest")
_GREEN_LEISURE = ("park", "garden", "playground")
_GREEN_NATURAL = ("scrub", "wood", "grassland", "heath")
_ROOFS = np.array(
    [[0.55, 0.55, 0.57], [0.62, 0.35, 0.28], [0.45, 0.42, 0.40], [0.72, 0.70, 0.66]],
    np.float32,
)


@dataclass
class Scene:
    """A synthetic aerial scene and everything known about it.

    Attributes:
        image: ``(band, y, x)`` uint8 RGB image with CRS and transform.
        roads: Road lines used for the mask.
        trees: Every tree (points, ``crown_diameter``, ``source`` = ``"osm"``,
            ``"park"`` or ``"garden"``, ``in_inventory``).
        mask: Road mask (buffered roads plus margin): where the inventory is complete.
        truth: Complete crown labels (0/1) of every tree.
        instances: Crown instance ids (row of ``trees`` + 1).
    """

    image: xr.DataArray
    roads: gpd.GeoDataFrame
    trees: gpd.GeoDataFrame
    mask: xr.DataArray
    truth: xr.DataArray
    instances: xr.DataArray

    @property
    def grid(self) -> RasterGrid:
        """The image's grid."""
        return RasterGrid.from_like(self.mask)

    @property
    def inventory(self) -> gpd.GeoDataFrame:
        """The street-tree inventory: trees inside the mask."""
        return self.trees[self.trees["in_inventory"]]

    def labels(self, *, masked: bool = True) -> xr.DataArray:
        """Inventory labels: ignore off the mask (``masked``) or background there."""
        mask = self.mask.values if masked else None
        return tree_labels(self.inventory, self.grid, mask=mask)


def _areas(path: Path, crs: object) -> dict[str, np.ndarray]:
    with warnings.catch_warnings():  # a clipped extract cuts some rings: they are not painted
        warnings.simplefilter("ignore")
        polygons = read_osm_layer(path, "multipolygons")
    polygons = polygons[polygons.geometry.notna()].to_crs(crs)
    tags = polygons["tags"]
    water = (polygons["natural"] == "water") | tags.map(lambda t: "water" in t)
    green = (
        polygons["landuse"].isin(_GREEN_LANDUSE)
        | polygons["leisure"].isin(_GREEN_LEISURE)
        | polygons["natural"].isin(_GREEN_NATURAL)
    )
    geoms = shapely.make_valid(polygons.geometry.to_numpy())
    return {
        "building": geoms[polygons["building"].notna().to_numpy()],
        "water": geoms[water.to_numpy()],
        "green": geoms[(green & ~water).to_numpy()],
    }


def _spread_points(
    allowed: np.ndarray, grid: RasterGrid, density: float, spacing: float, rng: np.random.Generator
) -> np.ndarray:
    """Random points on ``allowed`` pixels: ``density`` per m^2, ``spacing`` m apart or more."""
    from scipy.spatial import cKDTree

    left, bottom, right, top = grid.bounds
    xy = rng.uniform((left, bottom), (right, top), size=(rng.poisson(density * grid.area), 2))
    col, row = ~grid.transform @ (xy[:, 0], xy[:, 1])
    xy = xy[
        allowed[row.astype(int).clip(0, grid.height - 1), col.astype(int).clip(0, grid.width - 1)]
    ]
    free = np.ones(len(xy), bool)
    neighbours = cKDTree(xy).query_ball_point(xy, spacing) if len(xy) else []
    for index, near in enumerate(neighbours):  # greedy thinning in random order
        if free[index]:
            free[near] = False
            free[index] = True
    return xy[free]


def _burn(geoms: np.ndarray, grid: RasterGrid, values: np.ndarray | None = None) -> np.ndarray:
    if len(geoms) == 0:
        return np.zeros(grid.shape, bool if values is None else values.dtype)
    return rasterize_geometries(geoms, grid, values=values)


def _noise(shape: tuple[int, int], scale: float, rng: np.random.Generator) -> np.ndarray:
    field = ndimage.gaussian_filter(rng.standard_normal(shape).astype(np.float32), scale)
    return field / (field.std() + 1e-6)


def synthesize_scene(
    path: str | Path | None = None,
    *,
    resolution: float = 0.5,
    bounds: tuple[float, float, float, float] | None = None,
    margin: float = 4.0,
    park_density: float = 1 / 90,
    garden_density: float = 1 / 1500,
    seed: int = 0,
) -> Scene:
    """Render an aerial-like RGB scene from an OSM extract with complete tree truth.

    Args:
        path: OSM extract (default: the bundled Helsinki extract, ``sample_path("helsinki_osm")``).
        resolution: Pixel size in metres (local UTM grid).
        bounds: ``(left, bottom, right, top)`` in the local UTM zone (default:
            the roads' extent).
        margin: Metres beyond the carriageway that the inventory covers.
        park_density: Synthetic trees per m^2 in parks, grass and scrub.
        garden_density: Synthetic trees per m^2 elsewhere off roads and buildings.
        seed: Random seed (trees, colours, texture).

    Returns:
        A :class:`Scene`.
    """
    if path is None:
        from sciml.datasets import sample_path

        path = sample_path("helsinki_osm")
    path = Path(path)
    rng = np.random.default_rng(seed)
    roads = load_roads(path)
    crs = utm_crs(roads)
    if bounds is None:
        bounds = tuple(roads.to_crs(crs).total_bounds)
    grid = RasterGrid.from_bounds(bounds, resolution, crs)
    frame = shapely.box(*grid.bounds)
    areas = {key: g[shapely.intersects(g, frame)] for key, g in _areas(path, crs).items()}
    layers = {key: _burn(geoms, grid) for key, geoms in areas.items()}
    layers["carriageway"] = road_mask(roads, grid, width="osm").values
    layers["sidewalk"] = road_mask(roads, grid, width="osm", margin=2.0).values
    mask = road_mask(roads, grid, width="osm", margin=margin)

    # trees: real OSM nodes + synthetic park and garden trees off roads/buildings/water
    osm_trees = load_trees(path).to_crs(crs)
    osm_trees = osm_trees[shapely.intersects(osm_trees.geometry.to_numpy(), frame)]
    free = ~(layers["building"] | layers["water"] | layers["sidewalk"])
    parks = _spread_points(free & layers["green"], grid, park_density, 5.0, rng)
    gardens = _spread_points(free & ~layers["green"], grid, garden_density, 8.0, rng)
    xy = np.vstack([np.c_[osm_trees.geometry.x, osm_trees.geometry.y], parks, gardens])
    source = ["osm"] * len(osm_trees) + ["park"] * len(parks) + ["garden"] * len(gardens)
    trees = gpd.GeoDataFrame(
        {"source": source, "crown_diameter": rng.uniform(4.0, 9.0, len(xy))},
        geometry=shapely.points(xy),
        crs=crs,
    )
    col, row = ~grid.transform @ (xy[:, 0], xy[:, 1])
    inside = (row >= 0) & (row < grid.height) & (col >= 0) & (col < grid.width)
    in_mask = np.zeros(len(xy), bool)
    in_mask[inside] = mask.values[row[inside].astype(int), col[inside].astype(int)]
    trees["in_inventory"] = in_mask
    instances = tree_instances(trees, grid)
    truth = tree_labels(trees, grid)

    image = _paint(grid, areas, layers, trees, instances.values, rng)
    bands = grid.dataarray(image[0], name="image")
    image_da = xr.DataArray(
        image,
        dims=("band", "y", "x"),
        coords={"band": ["red", "green", "blue"], **bands.coords},
        name="image",
        attrs=bands.attrs,
    )
    return Scene(image_da, roads, trees, mask, truth, instances)


def _paint(
    grid: RasterGrid,
    areas: dict[str, np.ndarray],
    layers: dict[str, np.ndarray],
    trees: gpd.GeoDataFrame,
    instances: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    shape = grid.shape
    px = 1.0 / abs(grid.transform.a)  # pixels per metre
    ground = np.array([0.56, 0.54, 0.50], np.float32)[:, None, None] * np.ones((3, *shape))
    ground *= 1 + 0.05 * _noise(shape, 8 * px, rng)

    green = layers["green"]
    grass = np.array([0.42, 0.56, 0.28], np.float32)[:, None, None]
    grass_texture = 1 + 0.08 * _noise(shape, 2 * px, rng) + 0.06 * _noise(shape, 10 * px, rng)
    ground = np.where(green, grass * grass_texture, ground)
    ground = np.where(layers["water"], np.array([0.14, 0.24, 0.33])[:, None, None], ground)
    ground = np.where(layers["sidewalk"], np.array([0.63, 0.62, 0.60])[:, None, None], ground)
    asphalt = 0.30 * (1 + 0.04 * _noise(shape, 1 * px, rng))
    ground = np.where(
        layers["carriageway"], asphalt * np.array([1.0, 1.0, 1.05])[:, None, None], ground
    )

    buildings = areas["building"]
    roof_id = _burn(buildings, grid, np.arange(1, len(buildings) + 1, dtype=np.uint32))
    roof_colours = _ROOFS[rng.integers(0, len(_ROOFS), len(buildings) + 1)]
    roof_colours *= rng.uniform(0.85, 1.1, (len(roof_colours), 1)).astype(np.float32)
    roof = roof_id > 0
    shadow = ndimage.shift(roof, (3 * px, 3 * px), order=0) & ~roof
    ground = np.where(shadow, ground * 0.45, ground)
    ground = np.where(roof, roof_colours[roof_id].transpose(2, 0, 1), ground)

    # tree crowns: shaded textured disks, with a shadow cast to the south-east
    crown = instances > 0
    tree_shadow = ndimage.shift(crown, (1.5 * px, 1.5 * px), order=0) & ~crown
    ground = np.where(tree_shadow, ground * 0.55, ground)
    xy = np.c_[trees.geometry.x, trees.geometry.y]
    centre_col, centre_row = ~grid.transform @ (xy[:, 0], xy[:, 1])
    rows, cols = np.nonzero(crown)
    ids = instances[rows, cols].astype(np.int64) - 1
    radius = trees["crown_diameter"].to_numpy() / 2 * px
    dist = np.hypot(rows + 0.5 - centre_row[ids] + 0.3 * radius[ids], cols + 0.5 - centre_col[ids])
    shading = np.clip(1.15 - 0.55 * (dist / radius[ids]) ** 2, 0.45, 1.2)
    leaf = 1 + 0.18 * _noise(shape, 0.6 * px, rng)[rows, cols]
    palette = np.c_[
        rng.uniform(0.12, 0.26, len(trees)),
        rng.uniform(0.26, 0.40, len(trees)),
        rng.uniform(0.08, 0.18, len(trees)),
    ].astype(np.float32)
    ground[:, rows, cols] = (palette[ids] * (shading * leaf)[:, None]).T

    image = ndimage.gaussian_filter(ground, (0, 0.6, 0.6))
    image += 0.02 * rng.standard_normal(image.shape)
    return (np.clip(image, 0, 1) * 255).round().astype(np.uint8)


def scene_summary(scene: Scene) -> pd.Series:
    """Counts of trees by source and inventory membership."""
    counts = scene.trees.groupby(["source", "in_inventory"]).size()
    return counts.rename("trees")
