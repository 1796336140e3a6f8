"""The pixel grid of a reference raster: CRS, affine transform and shape."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyproj
import xarray as xr
from affine import Affine


@dataclass(frozen=True)
class RasterGrid:
    """A north-up or rotated pixel grid: ``crs``, ``transform`` (pixel -> CRS) and shape.

    Attributes:
        crs: The grid's coordinate reference system.
        transform: Affine transform from (col, row) of pixel corners to CRS coordinates.
        height: Rows.
        width: Columns.
    """

    crs: pyproj.CRS
    transform: Affine
    height: int
    width: int

    def __post_init__(self) -> None:
        """Reject a fractional or empty size and a degenerate transform."""
        if int(self.height) != self.height or int(self.width) != self.width:
            raise ValueError(f"grid height and width must be integers, got {self.shape}")
        if self.height < 1 or self.width < 1:
            raise ValueError(f"a grid needs at least one pixel, got {self.height} x {self.width}")
        if not np.isfinite(tuple(self.transform)).all() or self.transform.determinant == 0:
            raise ValueError(f"degenerate grid transform {tuple(self.transform)[:6]}")

    def __str__(self) -> str:
        """Size, CRS name and affine coefficients, for messages."""
        transform = tuple(self.transform)[:6]
        return f"{self.height}x{self.width} px in {self.crs.name}, transform {transform}"

    @property
    def shape(self) -> tuple[int, int]:
        """``(height, width)``."""
        return self.height, self.width

    @property
    def area(self) -> float:
        """Area covered, in squared CRS units."""
        return abs(self.transform.determinant) * self.height * self.width

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """``(left, bottom, right, top)`` in the grid's CRS."""
        xs, ys = zip(
            *(self.transform @ corner for corner in _corners(self.height, self.width)),
            strict=True,
        )
        return min(xs), min(ys), max(xs), max(ys)

    def window_transform(self, row: int, col: int) -> Affine:
        """Transform of the sub-grid whose top-left pixel is ``(row, col)``."""
        return self.transform @ Affine.translation(col, row)

    def coords(self) -> dict[str, np.ndarray]:
        """Pixel-centre coordinates ``{"y": ..., "x": ...}`` (north-up grids only)."""
        t = self.transform
        if t.b != 0 or t.d != 0:
            raise ValueError("pixel-centre coordinates need a north-up grid (no rotation)")
        return {
            "y": t.f + t.e * (np.arange(self.height) + 0.5),
            "x": t.c + t.a * (np.arange(self.width) + 0.5),
        }

    def dataarray(self, values: Any, *, name: str, attrs: dict | None = None) -> xr.DataArray:
        """Wrap ``(y, x)`` values (numpy or dask) as a georeferenced DataArray.

        The CRS and transform are kept in ``attrs`` and in a CF ``spatial_ref``
        coordinate (as written by rioxarray and GDAL).
        """
        spatial_ref = xr.DataArray(
            0,
            attrs={
                "crs_wkt": self.crs.to_wkt(),
                "spatial_ref": self.crs.to_wkt(),
                "GeoTransform": " ".join(str(v) for v in self.transform.to_gdal()),
            },
        )
        return xr.DataArray(
            values,
            dims=("y", "x"),
            coords={**self.coords(), "spatial_ref": spatial_ref},
            name=name,
            attrs={
                "crs": self.crs.to_wkt(),
                "transform": tuple(self.transform)[:6],
                **(attrs or {}),
            },
        )

    @classmethod
    def from_bounds(
        cls,
        bounds: tuple[float, float, float, float],
        resolution: float,
        crs: Any,
    ) -> RasterGrid:
        """A north-up grid covering ``(left, bottom, right, top)`` at ``resolution`` units."""
        left, bottom, right, top = bounds
        if not np.isfinite([*bounds, resolution]).all() or resolution <= 0:
            raise ValueError(
                f"bounds and resolution must be finite, resolution > 0: {bounds}, {resolution}"
            )
        if right <= left or top <= bottom:
            raise ValueError(
                "bounds must be (left, bottom, right, top) with left < right and "
                f"bottom < top, got {bounds}"
            )
        width = math.ceil((right - left) / resolution)
        height = math.ceil((top - bottom) / resolution)
        transform = Affine(resolution, 0.0, left, 0.0, -resolution, top)
        return cls(pyproj.CRS.from_user_input(crs), transform, height, width)

    @classmethod
    def from_like(cls, like: Any) -> RasterGrid:
        """The grid of a raster path, an open rasterio dataset, an xarray object or a grid.

        Raises:
            ValueError: The raster has no CRS, or an xarray object lacks regular
                ``x``/``y`` coordinates.
        """
        if isinstance(like, RasterGrid):
            return like
        if isinstance(like, str | Path):
            import rasterio

            path = Path(like)
            if not path.exists():
                raise FileNotFoundError(f"reference raster not found: {path}")
            with rasterio.open(path) as src:
                return cls._from_rasterio(src, str(path))
        if hasattr(like, "transform") and hasattr(like, "crs") and hasattr(like, "height"):
            return cls._from_rasterio(like, str(getattr(like, "name", "raster")))
        if isinstance(like, xr.DataArray | xr.Dataset):
            return cls._from_xarray(like)
        raise TypeError(
            f"like must be a raster path, rasterio dataset, xarray object or RasterGrid, "
            f"got {type(like).__name__}"
        )

    @classmethod
    def _from_rasterio(cls, src: Any, name: str) -> RasterGrid:
        if src.crs is None:
            raise ValueError(f"{name}: raster has no CRS; georeference it first")
        if src.transform == Affine.identity():
            raise ValueError(f"{name}: raster has no geotransform; georeference it first")
        crs = pyproj.CRS.from_user_input(src.crs.to_wkt())
        return cls(crs, Affine(*tuple(src.transform)[:6]), int(src.height), int(src.width))

    @classmethod
    def _from_xarray(cls, obj: xr.DataArray | xr.Dataset) -> RasterGrid:
        name = getattr(obj, "name", None) or "xarray object"
        crs = _xarray_crs(obj)
        if crs is None:
            raise ValueError(
                f"{name}: no CRS; expected attrs['crs'] or a 'spatial_ref' coordinate "
                "with 'crs_wkt'"
            )
        if "y" not in obj.dims or "x" not in obj.dims:
            raise ValueError(f"{name}: expected dimensions 'y' and 'x', got {tuple(obj.dims)}")
        height, width = obj.sizes["y"], obj.sizes["x"]
        if "transform" in obj.attrs:
            transform = Affine(*tuple(obj.attrs["transform"])[:6])
            return cls(crs, _follow_coords(obj, transform, name), height, width)
        x, y = np.asarray(obj["x"], dtype=float), np.asarray(obj["y"], dtype=float)
        if len(x) < 2 or len(y) < 2:
            raise ValueError(f"{name}: need 2+ x and y coordinates or attrs['transform']")
        dx, dy = np.diff(x), np.diff(y)
        if not (np.allclose(dx, dx[0], rtol=1e-9) and np.allclose(dy, dy[0], rtol=1e-9)):
            raise ValueError(f"{name}: x/y coordinates are not regularly spaced")
        resx, resy = (x[-1] - x[0]) / (len(x) - 1), (y[-1] - y[0]) / (len(y) - 1)
        transform = Affine(resx, 0.0, x[0] - resx / 2, 0.0, resy, y[0] - resy / 2)
        return cls(crs, transform, height, width)


