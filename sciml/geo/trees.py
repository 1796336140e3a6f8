"""Tree inventories (points, boxes, polygons) -> crown labels on an image grid.

Points become crown disks of their crown diameter (from a column or tag, else
a per-genus default scaled by age), buffered in metres in the local UTM zone.
Labels are ``1`` (crown), ``0`` (background) and ``ignore_index`` outside the
mask where the inventory is complete.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely
import xarray as xr

from sciml.geo.grid import RasterGrid, grid_of
from sciml.geo.mask import rasterize_geometries
from sciml.geo.osm import parse_metres, read_osm_layer
from sciml.geo.tree_csv import read_tree_csv, rows_of_image
from sciml.geo.widths import utm_crs

#: Typical crown diameter in metres of a mature urban tree, by genus (lower case).
CROWN_DIAMETERS: Mapping[str, float] = {
    "acer": 8.0,
    "aesculus": 9.0,
    "alnus": 7.0,
    "betula": 7.0,
    "carpinus": 7.0,
    "fagus": 10.0,
    "fraxinus": 9.0,
    "malus": 5.0,
    "picea": 6.0,
    "pinus": 7.0,
    "platanus": 12.0,
    "populus": 9.0,
    "prunus": 5.0,
    "quercus": 10.0,
    "salix": 8.0,
    "sorbus": 5.0,
    "tilia": 8.0,
    "ulmus": 9.0,
}
#: Crown diameter (m) of a tree whose genus is unknown.
DEFAULT_CROWN_DIAMETER = 6.0
#: Factors applied to the genus default for an ``age`` class.
AGE_FACTORS: Mapping[str, float] = {"young": 0.5, "mature": 1.0, "old": 1.3}
#: Label value of pixels outside the mask (not used by losses or metrics).
IGNORE_INDEX = 255

_DIAMETER_COLUMNS = ("crown_diameter", "diameter_crown", "crown_diam", "crown_m")
_SPECIES_COLUMNS = ("species", "genus", "species:en", "taxon")
_AREA_TYPES = ("Polygon", "MultiPolygon")


def _read_osm_trees(path: Path) -> gpd.GeoDataFrame:
    points = read_osm_layer(path, "points")
    points = points[points["tags"].map(lambda t: t.get("natural") == "tree")]
    frame = gpd.GeoDataFrame(
        {
            "osm_id": pd.to_numeric(points["osm_id"]).astype("int64"),
            "species": points["tags"].map(lambda t: t.get("species") or t.get("genus")),
            "diameter_crown": points["tags"].map(lambda t: t.get("diameter_crown")),
        },
        geometry=points.geometry.to_numpy(),
        crs=points.crs,
    )
    return frame.reset_index(drop=True)


def crown_diameters(
    trees: pd.DataFrame,
    *,
    diameter_column: str | None = None,
    table: Mapping[str, float] | None = None,
    default: float = DEFAULT_CROWN_DIAMETER,
) -> pd.Series:
    """Crown diameter of every tree in metres.

    The diameter column wins (``diameter_column`` or the first of
    ``crown_diameter``, ``diameter_crown``, ``crown_diam``, ``crown_m``);
    else the genus default from :data:`CROWN_DIAMETERS` (updated by ``table``)
    times the ``age`` factor of :data:`AGE_FACTORS`; else ``default``.
    """
    merged = {**CROWN_DIAMETERS, **{k.lower(): v for k, v in (table or {}).items()}}
    bad = {
        k: v
        for k, v in {**(table or {}), "default": default}.items()
        if not (np.isfinite(v) and v > 0)
    }
    if bad:
        raise ValueError(f"crown diameters must be finite metres > 0, got {bad}")
    column = diameter_column or next((c for c in _DIAMETER_COLUMNS if c in trees), None)
    if diameter_column and diameter_column not in trees:
        raise ValueError(f"no column {diameter_column!r}; columns: {list(trees.columns)}")
    measured = parse_metres(trees[column]) if column else pd.Series(np.nan, index=trees.index)
    unusable = (trees[column].notna() & ~(measured > 0)) if column else measured.notna()
    if unusable.any():
        examples = sorted(set(trees[column][unusable].astype(str)))[:5]
        warnings.warn(
            f"{int(unusable.sum())} crown diameter(s) in {column!r} are not positive metres "
            f"(e.g. {examples}); those trees get the genus default",
            stacklevel=2,
        )
    measured = measured.where(measured > 0)
    species_column = next((c for c in _SPECIES_COLUMNS if c in trees), None)
    genus = (
        trees[species_column].astype("string").str.strip().str.split().str[0].str.lower()
        if species_column
        else pd.Series(pd.NA, index=trees.index, dtype="string")
    )
    by_genus = genus.map(merged, na_action="ignore").astype(float).fillna(default)
    if "age" in trees:
        factor = trees["age"].astype("string").str.lower().map(AGE_FACTORS, na_action="ignore")
        by_genus = by_genus * factor.astype(float).fillna(1.0)
    return measured.fillna(by_genus).rename("crown_diameter")


def load_trees(
    path: str | Path,
    *,
    crs: Any = None,
    like: Any = None,
    diameter_column: str | None = None,
    table: Mapping[str, float] | None = None,
    default_diameter: float = DEFAULT_CROWN_DIAMETER,
) -> gpd.GeoDataFrame:
    """Load a tree inventory as points (with crown diameters), boxes or crown polygons.

    Args:
        path: CSV (``x,y``/``lon,lat`` points or ``xmin,ymin,xmax,ymax`` boxes),
            GeoJSON, GeoPackage, or OSM (``.osm``, ``.osm.bz2``, ``.osm.pbf``:
            ``natural=tree`` nodes).
        crs: CRS of a CSV's coordinates; ``"pixel"`` for pixel coordinates of
            ``like`` (column, row, as in DeepForest annotations). Default for a
            CSV with ``lon,lat``: EPSG:4326.
        like: Reference raster for ``crs="pixel"``; when given, a file's ``image_path``
            column (DeepForest annotations: the file name of the image each row was drawn
            on) must name it: rows of other images are left out with a warning, and a
            file without a row for ``like`` is refused.
        diameter_column: Column of measured crown diameters (default: the first
            known name present), see :func:`crown_diameters`.
        table: Overrides of :data:`CROWN_DIAMETERS` (genus -> metres).
        default_diameter: Diameter in metres of a tree with no measure and no known genus.

    Returns:
        A GeoDataFrame with the file's columns, ``geometry`` and ``crown_diameter``
        (metres; used for points only).

    Raises:
        ValueError: No usable point or polygon geometry, no CRS, or an ``image_path``
            column that names only other images than ``like``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"tree file not found: {path}")
    name = path.name.lower()
    if name.endswith(".csv"):
        frame = read_tree_csv(path, crs, like)
    elif name.endswith((".osm", ".osm.bz2", ".pbf")):
        frame = _read_osm_trees(path)
    elif name.endswith((".gpkg", ".geojson", ".json")):
        import pyogrio

        frame = pyogrio.read_dataframe(path)
        if crs is not None and frame.crs is None:
            frame = frame.set_crs(crs)
    else:
        raise ValueError(
            f"{path}: unsupported tree file type; expected .csv, .geojson, .gpkg, .osm"
        )
    if frame.crs is None:
        raise ValueError(f"{path}: the tree layer has no CRS; pass crs=")
    frame = rows_of_image(frame, path, like)
    kinds = frame.geometry.geom_type
    usable = frame.geometry.notna() & ~frame.geometry.is_empty & kinds.isin(("Point", *_AREA_TYPES))
    if not usable.any():
        found = sorted(set(kinds.dropna())) or "none"
        raise ValueError(
            f"{path}: no usable tree geometry (points, boxes or polygons); found {found} "
            f"in {len(frame)} row(s)"
        )
    if not usable.all():
        warnings.warn(
            f"{path}: skipping {int((~usable).sum())} of {len(frame)} rows without a point "
            "or polygon geometry",
            stacklevel=2,
        )
    frame = frame[usable].reset_index(drop=True)
    frame["crown_diameter"] = crown_diameters(
        frame, diameter_column=diameter_column, table=table, default=default_diameter
    ).to_numpy()
    return frame


