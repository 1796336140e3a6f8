"""Road lines from OpenStreetMap extracts and vector files.

OSM files (``.osm``, ``.osm.bz2``, ``.osm.pbf``) are read with GDAL's OSM
driver through :mod:`pyogrio`; it builds each way from the nodes present in
the file, so clipped extracts (ways with nodes outside the file) load without
error. The driver's own node index (``OSM_USE_CUSTOM_INDEXING``) is turned
off for each read (an open option of that read, no global setting): it
refuses files whose nodes are not in increasing id order, or have negative
ids (as JOSM writes new objects) or ids of 2**50 and more, as files merged or
edited by other tools often are. GeoPackage and GeoJSON files are read with
:mod:`pyogrio` as they are.

An :mod:`osmnx` graph (``ox.graph_from_xml``, ``ox.load_graphml``...) or its
edges (``ox.graph_to_gdfs(G, nodes=False)``) give the same roads: closed ways
tagged ``area=yes`` are areas, not centre lines, and are left out as GDAL's
``lines`` layer leaves them out; attributes that osmnx turned into lists when
it merged ways are read as OSM reads multiple values (``"2;3"``): the largest
``lanes`` and ``width``, the major ``highway`` class (first in
:data:`ROAD_CLASSES`), the first ``osm_id``.
"""

from __future__ import annotations

import bz2
import shutil
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import geopandas as gpd
import pandas as pd

#: Highway classes that carry motor traffic (OSM ``highway=*`` values).
ROAD_CLASSES: tuple[str, ...] = (
    "motorway",
    "motorway_link",
    "trunk",
    "trunk_link",
    "primary",
    "primary_link",
    "secondary",
    "secondary_link",
    "tertiary",
    "tertiary_link",
    "unclassified",
    "residential",
    "living_street",
    "service",
    "pedestrian",
    "busway",
    "road",
)

#: Columns of the frame returned by :func:`load_roads` (plus ``geometry``).
ROAD_COLUMNS: tuple[str, ...] = ("osm_id", "highway", "name", "lanes", "width", "oneway")

_OSM_SUFFIXES = (".osm", ".osm.bz2", ".osm.pbf", ".pbf")
_VECTOR_SUFFIXES = (".gpkg", ".geojson", ".json")
_LINE_TYPES = ("LineString", "MultiLineString")


def _suffix(path: Path) -> str:
    name = path.name.lower()
    for suffix in _OSM_SUFFIXES + _VECTOR_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    raise ValueError(
        f"{path}: unsupported road file type; expected one of "
        f"{', '.join(_OSM_SUFFIXES + _VECTOR_SUFFIXES)}"
    )


def parse_metres(values: pd.Series) -> pd.Series:
    """Parse OSM length tags (``"7"``, ``"7.5 m"``, ``"3,5"``) into metres.

    Several values (``"7;8"``) give the largest. Values in other units (feet,
    ``"narrow"``) become NaN.
    """
    parts = values.astype("string").str.split(";").explode()
    text = parts.str.strip().str.replace(",", ".", regex=False)
    number = text.str.extract(r"^(\d+(?:\.\d+)?)\s*(?:m|metres|meters)?$", expand=False)
    numbers = pd.to_numeric(number, errors="coerce").astype(float)
    return numbers.groupby(level=0, sort=False).max().reindex(values.index)


def parse_lanes(values: pd.Series) -> pd.Series:
    """Parse the OSM ``lanes`` tag; ``"2;3"`` (several values) gives the largest."""
    parts = values.astype("string").str.split(";").explode()
    numbers = pd.to_numeric(parts.str.strip(), errors="coerce").astype(float)
    return numbers.groupby(level=0, sort=False).max().reindex(values.index)


