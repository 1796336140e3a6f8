"""Read images, masks and labels; write georeferenced GeoTIFFs and vector layers.

Masks and labels are read against the image they belong to: a file on
another grid (CRS, transform or shape) is rejected, never resampled. Band
descriptions are the ``band`` labels of an image read, and are written from
string ``band`` labels, so that bands can be matched by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import geopandas as gpd
import numpy as np
import xarray as xr

from sciml.geo.grid import RasterGrid, grid_of
from sciml.geo.pixels import band_names
from sciml.geo.trees import IGNORE_INDEX
from sciml.io_utils import atomic_path


def read_image(path: str | Path) -> xr.DataArray:
    """Read a georeferenced image as a ``(band, y, x)`` DataArray with its CRS and transform.

    The ``band`` labels are the file's band descriptions when every band has
    a distinct one, else 1, 2, ...; ``attrs["nodata"]`` is the file's no-data value.

    Raises:
        ValueError: The file has no CRS.
    """
    import rasterio

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"image not found: {path}")
    with rasterio.open(path) as src:
        grid = RasterGrid.from_like(src)
        values = src.read()
        nodata = src.nodata
        names = list(src.descriptions)
    if not all(names) or len(set(names)) != len(names):
        names = list(range(1, values.shape[0] + 1))
    bands = grid.dataarray(values[0], name=path.stem)
    image = xr.DataArray(
        values,
        dims=("band", "y", "x"),
        coords={"band": names, **bands.coords},
        name=path.stem,
        attrs={**bands.attrs, "nodata": nodata} if nodata is not None else bands.attrs,
    )
    return image


def _same_grid(grid: RasterGrid, like: Any, what: str) -> None:
    expected = RasterGrid.from_like(like)
    if grid != expected:
        raise ValueError(
            f"{what} is on another grid than the image: {grid} vs {expected}; "
            "rasterise it on the image's grid (like=the image)"
        )


def _read_band(path: str | Path, like: Any, what: str) -> tuple[xr.DataArray, Path]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    image = read_image(path)
    if image.sizes["band"] != 1:
        raise ValueError(f"{path}: a {what} has one band, got {image.sizes['band']}")
    if like is not None:
        _same_grid(RasterGrid.from_like(image), like, str(path))
    return image.isel(band=0, drop=True), path


def read_mask(path: str | Path, *, like: Any = None) -> xr.DataArray:
    """Read a 0/1 mask GeoTIFF (e.g. from ``sciml geo mask``) as a bool ``(y, x)`` DataArray.

    Args:
        path: One-band GeoTIFF of 0 and 1.
        like: The image the mask belongs to; the mask must be on its exact grid.

    Raises:
        ValueError: Several bands, values other than 0 and 1, or another grid.
    """
    band, path = _read_band(path, like, "mask")
    values = band.values
    bad = np.unique(values[(values != 0) & (values != 1)])
    if bad.size:
        raise ValueError(f"{path}: a mask holds 0 and 1 only, found {bad[:5].tolist()}")
    return band.astype(bool).rename("road_mask")


def read_labels(
    path: str | Path, *, like: Any = None, ignore_index: int = IGNORE_INDEX
) -> xr.DataArray:
    """Read a label GeoTIFF (0 background, 1 tree, ``ignore_index`` unknown) as uint8 ``(y, x)``.

    Raises:
        ValueError: Several bands, other values, or another grid than ``like``.
    """
    band, path = _read_band(path, like, "label raster")
    values = band.values
    bad = np.unique(values[~np.isin(values, (0, 1, ignore_index))])
    if bad.size:
        raise ValueError(
            f"{path}: labels must be 0 (background), 1 (tree) or {ignore_index} (unknown), "
            f"found {bad[:5].tolist()}"
        )
    return band.astype(np.uint8).rename("tree_labels")


def write_vector(frame: gpd.GeoDataFrame, path: str | Path, *, layer: str) -> Path:
    """Write ``frame`` as one layer of a GeoPackage, atomically.

    Raises:
        ValueError: The frame has no CRS.
    """
    if frame.crs is None:
        raise ValueError(f"layer {layer!r} has no CRS; refusing to write it to {path}")
    with atomic_path(path, suffix=".gpkg") as tmp:
        tmp.unlink()  # GDAL creates the file itself
        frame.to_file(tmp, driver="GPKG", layer=layer)
    return Path(path)


def write_geotiff(
    data: xr.DataArray | np.ndarray,
    path: str | Path,
    *,
    like: Any = None,
    nodata: float | None = None,
    compress: str = "deflate",
) -> Path:
    """Write a ``(y, x)`` or ``(band, y, x)`` array as a tiled, compressed GeoTIFF, atomically.

    String ``band`` labels of a DataArray become the bands' descriptions.

    Args:
        data: The values; a DataArray carries its own grid (``crs``/``transform``).
        path: Output ``.tif``.
        like: Reference raster giving the grid when ``data`` has none (a
            DataArray with a grid of its own must be on the same grid).
        nodata: Nodata value to record.
        compress: GeoTIFF compression.
    """
    import rasterio

    own = grid_of(data)
    if like is None and own is None:
        raise ValueError(
            f"the data for {path} has no grid (no CRS); pass like= the raster it belongs to"
        )
    grid = RasterGrid.from_like(like if like is not None else data)
    if like is not None and own is not None:
        _same_grid(own, like, f"the data for {path}")
    values = np.asarray(data)
    if values.dtype == bool:
        values = values.astype(np.uint8)
    if values.ndim == 2:
        values = values[None]
    if values.ndim != 3 or values.shape[1:] != grid.shape:
        raise ValueError(
            f"expected (band, y, x) values of grid shape {grid.shape}, got {values.shape}"
        )
    profile = {
        "driver": "GTiff",
        "height": grid.height,
        "width": grid.width,
        "count": values.shape[0],
        "dtype": values.dtype,
        "crs": grid.crs.to_wkt(),
        "transform": grid.transform,
        "compress": compress,
        "nodata": nodata,
    }
    if grid.height >= 256 and grid.width >= 256:
        profile.update(tiled=True, blockxsize=256, blockysize=256)
    names = band_names(data)
    with atomic_path(path, suffix=".tif") as tmp, rasterio.open(tmp, "w", **profile) as dst:
        dst.write(values)
        for index, name in enumerate(names or (), start=1):
            dst.set_band_description(index, name)
    return Path(path)
