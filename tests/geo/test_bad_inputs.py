"""Bad inputs to the public functions of sciml.geo: a clear error or a documented treatment.

Real files: the bundled OSBS orthophoto (UTM 17N, nodata 255) and Helsinki extract.
"""

from __future__ import annotations

from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import rasterio
import torch
import xarray as xr
from affine import Affine

from sciml.datasets import sample_path
from sciml.geo import (
    RasterGrid,
    buffer_roads,
    load_trees,
    road_mask,
    road_widths,
    tree_labels,
    write_road_mask,
)
from sciml.geo.rasters import read_image, read_labels, read_mask, write_geotiff
from sciml.geo.tiles import SceneTiles, predict_scene

UTM35 = "EPSG:32635"
HELSINKI = RasterGrid.from_bounds((385700.0, 6671900.0, 385900.0, 6672100.0), 1.0, UTM35)


@pytest.fixture(scope="module")
def osbs() -> xr.DataArray:
    return read_image(sample_path("osbs_image"))


class MeanModel(torch.nn.Module):
    """Logit = 3x3 mean of the first band: any NaN input would spread to its neighbours."""

    def __init__(self) -> None:
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.avg_pool2d(image[:, :1], 3, stride=1, padding=1)


def test_nan_block_stays_inside_its_pixels(osbs: xr.DataArray) -> None:
    values = osbs.values.astype(np.float32) / 255.0
    values[:, osbs.values.min(axis=0) == 255] = 0.5  # no other no-data pixel than the block
    image = osbs.copy(data=values)
    image.attrs.pop("nodata")
    bad = np.zeros(osbs.shape[1:], bool)
    bad[100:140, 220:260] = True
    holed = image.copy(data=np.where(bad, np.nan, values))
    probability = predict_scene(MeanModel(), holed, None, tile=128, overlap=32).values
    assert np.isnan(probability[bad]).all() and np.isfinite(probability[~bad]).all()
    filled = predict_scene(
        MeanModel(), image.copy(data=np.where(bad, 0.0, values)), None, tile=128, overlap=32
    ).values
    np.testing.assert_array_equal(probability[~bad], filled[~bad])
    tiles = SceneTiles(holed, None, np.zeros(bad.shape, np.uint8), tile=64, overlap=16)
    assert not tiles.mask[bad].any() and np.isfinite(tiles.image).all()
    item = tiles[0]
    window = (slice(item["row"], item["row"] + 64), slice(item["col"], item["col"] + 64))
    np.testing.assert_array_equal(item["valid"][0].numpy() > 0, ~bad[window])


def test_file_nodata_pixels_are_left_out(osbs: xr.DataArray) -> None:
    white = np.all(osbs.values == 255, axis=0)  # the file's nodata value is 255
    assert osbs.attrs["nodata"] == 255 and 0 < white.sum() < 1000
    tiles = SceneTiles(osbs, None, None, tile=128, overlap=32)
    assert not tiles.mask[white].any() and tiles.mask[~white].all()
    probability = predict_scene(MeanModel(), osbs, None, tile=128, overlap=32).values
    assert np.isnan(probability[white]).all() and np.isfinite(probability[~white]).all()


def test_mask_and_labels_on_another_grid_or_values(osbs: xr.DataArray) -> None:
    grid = RasterGrid.from_like(osbs)
    shifted = RasterGrid(grid.crs, grid.transform @ Affine.translation(2, 0), *grid.shape)
    mask = shifted.dataarray(np.ones(grid.shape, bool), name="mask")
    with pytest.raises(ValueError, match="the mask is on another grid than the image"):
        SceneTiles(osbs, mask, None, tile=64, overlap=16)
    with pytest.raises(ValueError, match="labels must be 0"):
        SceneTiles(osbs, None, np.full(grid.shape, 3, np.uint8), tile=64, overlap=16)
    with pytest.raises(ValueError, match="0/1 or bool"):
        SceneTiles(osbs, np.full(grid.shape, 2), None, tile=64, overlap=16)
    trees = load_trees(sample_path("osbs_crowns"), crs="pixel", like=osbs)
    with pytest.raises(ValueError, match="the mask is on another grid"):
        tree_labels(trees, osbs, mask=mask)
    with pytest.raises(ValueError, match="0/1 or bool"):
        tree_labels(trees, osbs, mask=np.full(grid.shape, 7))
    with pytest.raises(ValueError, match="like= is another grid"):
        predict_scene(MeanModel(), osbs, None, tile=64, overlap=16, like=shifted)