def read_osm_layer(path: str | Path, layer: str, *, where: str | None = None) -> gpd.GeoDataFrame:
    """Read one layer of GDAL's OSM driver (``points``, ``lines``, ``multipolygons``).

    ``.osm.bz2`` files are decompressed to a temporary file first. All tags that
    have no column of their own are in the ``tags`` column as dicts. Invalid
    geometries (rings broken by clipping) become missing, with a warning.

    Args:
        path: ``.osm``, ``.osm.bz2`` or ``.osm.pbf`` file.
        layer: GDAL OSM layer name.
        where: OGR SQL filter on the layer's columns (e.g. ``"highway IS NOT NULL"``).
    """
    import pyogrio

    path = Path(path)
    if path.name.lower().endswith(".bz2"):
        with tempfile.TemporaryDirectory(prefix="sciml-osm-") as tmp:
            plain = Path(tmp) / path.name[: -len(".bz2")]
            with bz2.open(path, "rb") as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 20)
            return read_osm_layer(plain, layer, where=where)
    frame = pyogrio.read_dataframe(
        path,
        layer=layer,
        where=where,
        on_invalid="warn",
        TAGS_FORMAT="JSON",
        USE_CUSTOM_INDEXING="NO",
    )
    frame["tags"] = frame.pop("other_tags").map(lambda t: t if isinstance(t, dict) else {})
    return frame


def _read_osm(path: Path) -> gpd.GeoDataFrame:
    lines = read_osm_layer(path, "lines", where="highway IS NOT NULL")
    for key in ("lanes", "width", "oneway"):
        lines[key] = lines["tags"].map(lambda t, k=key: t.get(k)).astype("string")
    lines["osm_id"] = pd.to_numeric(lines["osm_id"]).astype("int64")
    return lines


def _read_vector(path: Path) -> gpd.GeoDataFrame:
    import pyogrio

    return _road_frame(pyogrio.read_dataframe(path), str(path))


def _road_frame(frame: gpd.GeoDataFrame, name: str) -> gpd.GeoDataFrame:
    """A vector frame with OSM tag columns, missing tags as NA, osmnx lists resolved."""
    if "highway" not in frame.columns:
        raise ValueError(
            f"{name}: no 'highway' column; expected road lines with OSM tags "
            f"(columns found: {list(frame.columns)})"
        )
    frame = frame.copy()
    if "osm_id" not in frame.columns and "osmid" in frame.columns:  # osmnx's name
        frame["osm_id"] = frame["osmid"]
    for key in ("osm_id", "name", "lanes", "width", "oneway"):
        if key not in frame.columns:
            frame[key] = pd.NA
    if "area" in frame.columns:  # OSM: a highway way with area=yes is a square, not a line
        frame = frame[frame["area"].map(lambda v: _first(v) != "yes")]
    frame["highway"] = frame["highway"].map(_major_class)
    frame["osm_id"] = frame["osm_id"].map(_first)
    for key in ("name", "lanes", "width", "oneway"):
        frame[key] = frame[key].map(_joined)
    return frame


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list | tuple) and value else value


def _joined(value: Any) -> Any:
    """Join osmnx's list of merged ways' values as an OSM multi-value (``"2;3"``)."""
    if isinstance(value, list | tuple):
        return ";".join(str(v) for v in value)
    return value


def _major_class(value: Any) -> Any:
    if not isinstance(value, list | tuple):
        return value
    order = {name: rank for rank, name in enumerate(ROAD_CLASSES)}
    return min(value, key=lambda c: order.get(c, len(order)))


def _from_osmnx(source: Any) -> gpd.GeoDataFrame:
    """The edges of an osmnx graph, or an edges frame, as a road frame."""
    if isinstance(source, gpd.GeoDataFrame):
        edges = source
    else:
        import osmnx as ox

        if "crs" not in source.graph:
            raise ValueError("the osmnx graph has no 'crs' in G.graph; expected an osmnx graph")
        edges = ox.graph_to_gdfs(source, nodes=False)
    edges = edges.reset_index(drop=not {"u", "v"} <= set(edges.index.names))
    if "osmid" in edges.columns and "geometry" in edges.columns and edges.crs is not None:
        edges = _merge_ways(edges)
    return _road_frame(edges, "osmnx edges")


