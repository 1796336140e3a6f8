"""Read images and write georeferenced GeoTIFFs that keep CRS and transform."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from sciml.geo.grid import RasterGrid
from sciml.io_utils import atomic_path


def read_image(path: str | Path) -> xr.DataArray:
    """Read a georeferenced image as a ``(band, y, x)`` DataArray with its CRS and transform.

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
    bands = grid.dataarray(values[0], name=path.stem)
    image = xr.DataArray(
        values,
        dims=("band", "y", "x"),
        coords={"band": np.arange(1, values.shape[0] + 1), **bands.coords},
        name=path.stem,
        attrs={**bands.attrs, "nodata": nodata} if nodata is not None else bands.attrs,
    )
    return image


def write_geotiff(
    data: xr.DataArray | np.ndarray,
    path: str | Path,
    *,
    like: Any = None,
    nodata: float | None = None,
    compress: str = "deflate",
) -> Path:
    """Write a ``(y, x)`` or ``(band, y, x)`` array as a tiled, compressed GeoTIFF, atomically.

    Args:
        data: The values; a DataArray carries its own grid (``crs``/``transform``).
        path: Output ``.tif``.
        like: Reference raster giving the grid when ``data`` has none.
        nodata: Nodata value to record.
        compress: GeoTIFF compression.
    """
    import rasterio

    grid = RasterGrid.from_like(like if like is not None else data)
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
    with atomic_path(path, suffix=".tif") as tmp, rasterio.open(tmp, "w", **profile) as dst:
        dst.write(values)
    return Path(path)