def test_tile_larger_than_the_image_is_padded(osbs: xr.DataArray) -> None:
    small = osbs.isel(y=slice(0, 50), x=slice(0, 70))
    tiles = SceneTiles(small, None, None, tile=128, overlap=32)
    assert len(tiles) == 1 and tiles[0]["image"].shape == (3, 128, 128)
    assert predict_scene(MeanModel(), small, None, tile=128, overlap=32).shape == (50, 70)


def test_read_mask_and_labels_check_grid_bands_and_values(
    osbs: xr.DataArray, tmp_path: Path
) -> None:
    path = tmp_path / "mask.tif"
    write_geotiff(np.full(osbs.shape[1:], 2, np.uint8), path, like=osbs)
    with pytest.raises(ValueError, match="mask holds 0 and 1 only, found \\[2\\]"):
        read_mask(path, like=osbs)
    with pytest.raises(ValueError, match="labels must be 0 .* found \\[2\\]"):
        read_labels(path, like=osbs)
    with pytest.raises(ValueError, match="a mask has one band, got 3"):
        read_mask(sample_path("osbs_image"))
    other = RasterGrid.from_bounds((0.0, 0.0, 40.0, 40.0), 0.1, "EPSG:32617")
    write_geotiff(np.ones(other.shape, np.uint8), path, like=other)
    with pytest.raises(ValueError, match="on another grid than the image"):
        read_mask(path, like=osbs)


def test_write_geotiff_refuses_data_on_another_grid(osbs: xr.DataArray, tmp_path: Path) -> None:
    grid = RasterGrid.from_like(osbs)
    data = grid.dataarray(np.zeros(grid.shape, np.float32), name="p")
    other = RasterGrid(grid.crs, grid.transform @ Affine.translation(1, 0), *grid.shape)
    with pytest.raises(ValueError, match="the data for .* is on another grid"):
        write_geotiff(data, tmp_path / "p.tif", like=other)
    assert not (tmp_path / "p.tif").exists()