def _merge_ways(edges: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """One line per OSM way, as in the file: a way's edges (both directions) merged back.

    Edges that osmnx merged from several ways (a list of ``osmid``) stay as they are.
    """
    import shapely

    edges = edges[edges.geometry.notna()]
    geoms = shapely.normalize(edges.geometry.to_numpy())
    edges = edges.assign(geometry=geoms)
    key = edges["osmid"].map(str) + shapely.to_wkt(geoms, rounding_precision=-1)
    edges = edges[~key.duplicated()]  # the reversed twin of a two-way edge
    single = edges["osmid"].map(lambda v: not isinstance(v, list | tuple))
    ways = edges[single].groupby("osmid", sort=False)
    lines = ways.geometry.agg(
        lambda parts: shapely.line_merge(shapely.multilinestrings(list(parts)))
    )
    merged = ways.first().assign(osmid=lambda f: f.index).reset_index(drop=True)
    merged = gpd.GeoDataFrame(merged, geometry=lines.to_numpy(), crs=edges.crs)
    return pd.concat([merged, edges[~single]], ignore_index=True)


def _is_graph(source: Any) -> bool:
    return hasattr(source, "graph") and hasattr(source, "edges") and hasattr(source, "nodes")


def load_roads(
    path: str | Path | gpd.GeoDataFrame | Any, *, classes: Iterable[str] | None = ROAD_CLASSES
) -> gpd.GeoDataFrame:
    """Load road centre lines with their ``highway``, ``lanes``, ``width`` and ``oneway`` tags.

    Args:
        path: ``.osm``, ``.osm.bz2``, ``.osm.pbf``, ``.gpkg`` or ``.geojson`` file;
            an osmnx graph; or a GeoDataFrame of lines with a ``highway`` column
            (e.g. the edges of ``ox.graph_to_gdfs``).
        classes: ``highway`` values to keep (default :data:`ROAD_CLASSES`; one
            string is one class); ``None`` keeps every line that has a ``highway`` value.

    Returns:
        A GeoDataFrame of (multi)line strings in the file's CRS with columns
        :data:`ROAD_COLUMNS`: ``lanes`` (float, NaN if untagged), ``width``
        (metres, NaN if untagged or not in metres) and ``oneway`` (the tag text).

    Raises:
        FileNotFoundError: The file does not exist.
        ValueError: Unsupported type, no CRS, or no road of the chosen classes.
    """
    if isinstance(path, gpd.GeoDataFrame) or _is_graph(path):
        frame, path = (
            _from_osmnx(path),
            "road frame" if isinstance(path, gpd.GeoDataFrame) else "osmnx graph",
        )
    elif isinstance(path, str | Path):
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"road file not found: {path}")
        suffix = _suffix(path)
        frame = _read_osm(path) if suffix in _OSM_SUFFIXES else _read_vector(path)
    else:
        raise TypeError(
            "roads must be a file path, an osmnx graph or a GeoDataFrame of lines, "
            f"got {type(path).__name__}"
        )
    if frame.crs is None:
        raise ValueError(f"{path}: the road layer has no CRS; expected a georeferenced layer")
    frame = frame[frame["highway"].notna() & frame.geometry.notna()]
    lines = frame.geometry.geom_type.isin(_LINE_TYPES)
    if not lines.all():
        kinds = sorted(set(frame.geometry.geom_type[~lines]))
        warnings.warn(
            f"{path}: skipping {int((~lines).sum())} highway feature(s) that are not lines "
            f"({kinds}); road masks are built from centre lines",
            stacklevel=2,
        )
    frame = frame[lines]
    if isinstance(classes, str):
        classes = [classes]
    if classes is not None:
        wanted = set(classes)
        frame = frame[frame["highway"].isin(wanted)]
    if frame.empty:
        chosen = "any class" if classes is None else f"classes {sorted(set(classes))}"
        raise ValueError(f"{path}: no road lines of {chosen} in this file")
    raw_width = frame["width"].astype("string")
    width = parse_metres(raw_width)
    bad = raw_width.notna() & width.isna()
    if bad.any():
        examples = sorted(set(raw_width[bad].tolist()))[:5]
        warnings.warn(
            f"{path}: {int(bad.sum())} width tag(s) not in metres (e.g. {examples}); "
            "their roads get the width from lanes or the class default",
            stacklevel=2,
        )
    out = gpd.GeoDataFrame(
        {
            "osm_id": pd.to_numeric(frame["osm_id"], errors="coerce").astype("Int64"),
            "highway": frame["highway"].astype(str),
            "name": frame["name"].astype("string"),
            "lanes": parse_lanes(frame["lanes"]),
            "width": width,
            "oneway": frame["oneway"].astype("string"),
        },
        geometry=frame.geometry.to_numpy(),
        crs=frame.crs,
    )
    return out.reset_index(drop=True)
