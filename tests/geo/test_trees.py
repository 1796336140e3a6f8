"""Tree inventories -> crown labels: boxes, points, OSM trees, masks and bad input."""

from __future__ import annotations

from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyproj
import pytest
import shapely

from sciml.datasets import sample_path
from sciml.geo import RasterGrid
from sciml.geo.trees import (
    IGNORE_INDEX,
    crown_diameters,
    load_trees,
    tree_instances,
    tree_labels,
)

UTM35 = pyproj.CRS.from_epsg(32635)


def test_osbs_boxes_in_pixel_coordinates() -> None:
    image = sample_path("osbs_image")
    boxes = pd.read_csv(sample_path("osbs_crowns"))
    trees = load_trees(sample_path("osbs_crowns"), crs="pixel", like=image)
    assert len(trees) == 61 == len(boxes)
    assert trees.crs.to_epsg() == 32617
    labels = tree_labels(trees, image).values
    expected = np.zeros((400, 400), dtype=np.uint8)
    for row in boxes.itertuples():  # pixel (col, row) is inside iff its centre is
        expected[row.ymin : row.ymax, row.xmin : row.xmax] = 1
    np.testing.assert_array_equal(labels, expected)


def test_point_crowns_are_metric_disks() -> None:
    grid_utm = RasterGrid.from_bounds((385700.0, 6671900.0, 385740.0, 6671940.0), 0.1, UTM35)
    to_wgs = pyproj.Transformer.from_crs(UTM35, "EPSG:4326", always_xy=True)
    lon, lat = to_wgs.transform(385720.0, 6671920.0)
    trees = gpd.GeoDataFrame(
        {"crown_diameter": [10.0]}, geometry=[shapely.Point(lon, lat)], crs="EPSG:4326"
    )
    area = tree_labels(trees, grid_utm).values.sum() * 0.01
    assert area == pytest.approx(np.pi * 25.0, rel=0.01)
    # on a lon/lat grid the disk is still 10 m across, east-west and north-south
    dx, dy = 0.1 / 55_500, 0.1 / 111_300
    from affine import Affine

    grid_ll = RasterGrid(
        pyproj.CRS.from_epsg(4326), Affine(dx, 0, lon - 400 * dx, 0, -dy, lat + 400 * dy), 800, 800
    )
    disk = tree_labels(trees, grid_ll).values.astype(bool)
    geod = pyproj.Geod(ellps="WGS84")
    ew = geod.inv(lon, lat, lon + dx, lat)[2] * disk.any(axis=0).sum()
    ns = geod.inv(lon, lat, lon, lat + dy)[2] * disk.any(axis=1).sum()
    assert ew == pytest.approx(10.0, abs=0.2) and ns == pytest.approx(10.0, abs=0.2)


def test_mask_sets_ignore_index_and_instances() -> None:
    grid = RasterGrid.from_bounds((0.0, 0.0, 40.0, 20.0), 1.0, UTM35)
    trees = gpd.GeoDataFrame(
        {"crown_diameter": [6.0, 4.0]},
        geometry=[shapely.Point(10, 10), shapely.Point(30, 10)],
        crs=UTM35,
    )
    mask = np.zeros(grid.shape, dtype=bool)
    mask[:, :20] = True
    labels = tree_labels(trees, grid, mask=mask).values
    assert (labels[:, 20:] == IGNORE_INDEX).all()
    assert set(np.unique(labels[:, :20])) == {0, 1}
    ids = tree_instances(trees, grid).values
    assert set(np.unique(ids)) == {0, 1, 2}
    assert (ids == 1).sum() > (ids == 2).sum() > 0


def test_csv_points_species_and_age(tmp_path: Path) -> None:
    path = tmp_path / "trees.csv"
    pd.DataFrame(
        {
            "lon": [24.94, 24.941, 24.942, 24.943],
            "lat": [60.165] * 4,
            "species": ["Tilia cordata", "Unknownia x", None, "Tilia x europaea"],
            "age": ["mature", None, None, "young"],
            "crown_m": [None, None, 3.0, None],
        }
    ).to_csv(path, index=False)
    trees = load_trees(path)
    assert trees.crs.to_epsg() == 4326
    np.testing.assert_allclose(trees["crown_diameter"], [8.0, 6.0, 3.0, 4.0])
    custom = crown_diameters(pd.read_csv(path), table={"Tilia": 10.0}, default=5.0)
    np.testing.assert_allclose(custom, [10.0, 5.0, 3.0, 5.0])


def test_osm_trees(helsinki_pbf: str, clips: dict[str, Path]) -> None:
    trees = load_trees(helsinki_pbf)
    assert len(trees) == 649
    assert (trees.geometry.geom_type == "Point").all()
    from_pbf, from_xml = load_trees(clips[".osm.pbf"]), load_trees(clips[".osm"])
    assert 0 < len(from_pbf) == len(from_xml) < 649
    assert sorted(from_pbf["osm_id"]) == sorted(from_xml["osm_id"])


def test_bad_tree_files(tmp_path: Path, helsinki_roads: gpd.GeoDataFrame) -> None:
    lines = tmp_path / "lines.geojson"
    helsinki_roads.iloc[:5].to_file(lines, driver="GeoJSON")
    with pytest.raises(ValueError, match="lines.geojson: no usable tree geometry"):
        load_trees(lines)
    no_coords = tmp_path / "no_coords.csv"
    pd.DataFrame({"species": ["Tilia"], "height": [10]}).to_csv(no_coords, index=False)
    with pytest.raises(ValueError, match="no_coords.csv: no usable geometry columns"):
        load_trees(no_coords)
    xy = tmp_path / "xy.csv"
    pd.DataFrame({"x": [1.0], "y": [2.0]}).to_csv(xy, index=False)
    with pytest.raises(ValueError, match="xy.csv: a CSV without lon/lat columns needs its CRS"):
        load_trees(xy)
    with pytest.raises(ValueError, match="crs='pixel' needs like="):
        load_trees(xy, crs="pixel")
    trees = load_trees(xy, crs=UTM35)
    far = RasterGrid.from_bounds((500000.0, 7000000.0, 500100.0, 7000100.0), 1.0, UTM35)
    with pytest.raises(ValueError, match="no tree overlaps the raster"):
        tree_labels(trees, far)
