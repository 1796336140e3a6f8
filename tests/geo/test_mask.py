"""road_mask / write_road_mask against an independent buffer-and-rasterise of the same roads."""

from __future__ import annotations

from pathlib import Path

import geopandas as gpd
import numpy as np
import pyproj
import pytest
import rasterio
import shapely
import xarray as xr
from rasterio.features import rasterize

from sciml.geo import RasterGrid, buffer_roads, road_mask, road_widths, write_road_mask

UTM35 = pyproj.CRS.from_epsg(32635)
WGS84 = pyproj.CRS.from_epsg(4326)
#: A 400 m x 300 m box of central Helsinki in UTM 35N.
BOX_UTM = (385700.0, 6671900.0, 386100.0, 6672200.0)


def _reference(roads: gpd.GeoDataFrame, grid: RasterGrid, half_widths: np.ndarray) -> np.ndarray:
    """Independent mask: pyproj + shapely buffer (round caps) in UTM 35N, union, rasterise."""
    to_utm = pyproj.Transformer.from_crs(roads.crs, UTM35, always_xy=True).transform
    to_grid = pyproj.Transformer.from_crs(UTM35, grid.crs, always_xy=True).transform
    lines = shapely.transform(roads.geometry.to_numpy(), to_utm, interleaved=False)
    buffers = shapely.buffer(lines, half_widths)  # shapely defaults: round caps, quad_segs=8
    polygons = shapely.transform(buffers, to_grid, interleaved=False)
    union = shapely.union_all(polygons)
    return rasterize([union], out_shape=grid.shape, transform=grid.transform).astype(bool)


def _grid_4326(
    box_utm: tuple[float, float, float, float], resolution_deg: tuple[float, float]
) -> RasterGrid:
    to_wgs = pyproj.Transformer.from_crs(UTM35, WGS84, always_xy=True)
    left, bottom, right, top = to_wgs.transform_bounds(*box_utm)
    dx, dy = resolution_deg
    from affine import Affine

    transform = Affine(dx, 0, left, 0, -dy, top)
    return RasterGrid(WGS84, transform, int((top - bottom) / dy), int((right - left) / dx))


@pytest.mark.parametrize("crs", ["utm", "4326"])
def test_constant_width_matches_independent(helsinki_roads: gpd.GeoDataFrame, crs: str) -> None:
    if crs == "utm":
        grid = RasterGrid.from_bounds(BOX_UTM, 0.25, UTM35)
    else:
        grid = _grid_4326(BOX_UTM, (0.25 / 55_000, 0.25 / 111_000))
    mask = road_mask(helsinki_roads, grid, width=4.0)
    reference = _reference(helsinki_roads, grid, np.full(len(helsinki_roads), 2.0))
    assert mask.dtype == bool and mask.shape == grid.shape
    assert 0.02 < reference.mean() < 0.5
    np.testing.assert_array_equal(mask.values, reference)


def test_osm_widths_match_independent(helsinki_roads: gpd.GeoDataFrame) -> None:
    grid = RasterGrid.from_bounds(BOX_UTM, 0.2, UTM35)
    mask = road_mask(helsinki_roads, grid, width="osm", margin=1.5, chunks=None)
    half = road_widths(helsinki_roads)["width_m"].to_numpy() / 2 + 1.5
    np.testing.assert_array_equal(mask.values, _reference(helsinki_roads, grid, half))


def test_widths_are_metres_in_4326() -> None:
    """A 10 m wide north-south road at 60 N is 10 m wide on a lon/lat grid."""
    road = gpd.GeoDataFrame(
        {"highway": ["residential"], "lanes": [np.nan], "width": [np.nan]},
        geometry=[shapely.LineString([(24.94, 60.16), (24.94, 60.17)])],
        crs=WGS84,
    )
    dx, dy = 0.5 / 55_600, 0.5 / 111_300  # about 0.5 m at 60 N
    from affine import Affine

    grid = RasterGrid(WGS84, Affine(dx, 0, 24.9395, 0, -dy, 60.166), 200, 400)
    mask = road_mask(road, grid, width=10.0).values
    geod = pyproj.Geod(ellps="WGS84")
    _, _, metres_per_px = geod.inv(24.94, 60.165, 24.94 + dx, 60.165)
    widths = mask.sum(axis=1) * metres_per_px
    np.testing.assert_allclose(widths, 10.0, atol=metres_per_px)


