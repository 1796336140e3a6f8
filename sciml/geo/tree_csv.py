"""Tree inventories as CSV files: points or boxes, their CRS, and the rows of one image.

:func:`sciml.geo.trees.load_trees` reads CSV files through these: the geometry columns a
file has (``x,y``, ``lon,lat``, ``easting,northing`` points or DeepForest's
``xmin,ymin,xmax,ymax`` boxes), the CRS they are in (given, WGS 84 for ``lon,lat``, or an
image's pixels) and, for a file of several images, the rows drawn on the image given.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely
import xarray as xr

from sciml.geo.grid import RasterGrid

__all__ = ["read_tree_csv", "rows_of_image"]


def _points_or_boxes(frame: pd.DataFrame, path: Path) -> np.ndarray:
    """Boxes or points of a CSV; rows with a missing coordinate get no geometry.

    Raises:
        ValueError: A box with ``xmin >= xmax`` or ``ymin >= ymax`` (the row is named).
    """
    columns = {c.lower(): c for c in frame.columns}
    if {"xmin", "ymin", "xmax", "ymax"} <= set(columns):
        xmin, ymin, xmax, ymax = (
            pd.to_numeric(frame[columns[k]], errors="coerce").to_numpy(float)
            for k in ("xmin", "ymin", "xmax", "ymax")
        )
        complete = np.asarray(np.isfinite([xmin, ymin, xmax, ymax]).all(axis=0))
        inverted = complete & ((xmin >= xmax) | (ymin >= ymax))
        if inverted.any():
            rows = (np.flatnonzero(inverted) + 2).tolist()  # the CSV's line numbers
            raise ValueError(
                f"{path}: {int(inverted.sum())} box(es) with xmin >= xmax or ymin >= ymax "
                f"(lines {rows[:5]}); expected xmin < xmax and ymin < ymax"
            )
        return _kept(shapely.box(xmin, ymin, xmax, ymax), complete)
    for x, y in (("x", "y"), ("lon", "lat"), ("longitude", "latitude"), ("easting", "northing")):
        if {x, y} <= set(columns):
            xs = pd.to_numeric(frame[columns[x]], errors="coerce").to_numpy(float)
            ys = pd.to_numeric(frame[columns[y]], errors="coerce").to_numpy(float)
            complete = np.isfinite(xs) & np.isfinite(ys)
            return _kept(shapely.points(xs, ys), complete)
    raise ValueError(
        f"{path}: no usable geometry columns; expected x,y or lon,lat (points) or "
        f"xmin,ymin,xmax,ymax (boxes), got {list(frame.columns)}"
    )


def _kept(geoms: np.ndarray, complete: np.ndarray) -> np.ndarray:
    """``geoms`` with ``None`` where a coordinate was missing."""
    out = np.asarray(geoms, dtype=object).copy()
    out[~complete] = None
    return out


def read_tree_csv(path: Path, crs: Any, like: Any) -> gpd.GeoDataFrame:
    """The trees of a CSV file as points or boxes in ``crs`` (``"pixel"``: pixels of ``like``).

    Raises:
        ValueError: No geometry columns, an inverted box, a missing CRS, or lon/lat
            columns out of range (each naming the file and what was expected).
    """
    frame = pd.read_csv(path)
    geoms = _points_or_boxes(frame, path)
    lower = {c.lower() for c in frame.columns}
    if crs == "pixel":
        if like is None:
            raise ValueError(
                f"{path}: crs='pixel' needs like= (the image the pixels refer to; on the "
                "command line, the raster argument)"
            )
        grid = RasterGrid.from_like(like)
        t = grid.transform
        linear, offset = np.array([[t.a, t.d], [t.b, t.e]]), np.array([t.c, t.f])
        geoms = shapely.transform(geoms, lambda xy: xy @ linear + offset)
        crs = grid.crs
    elif crs is None:
        if not ({"lon", "lat"} <= lower or {"longitude", "latitude"} <= lower):
            raise ValueError(
                f"{path}: a CSV without lon/lat columns needs its CRS: crs='EPSG:...' "
                "(--crs EPSG:... on the command line), or crs='pixel' for pixel coordinates "
                "of like= (--crs pixel)"
            )
        crs = "EPSG:4326"  # columns named lon/lat: WGS 84 degrees, checked below
        xs, ys = shapely.get_x(geoms), shapely.get_y(geoms)  # NaN for missing points
        if (np.abs(xs) > 180).any() or (np.abs(ys) > 90).any():
            raise ValueError(
                f"{path}: lon/lat columns hold values outside [-180, 180] x [-90, 90]; "
                "if they are projected coordinates pass crs='EPSG:...' (--crs EPSG:...)"
            )
    return gpd.GeoDataFrame(frame, geometry=geoms, crs=crs)


def _image_name(like: Any) -> str | None:
    """The file name of the image ``like`` (a path, a rasterio dataset, an opened raster)."""
    if isinstance(like, str | Path):
        return Path(like).name
    if isinstance(like, xr.DataArray | xr.Dataset):
        source = like.encoding.get("source")
        return Path(source).name if source else None
    if hasattr(like, "transform") and hasattr(like, "height") and hasattr(like, "name"):
        return Path(str(like.name)).name  # a rasterio dataset
    return None


def rows_of_image(frame: gpd.GeoDataFrame, path: Path, like: Any) -> gpd.GeoDataFrame:
    """The rows of ``frame`` whose ``image_path`` names the image ``like`` (all without one).

    DeepForest-style annotations name the image each box was drawn on in an ``image_path``
    column, by file name (a path is compared by its file name). Rows for another image
    are never burned into this one: a file of several images keeps this image's rows and
    warns; a file without a row for this image is refused.

    Raises:
        ValueError: No row names this image, naming the file, the column, the images it
            names and the image given.
    """
    column = next((c for c in frame.columns if str(c).lower() == "image_path"), None)
    image = _image_name(like)
    if column is None or image is None:
        return frame
    named = frame[column].astype("string").str.strip().replace("", pd.NA)
    names = named.map(lambda value: Path(value).name, na_action="ignore")
    other = (names.notna() & (names != image)).to_numpy(dtype=bool)
    if not other.any():
        return frame
    counts = names[other].value_counts()
    listed = ", ".join(f"{name!r} ({n} rows)" for name, n in counts.head(5).items())
    listed += f" and {len(counts) - 5} more images" if len(counts) > 5 else ""
    if other.all():
        raise ValueError(
            f"{path}: column {column!r} names {listed}, not the image given ({image!r}: "
            f"{like}); the boxes of another image are not burned into this one: give the "
            "image the annotations were drawn on, or the annotations of this image"
        )
    images = len(counts) + int((names == image).any())
    warnings.warn(
        f"{path}: column {column!r} names {images} image(s); using the "
        f"{int((~other).sum())} of {len(frame)} rows for {image!r} (the image given) or "
        f"for no image, leaving out those of {listed}",
        stacklevel=3,
    )
    return frame[~other].reset_index(drop=True)