def test_raster_without_crs(osbs: xr.DataArray, tmp_path: Path) -> None:
    path = tmp_path / "no_crs.tif"
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        height=4,
        width=4,
        count=1,
        dtype="uint8",
        transform=Affine(0.1, 0, 0, 0, -0.1, 0),
    ) as dst:
        dst.write(np.zeros((1, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="no_crs.tif: raster has no CRS"):
        read_image(path)


@pytest.mark.parametrize(
    ("bounds", "resolution", "message"),
    [
        ((10.0, 0.0, 0.0, 10.0), 1.0, "left < right"),
        ((0.0, 10.0, 10.0, 0.0), 1.0, "bottom < top"),
        ((0.0, 0.0, 10.0, 10.0), -1.0, "resolution > 0"),
        ((0.0, 0.0, np.nan, 10.0), 1.0, "must be finite"),
    ],
)
def test_grid_bounds(
    bounds: tuple[float, float, float, float], resolution: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RasterGrid.from_bounds(bounds, resolution, UTM35)


def test_grid_shape_and_transform() -> None:
    with pytest.raises(ValueError, match="at least one pixel"):
        RasterGrid(HELSINKI.crs, HELSINKI.transform, 0, 10)
    with pytest.raises(ValueError, match="degenerate grid transform"):
        RasterGrid(HELSINKI.crs, Affine(0, 0, 0, 0, 0, 0), 10, 10)


def test_roads_in_another_crs_than_the_raster(helsinki_roads: gpd.GeoDataFrame) -> None:
    expected = road_mask(helsinki_roads, HELSINKI).values
    for crs in ("EPSG:3067", "EPSG:3857"):  # reprojected by label, same pixels
        np.testing.assert_array_equal(
            road_mask(helsinki_roads.to_crs(crs), HELSINKI).values, expected
        )
    with pytest.raises(ValueError, match="roads have no CRS"):
        road_mask(helsinki_roads.set_crs(None, allow_override=True), HELSINKI)


def test_rasters_that_miss_the_roads_or_trees(
    helsinki_roads: gpd.GeoDataFrame, osbs: xr.DataArray
) -> None:
    with pytest.raises(ValueError, match="no road overlaps the raster"):
        road_mask(helsinki_roads, osbs)  # Florida: an empty mask is an error, not zeros
    trees = load_trees(sample_path("osbs_crowns"), crs="pixel", like=osbs)
    with pytest.raises(ValueError, match="no tree overlaps the raster"):
        tree_labels(trees, HELSINKI)


@pytest.mark.parametrize("margin", [-1.0, np.nan, np.inf])
def test_bad_margin(helsinki_roads: gpd.GeoDataFrame, margin: float) -> None:
    with pytest.raises(ValueError, match="margin must be a finite number >= 0"):
        road_mask(helsinki_roads, HELSINKI, margin=margin)


@pytest.mark.parametrize("chunks", [0, -256])
def test_bad_block_side(helsinki_roads: gpd.GeoDataFrame, chunks: int, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chunks must be a positive number of pixels"):
        road_mask(helsinki_roads, HELSINKI, chunks=chunks)
    for bad in (chunks, 300):
        with pytest.raises(ValueError, match=f"chunks must be a positive multiple of 512 .*{bad}"):
            write_road_mask(helsinki_roads, HELSINKI, tmp_path / "mask.tif", chunks=bad)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("width", [-3.0, 0.0, np.nan, np.inf])
def test_bad_constant_width(helsinki_roads: gpd.GeoDataFrame, width: float) -> None:
    with pytest.raises(ValueError, match="width must be a positive number of metres"):
        buffer_roads(helsinki_roads, width=width)


def test_bad_width_tags_fall_back_with_a_warning(helsinki_roads: gpd.GeoDataFrame) -> None:
    roads = helsinki_roads.iloc[:4].assign(width=[-3.0, 0.0, np.nan, 6.0], lanes=np.nan)
    with pytest.warns(UserWarning, match="2 road\\(s\\) with a 'width' that is not a positive"):
        widths = road_widths(roads)
    assert widths["source"].tolist() == ["default", "default", "default", "width"]
    text = helsinki_roads.iloc[:3].assign(width=["7 m", "3;4", "wide"], lanes=["-2", "2", "x"])
    with pytest.warns(UserWarning) as record:
        widths = road_widths(text)
    messages = [str(warning.message) for warning in record]
    assert any("1 road(s) with a 'width'" in m and "'wide'" in m for m in messages)
    assert any("2 road(s) with a 'lanes'" in m and "['-2', 'x']" in m for m in messages)
    assert widths["width_m"].tolist()[:2] == [7.0, 4.0]


@pytest.mark.parametrize("entry", [(-1.0, 6.0), (3.0, np.nan), (3.0,)])
def test_bad_width_table(helsinki_roads: gpd.GeoDataFrame, entry: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="lane_width_m, default_width_m"):
        road_widths(helsinki_roads, table={"residential": entry})


def test_boxes_with_xmin_above_xmax(tmp_path: Path) -> None:
    path = tmp_path / "boxes.csv"
    frame = pd.read_csv(sample_path("osbs_crowns"))
    frame.loc[3, ["xmin", "xmax"]] = frame.loc[3, ["xmax", "xmin"]].to_numpy()
    frame.to_csv(path, index=False)
    with pytest.raises(ValueError, match="1 box\\(es\\) with xmin >= xmax .*lines \\[5\\]"):
        load_trees(path, crs="pixel", like=sample_path("osbs_image"))


def test_missing_coordinates_are_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "boxes.csv"
    frame = pd.read_csv(sample_path("osbs_crowns"))
    frame.loc[[0, 7], "ymax"] = np.nan
    frame.to_csv(path, index=False)
    with pytest.warns(UserWarning, match="skipping 2 of 61 rows"):
        trees = load_trees(path, crs="pixel", like=sample_path("osbs_image"))
    assert len(trees) == 59
    points = tmp_path / "points.csv"
    pd.DataFrame({"lon": [24.94, np.nan], "lat": [60.17, 60.17]}).to_csv(points, index=False)
    with pytest.warns(UserWarning, match="skipping 1 of 2 rows"):
        assert len(load_trees(points)) == 1


def test_bad_crown_diameters_fall_back_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "trees.csv"
    frame = pd.DataFrame(
        {"lon": [24.94, 24.941], "lat": [60.17, 60.17], "crown_diameter": [-4.0, 5.0]}
    )
    frame.to_csv(path, index=False)
    with pytest.warns(UserWarning, match="1 crown diameter\\(s\\) .* not positive metres"):
        trees = load_trees(path)
    assert trees["crown_diameter"].tolist() == [6.0, 5.0]


def test_ignore_index_and_diameters_and_classes(osbs: xr.DataArray, helsinki_pbf: str) -> None:
    trees = load_trees(sample_path("osbs_crowns"), crs="pixel", like=osbs)
    with pytest.raises(ValueError, match="ignore_index must be an integer in 2..255"):
        tree_labels(trees, osbs, ignore_index=1)
    with pytest.raises(ValueError, match="ignore_index must differ from the labels"):
        SceneTiles(osbs, None, np.zeros(osbs.shape[1:], np.uint8), ignore_index=0)
    with pytest.raises(ValueError, match="crown diameters must be finite metres > 0"):
        load_trees(sample_path("osbs_crowns"), crs="pixel", like=osbs, default_diameter=-1.0)
    from sciml.geo import load_roads

    one = load_roads(helsinki_pbf, classes="residential")  # one class, not its letters
    assert set(one["highway"]) == {"residential"}


def test_trees_in_another_crs_or_none(osbs: xr.DataArray) -> None:
    trees = load_trees(sample_path("osbs_crowns"), crs="pixel", like=osbs)
    expected = tree_labels(trees, osbs).values
    assert expected.any()
    np.testing.assert_array_equal(tree_labels(trees.to_crs("EPSG:4326"), osbs).values, expected)
    with pytest.raises(ValueError, match="no CRS"):
        tree_labels(trees.set_crs(None, allow_override=True), osbs)


def test_lon_lat_columns_must_be_degrees(tmp_path: Path) -> None:
    path = tmp_path / "trees.csv"
    pd.DataFrame({"lon": [385700.0], "lat": [6671900.0]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match="outside \\[-180, 180\\]"):
        load_trees(path)
    assert len(load_trees(path, crs=UTM35)) == 1


def test_write_geotiff_needs_a_grid(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="has no grid \\(no CRS\\); pass like="):
        write_geotiff(np.zeros((4, 4), np.float32), tmp_path / "x.tif")
    assert not (tmp_path / "x.tif").exists()


def test_a_sliced_raster_keeps_its_place(
    helsinki_roads: gpd.GeoDataFrame, osbs: xr.DataArray
) -> None:
    full = road_mask(helsinki_roads, HELSINKI)
    part = full.isel(y=slice(40, 120), x=slice(60, 170))  # attrs still hold the full transform
    np.testing.assert_array_equal(road_mask(helsinki_roads, part).values, part.values)
    crop = osbs.isel(y=slice(100, 300), x=slice(200, 400))
    assert RasterGrid.from_like(crop).bounds[0] == pytest.approx(osbs.x.values[200] - 0.05)
    with pytest.raises(ValueError, match="not the pixel centres"):
        RasterGrid.from_like(osbs.isel(x=slice(0, 400, 2)))