def test_pixels_aligned_across_crs(helsinki_roads: gpd.GeoDataFrame) -> None:
    """Each pixel of a lon/lat mask is a road iff its centre lies in the UTM road polygons."""
    grid = _grid_4326(BOX_UTM, (1.0 / 55_000, 1.0 / 111_000))
    mask = road_mask(helsinki_roads, grid, width=6.0)
    lon, lat = np.meshgrid(mask["x"].values, mask["y"].values)
    x, y = pyproj.Transformer.from_crs(WGS84, UTM35, always_xy=True).transform(lon, lat)
    union = shapely.union_all(buffer_roads(helsinki_roads, width=6.0).to_numpy())
    inside = shapely.contains_xy(union, x, y)
    assert inside.sum() > 10_000
    assert (inside != mask.values).sum() <= 1e-4 * inside.sum()
    # the same check on the UTM grid is exact
    utm_grid = RasterGrid.from_bounds(BOX_UTM, 1.0, UTM35)
    utm_mask = road_mask(helsinki_roads, utm_grid, width=6.0)
    xx, yy = np.meshgrid(utm_mask["x"].values, utm_mask["y"].values)
    np.testing.assert_array_equal(shapely.contains_xy(union, xx, yy), utm_mask.values)


def _write_raster(path: Path, grid: RasterGrid | None, shape: tuple[int, int] = (60, 80)) -> None:
    profile = {"driver": "GTiff", "height": shape[0], "width": shape[1], "count": 3}
    if grid is not None:
        profile.update(crs=grid.crs.to_wkt(), transform=grid.transform)
    with rasterio.open(path, "w", dtype="uint8", **profile) as dst:
        dst.write(np.zeros((3, *shape), dtype="uint8"))


def test_like_path_dataset_xarray_agree(helsinki_roads: gpd.GeoDataFrame, tmp_path: Path) -> None:
    grid = RasterGrid.from_bounds((385700.0, 6671900.0, 385780.0, 6671960.0), 1.0, UTM35)
    path = tmp_path / "ortho.tif"
    _write_raster(path, grid)
    from_path = road_mask(helsinki_roads, path)
    with rasterio.open(path) as src:
        from_dataset = road_mask(helsinki_roads, src)
    like = xr.DataArray(np.zeros(grid.shape), dims=("y", "x"), coords=grid.coords())
    like.attrs["crs"] = "EPSG:32635"
    from_xarray = road_mask(helsinki_roads, like)
    from_mask = road_mask(helsinki_roads, from_path)  # a mask is a valid reference
    for other in (from_dataset, from_xarray, from_mask):
        xr.testing.assert_equal(from_path.drop_attrs(), other.drop_attrs())
    assert from_path.values.any() and not from_path.values.all()
    assert tuple(from_path.attrs["transform"]) == tuple(grid.transform)[:6]
    assert pyproj.CRS(from_path.attrs["crs"]) == UTM35
    np.testing.assert_allclose(from_path["x"].values, grid.coords()["x"])


def test_streaming_equals_in_memory(helsinki_roads: gpd.GeoDataFrame, tmp_path: Path) -> None:
    bounds = (385424.0, 6671459.0, 386464.0, 6673136.0)  # whole extract, 1 m
    grid = RasterGrid.from_bounds(bounds, 1.0, UTM35)  # 1677 x 1040: ragged edge blocks
    in_memory = road_mask(helsinki_roads, grid, width="osm", all_touched=True)
    lazy = road_mask(helsinki_roads, grid, width="osm", all_touched=True, chunks=300)
    assert lazy.chunks is not None
    np.testing.assert_array_equal(lazy.values, in_memory.values)
    path = write_road_mask(
        helsinki_roads, grid, tmp_path / "mask.tif", all_touched=True, chunks=512, num_workers=2
    )
    with rasterio.open(path) as src:
        assert src.profile["tiled"] and src.profile["compress"] == "deflate"
        assert src.crs == rasterio.crs.CRS.from_epsg(32635)
        assert tuple(src.transform)[:6] == tuple(grid.transform)[:6]
        streamed = src.read(1)
    np.testing.assert_array_equal(streamed.astype(bool), in_memory.values)
    assert list(tmp_path.iterdir()) == [path]  # no temporary left behind