def crown_polygons(trees: gpd.GeoDataFrame, crs: Any) -> np.ndarray:
    """Crowns in ``crs``: points buffered by half their crown diameter in UTM, areas as is."""
    metric = utm_crs(trees)
    geoms = trees.geometry.to_crs(metric)
    is_point = (geoms.geom_type == "Point").to_numpy()
    radius = np.where(is_point, trees["crown_diameter"].to_numpy(dtype=float) / 2.0, 0.0)
    crowns = np.where(is_point, shapely.buffer(geoms.to_numpy(), radius), geoms)
    return gpd.GeoSeries(crowns, crs=metric).to_crs(crs).to_numpy()


def _crowns_on_grid(trees: gpd.GeoDataFrame, grid: RasterGrid) -> tuple[np.ndarray, np.ndarray]:
    crowns = crown_polygons(trees, grid.crs)
    keep = shapely.intersects(crowns, shapely.box(*grid.bounds))
    if not keep.any():
        tree_bounds = tuple(round(v, 6) for v in trees.to_crs(grid.crs).total_bounds)
        raise ValueError(
            f"no tree overlaps the raster: trees cover {tree_bounds}, the raster covers "
            f"{tuple(round(v, 6) for v in grid.bounds)} (both in {grid.crs.name})"
        )
    return crowns[keep], np.flatnonzero(keep)