def _follow_coords(obj: xr.DataArray | xr.Dataset, transform: Affine, name: str) -> Affine:
    """``attrs['transform']`` moved by whole pixels to the ``x``/``y`` labels.

    A slice (``isel``) keeps the attributes of the whole raster; the
    coordinates are the labels, so the origin follows them. They must sit on
    the transform's pixel centres, spaced by its resolution.
    """
    if transform.b or transform.d or "x" not in obj.coords or "y" not in obj.coords:
        return transform
    x, y = np.asarray(obj["x"], dtype=float), np.asarray(obj["y"], dtype=float)
    if len(x) == 0 or len(y) == 0:
        return transform
    shifts = []
    for axis, values, step, origin in (
        ("x", x, transform.a, transform.c),
        ("y", y, transform.e, transform.f),
    ):
        pixels = (values - origin) / step - 0.5  # pixel index of every label
        tolerance = 64 * np.finfo(float).eps * max(np.abs(values).max(), abs(origin)) / abs(step)
        expected = round(pixels[0]) + np.arange(len(values))
        if np.abs(pixels - expected).max() > tolerance:
            raise ValueError(
                f"{name}: the {axis} coordinates are not the pixel centres of "
                f"attrs['transform'] (spacing {step}); drop the stale 'transform' attribute"
            )
        shifts.append(int(expected[0]))
    return transform @ Affine.translation(*shifts) if any(shifts) else transform


def grid_of(obj: Any) -> RasterGrid | None:
    """The grid of a georeferenced DataArray (a CRS in ``attrs`` or ``spatial_ref``), else None."""
    if isinstance(obj, xr.DataArray) and _xarray_crs(obj) is not None:
        return RasterGrid.from_like(obj)
    return None


def _xarray_crs(obj: xr.DataArray | xr.Dataset) -> pyproj.CRS | None:
    if obj.attrs.get("crs") is not None:
        return pyproj.CRS.from_user_input(obj.attrs["crs"])
    if "spatial_ref" in obj.coords:
        attrs = obj.coords["spatial_ref"].attrs
        wkt = attrs.get("crs_wkt") or attrs.get("spatial_ref")
        if wkt:
            return pyproj.CRS.from_user_input(wkt)
    return None


def _corners(height: int, width: int) -> tuple[tuple[int, int], ...]:
    return (0, 0), (width, 0), (0, height), (width, height)