def test_margin_and_all_touched_grow_the_mask(helsinki_roads: gpd.GeoDataFrame) -> None:
    grid = RasterGrid.from_bounds(BOX_UTM, 0.5, UTM35)
    base = road_mask(helsinki_roads, grid).values
    wider = road_mask(helsinki_roads, grid, margin=2.0).values
    touched = road_mask(helsinki_roads, grid, all_touched=True).values
    assert wider.sum() > base.sum() and not (base & ~wider).any()
    assert touched.sum() > base.sum() and not (base & ~touched).any()


def test_bad_input(helsinki_roads: gpd.GeoDataFrame, tmp_path: Path) -> None:
    no_crs = tmp_path / "no_crs.tif"
    with pytest.warns(rasterio.errors.NotGeoreferencedWarning):
        _write_raster(no_crs, None)
    with (
        pytest.warns(rasterio.errors.NotGeoreferencedWarning),
        pytest.raises(ValueError, match="no_crs.tif: raster has no CRS"),
    ):
        road_mask(helsinki_roads, no_crs)
    far = RasterGrid.from_bounds((500000.0, 7000000.0, 500100.0, 7000100.0), 1.0, UTM35)
    with pytest.raises(ValueError, match="no road overlaps the raster"):
        road_mask(helsinki_roads, far)
    with pytest.raises(ValueError, match="no CRS"):
        road_mask(
            helsinki_roads,
            xr.DataArray(
                np.zeros((2, 2)), dims=("y", "x"), coords={"y": [1.0, 0.0], "x": [0.0, 1.0]}
            ),
        )
    grid = RasterGrid.from_bounds(BOX_UTM, 1.0, UTM35)
    with pytest.raises(ValueError, match="width must be"):
        road_mask(helsinki_roads, grid, width=-1.0)
    with pytest.raises(ValueError, match="no width for highway class"):
        road_mask(helsinki_roads.assign(highway="spaceway", width=np.nan, lanes=np.nan), grid)
    with pytest.raises(ValueError, match="projected in metres"):
        buffer_roads(helsinki_roads, crs="EPSG:4326")
    with pytest.raises(FileNotFoundError, match="missing.tif"):
        road_mask(helsinki_roads, tmp_path / "missing.tif")


def test_width_table_and_sources(helsinki_roads: gpd.GeoDataFrame) -> None:
    widths = road_widths(helsinki_roads)
    assert set(widths["source"]) == {"width", "lanes", "default"}
    tagged = widths["source"] == "width"
    np.testing.assert_array_equal(widths["width_m"][tagged], helsinki_roads["width"][tagged])
    lanes = widths["source"] == "lanes"
    residential = lanes & (helsinki_roads["highway"] == "residential")
    np.testing.assert_allclose(
        widths["width_m"][residential], 3.0 * helsinki_roads["lanes"][residential]
    )
    custom = road_widths(helsinki_roads, table={"residential": (2.0, 4.0)})
    np.testing.assert_allclose(
        custom["width_m"][residential], 2.0 * helsinki_roads["lanes"][residential]
    )


def test_roads_given_as_a_file(helsinki_pbf: str, helsinki_roads: gpd.GeoDataFrame) -> None:
    grid = RasterGrid.from_bounds(BOX_UTM, 1.0, UTM35)
    from_file = road_mask(helsinki_pbf, like=grid, width="osm")
    np.testing.assert_array_equal(from_file.values, road_mask(helsinki_roads, grid).values)
    no_class = helsinki_roads.drop(columns="highway")
    with pytest.raises(ValueError, match="needs a 'highway' column"):
        road_mask(no_class, grid, width="osm")
    assert road_mask(no_class, grid, width=5).values.any()