def tree_labels(
    trees: gpd.GeoDataFrame,
    like: Any,
    *,
    mask: xr.DataArray | np.ndarray | None = None,
    ignore_index: int = IGNORE_INDEX,
    all_touched: bool = False,
) -> xr.DataArray:
    """Crown labels on the grid of ``like``: 1 crown, 0 background, ``ignore_index`` off the mask.

    Args:
        trees: Inventory from :func:`load_trees`.
        like: Reference raster (see :func:`sciml.geo.road_mask`).
        mask: Where the inventory is complete (bool, same grid); ``None``: everywhere.
        ignore_index: Label outside the mask.
        all_touched: Burn every pixel a crown touches.

    Returns:
        ``(y, x)`` uint8 DataArray ``"tree_labels"`` with the grid's CRS and transform.
    """
    if int(ignore_index) != ignore_index or not 2 <= ignore_index <= 255:
        raise ValueError(
            f"ignore_index must be an integer in 2..255 (0 and 1 are labels), got {ignore_index}"
        )
    grid = RasterGrid.from_like(like)
    if mask is not None:
        mask = _mask_on(grid, mask)
    crowns, _ = _crowns_on_grid(trees, grid)
    labels = rasterize_geometries(crowns, grid, all_touched=all_touched).astype(np.uint8)
    if mask is not None:
        labels[~mask] = ignore_index
    return grid.dataarray(labels, name="tree_labels", attrs={"ignore_index": ignore_index})


def _mask_on(grid: RasterGrid, mask: xr.DataArray | np.ndarray) -> np.ndarray:
    """``mask`` as bool, checked to be 0/1 on ``grid`` (its own grid, when it has one)."""
    own = grid_of(mask)
    if own is not None and own != grid:
        raise ValueError(
            f"the mask is on another grid ({own}) than the raster ({grid}); "
            "rasterise it on the raster's grid"
        )
    values = np.asarray(mask)
    if values.shape != grid.shape:
        raise ValueError(f"mask shape {values.shape} differs from the raster's {grid.shape}")
    if values.dtype != bool:
        bad = np.unique(values[(values != 0) & (values != 1)])
        if bad.size:
            raise ValueError(f"a mask holds 0/1 or bool values only, found {bad[:5].tolist()}")
    return values.astype(bool)


def tree_instances(trees: gpd.GeoDataFrame, like: Any) -> xr.DataArray:
    """Crown instance map: pixel value ``i + 1`` for the tree in row ``i``, 0 elsewhere.

    Where crowns overlap, the later row wins. Used for per-tree recall.
    """
    grid = RasterGrid.from_like(like)
    crowns, rows = _crowns_on_grid(trees, grid)
    ids = rasterize_geometries(crowns, grid, values=(rows + 1).astype(np.uint32))
    return grid.dataarray(ids, name="tree_instances")
