"""Road masks on the exact grid of a reference raster, in memory or streamed to GeoTIFF.

Both paths rasterise the same blocks with the same function, so they give
identical pixels; blocks run in parallel on Dask's threaded scheduler (no
cluster is started).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, overload

import dask
import dask.array as da
import geopandas as gpd
import numpy as np
import shapely
import xarray as xr
from affine import Affine

from sciml.geo.grid import RasterGrid
from sciml.geo.widths import buffer_roads
from sciml.io_utils import atomic_path

#: Side of the square blocks that are rasterised independently (pixels).
DEFAULT_CHUNKS = 4096
#: Side of the internal tiles of written GeoTIFFs (pixels).
TIFF_TILE = 512


def _as_roads(roads: gpd.GeoDataFrame | str | Path | Any) -> gpd.GeoDataFrame:
    """A road frame as is; a file, an osmnx graph or osmnx edges through ``load_roads``."""
    from sciml.geo.osm import load_roads

    if isinstance(roads, gpd.GeoDataFrame):
        osmnx_edges = "osmid" in roads.columns or {"u", "v"} <= set(roads.index.names)
        return load_roads(roads) if osmnx_edges else roads
    return load_roads(roads)


def road_polygons(
    roads: gpd.GeoDataFrame,
    grid: RasterGrid,
    *,
    width: float | Literal["osm"] = "osm",
    margin: float = 0.0,
    table: Mapping[str, tuple[float, float]] | None = None,
) -> np.ndarray:
    """Road-area polygons in the grid's CRS that touch the grid.

    Roads are buffered in their local UTM zone (:func:`sciml.geo.buffer_roads`)
    and then transformed to the grid's CRS.

    Raises:
        ValueError: No road polygon overlaps the grid.
    """
    polygons = buffer_roads(roads, width=width, margin=margin, table=table)
    if not polygons.crs.equals(grid.crs):
        polygons = polygons.to_crs(grid.crs)
    geoms = polygons.to_numpy()
    geoms = geoms[~shapely.is_empty(geoms) & shapely.intersects(geoms, shapely.box(*grid.bounds))]
    if len(geoms) == 0:
        road_bounds = tuple(round(v, 6) for v in polygons.total_bounds)
        raster_bounds = tuple(round(v, 6) for v in grid.bounds)
        raise ValueError(
            f"no road overlaps the raster: roads cover {road_bounds}, the raster covers "
            f"{raster_bounds} (both in {grid.crs.name})"
        )
    return geoms


class _Burner:
    """Rasterises the geometries that touch one block of the grid.

    Without ``values`` every geometry burns ``True`` into a bool block; with
    ``values`` each burns its own value (later geometries win) into ``dtype``.
    """

    def __init__(
        self,
        geoms: np.ndarray,
        grid: RasterGrid,
        all_touched: bool,
        values: np.ndarray | None = None,
    ) -> None:
        self.geoms, self.grid, self.all_touched = geoms, grid, all_touched
        self.values = values
        self.dtype = np.dtype(bool) if values is None else np.asarray(values).dtype
        self.tree = shapely.STRtree(geoms)

    def __call__(self, row: int, col: int, height: int, width: int) -> np.ndarray:
        from rasterio.features import rasterize

        transform = self.grid.window_transform(row, col)
        block = RasterGrid(self.grid.crs, transform, height, width)
        hits = np.sort(self.tree.query(shapely.box(*block.bounds)))
        if len(hits) == 0:
            return np.zeros((height, width), dtype=self.dtype)
        values = np.ones(len(hits), "uint8") if self.values is None else self.values[hits]
        burnt = rasterize(
            zip(self.geoms[hits], values.tolist(), strict=True),
            out_shape=(height, width),
            transform=transform,
            fill=0,
            all_touched=self.all_touched,
            dtype="uint8" if self.values is None else self.dtype,
        )
        return burnt.view(bool) if self.values is None else burnt


def _mask_blocks(burner: _Burner, grid: RasterGrid, chunks: int) -> da.Array:
    """A lazy ``(y, x)`` Dask array of the burnt geometries, one task per block."""
    if chunks <= 0:
        raise ValueError(f"chunks must be a positive number of pixels, got {chunks}")
    token = uuid.uuid4().hex
    burn = dask.delayed(burner, name=f"burner-{token}")
    rows = []
    for row in range(0, grid.height, chunks):
        height = min(chunks, grid.height - row)
        blocks = []
        for col in range(0, grid.width, chunks):
            width = min(chunks, grid.width - col)
            task = burn(row, col, height, width, dask_key_name=f"burn-{token}-{row}-{col}")
            blocks.append(da.from_delayed(task, (height, width), dtype=burner.dtype))
        rows.append(blocks)
    return da.block(rows)


@overload
def rasterize_geometries(
    geoms: np.ndarray,
    grid: RasterGrid,
    *,
    values: np.ndarray | None = ...,
    all_touched: bool = ...,
    chunks: None = ...,
    num_workers: int | None = ...,
) -> np.ndarray: ...
@overload
def rasterize_geometries(
    geoms: np.ndarray,
    grid: RasterGrid,
    *,
    values: np.ndarray | None = ...,
    all_touched: bool = ...,
    chunks: int,
    num_workers: int | None = ...,
) -> da.Array: ...
def rasterize_geometries(
    geoms: np.ndarray,
    grid: RasterGrid,
    *,
    values: np.ndarray | None = None,
    all_touched: bool = False,
    chunks: int | None = None,
    num_workers: int | None = None,
) -> np.ndarray | da.Array:
    """Rasterise shapely geometries (in the grid's CRS) on ``grid``, block by block.

    Args:
        geoms: Geometries in ``grid.crs``.
        grid: Target grid.
        values: One value per geometry (later ones win); ``None`` gives a bool mask.
        all_touched: Burn every touched pixel, not only those whose centre is inside.
        chunks: Return a lazy Dask array with blocks of this side; ``None`` computes.
        num_workers: Threads for the blocks (default: Dask's).

    Returns:
        A ``(height, width)`` numpy array, or a Dask array when ``chunks`` is set.
    """
    geoms = np.asarray(geoms, dtype=object)
    if values is not None:
        values = np.asarray(values)
        if values.shape != geoms.shape:
            raise ValueError(f"values must match geometries: {values.shape} != {geoms.shape}")
    burner = _Burner(geoms, grid, all_touched, values)
    blocks = _mask_blocks(burner, grid, DEFAULT_CHUNKS if chunks is None else chunks)
    if chunks is not None:
        return blocks
    return blocks.compute(scheduler="threads", num_workers=num_workers)


def road_mask(
    roads: gpd.GeoDataFrame | str | Path,
    like: Any,
    *,
    width: float | Literal["osm"] = "osm",
    margin: float = 0.0,
    all_touched: bool = False,
    table: Mapping[str, tuple[float, float]] | None = None,
    chunks: int | None = None,
    num_workers: int | None = None,
) -> xr.DataArray:
    """Boolean road mask on the exact grid and CRS of a reference raster.

    Args:
        roads: Road lines from :func:`sciml.geo.load_roads` (any CRS, used as
            they are), or what :func:`sciml.geo.load_roads` reads with its default
            classes: a road file, an osmnx graph or the edges of ``ox.graph_to_gdfs``.
        like: Reference raster: path, open rasterio dataset, xarray object with
            a CRS, or :class:`RasterGrid`.
        width: ``"osm"`` for per-road widths from the tags, or a constant in metres.
        margin: Extra metres on each side of every road.
        all_touched: Burn every pixel a polygon touches, not only those whose
            centre is inside.
        table: Overrides of :data:`sciml.geo.WIDTH_TABLE`.
        chunks: Return a lazy Dask-backed array with blocks of this side;
            ``None`` computes it now (in parallel blocks of :data:`DEFAULT_CHUNKS`).
        num_workers: Threads for the blocks (default: Dask's).

    Returns:
        An ``xarray.DataArray`` ``(y, x)`` of bool, named ``"road_mask"``, with the
        raster's CRS and transform in ``attrs`` and a ``spatial_ref`` coordinate.

    Raises:
        ValueError: The raster has no CRS, or no road overlaps it.

    Examples:
        Roads of the bundled Helsinki extract on a 1 km square of 10 m pixels in UTM:

        >>> from affine import Affine
        >>> from sciml.datasets import sample_path
        >>> from sciml.geo import RasterGrid, load_roads, utm_crs
        >>> roads = load_roads(sample_path("helsinki_osm"))
        >>> crs = utm_crs(roads)
        >>> x, y = roads.to_crs(crs).union_all().centroid.coords[0]
        >>> grid = RasterGrid(crs, Affine(10.0, 0, x - 500, 0, -10.0, y + 500), 100, 100)
        >>> mask = road_mask(roads, like=grid, width="osm")
        >>> mask.dims, mask.shape, mask.dtype.name
        (('y', 'x'), (100, 100), 'bool')
    """
    grid = RasterGrid.from_like(like)
    geoms = road_polygons(_as_roads(roads), grid, width=width, margin=margin, table=table)
    values = rasterize_geometries(
        geoms, grid, all_touched=all_touched, chunks=chunks, num_workers=num_workers
    )
    attrs = {"width": str(width), "margin_m": float(margin), "all_touched": int(all_touched)}
    return grid.dataarray(values, name="road_mask", attrs=attrs)


class _BlockProgress:
    """A tqdm bar over the rasterised blocks of a Dask computation (a Dask callback)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled

    def __enter__(self) -> _BlockProgress:
        if self.enabled:
            from dask.callbacks import Callback
            from tqdm.auto import tqdm

            bar = tqdm(total=self.total, desc="road mask", unit="block")

            def posttask(key: Any, *_: Any) -> None:
                name = key[0] if isinstance(key, tuple) else key  # fused keys keep the prefix
                if isinstance(name, str) and name.startswith("burn-"):
                    bar.update(1)

            self._bar, self._callback = bar, Callback(posttask=posttask)
            self._callback.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._callback.__exit__(*exc)
            self._bar.close()


class _WindowWriter:
    """A ``__setitem__`` target for :func:`dask.array.store` writing GeoTIFF windows."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __setitem__(self, key: tuple[slice, slice], value: np.ndarray) -> None:
        from rasterio.windows import Window

        rows, cols = key
        window = Window(cols.start, rows.start, cols.stop - cols.start, rows.stop - rows.start)
        self.dataset.write(value.astype(np.uint8), 1, window=window)


def write_road_mask(
    roads: gpd.GeoDataFrame | str | Path,
    like: Any,
    path: str | Path,
    *,
    width: float | Literal["osm"] = "osm",
    margin: float = 0.0,
    all_touched: bool = False,
    table: Mapping[str, tuple[float, float]] | None = None,
    chunks: int = DEFAULT_CHUNKS,
    num_workers: int | None = None,
    compress: str = "deflate",
    cache_mb: int = 64,
    progress: bool = False,
) -> Path:
    """Stream the road mask of a raster of any size to a tiled, compressed GeoTIFF.

    Blocks of ``chunks`` x ``chunks`` pixels are rasterised in parallel and
    written one window at a time, so memory stays at a few blocks whatever the
    raster's area. The pixels equal :func:`road_mask`'s. The file holds 1-bit
    values (1 = road) and is written to a temporary name, then renamed.

    Args:
        roads: Road lines or what reads as them, as in :func:`road_mask`.
        like: Reference raster, as in :func:`road_mask`.
        path: Output ``.tif``.
        width: ``"osm"`` for per-road widths from the tags, or a constant in metres.
        margin: Extra metres on each side of every road.
        all_touched: Burn every pixel a polygon touches, not only those whose
            centre is inside.
        table: Overrides of :data:`sciml.geo.WIDTH_TABLE`.
        chunks: Block side in pixels (a multiple of :data:`TIFF_TILE`).
        num_workers: Threads rasterising and compressing (default: all cores).
        compress: GeoTIFF compression (``"deflate"``, ``"lzw"``, ``"zstd"``...).
        cache_mb: GDAL block cache in MB (bounds the writer's memory).
        progress: Show a tqdm bar over the blocks.

    Returns:
        ``path``.
    """
    import rasterio

    if chunks <= 0 or chunks % TIFF_TILE:
        raise ValueError(f"chunks must be a positive multiple of {TIFF_TILE} pixels, got {chunks}")
    grid = RasterGrid.from_like(like)
    geoms = road_polygons(_as_roads(roads), grid, width=width, margin=margin, table=table)
    blocks = _mask_blocks(_Burner(geoms, grid, all_touched), grid, chunks)
    profile = {
        "driver": "GTiff",
        "height": grid.height,
        "width": grid.width,
        "count": 1,
        "dtype": "uint8",
        "nbits": 1,
        "crs": grid.crs.to_wkt(),
        "transform": Affine(*tuple(grid.transform)[:6]),
        "tiled": True,
        "blockxsize": TIFF_TILE,
        "blockysize": TIFF_TILE,
        "compress": compress,
        "bigtiff": "IF_SAFER",
        "num_threads": str(num_workers) if num_workers else "ALL_CPUS",
    }
    path = Path(path)
    with (
        rasterio.Env(GDAL_CACHEMAX=cache_mb * 2**20),  # rasterio takes bytes
        atomic_path(path, suffix=".tif") as tmp,
        rasterio.open(tmp, "w", **profile) as dst,
        _BlockProgress(blocks.npartitions, progress),
    ):
        dst.update_tags(width=str(width), margin_m=str(margin), all_touched=str(all_touched))
        da.store(
            blocks,
            _WindowWriter(dst),  # type: ignore[arg-type]  # any __setitem__ target works
            lock=threading.Lock(),
            scheduler="threads",
            num_workers=num_workers,
        )
    return path
