"""Road widths in metres and buffering of road lines in a local metric CRS."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Literal

import geopandas as gpd
import numpy as np
import pandas as pd
import pyproj

#: Per-class ``(lane width, default carriageway width)`` in metres. The lane width
#: multiplies the ``lanes`` tag; the default applies when neither ``width`` nor
#: ``lanes`` is tagged. Typical European design values; override with ``table=``.
WIDTH_TABLE: Mapping[str, tuple[float, float]] = {
    "motorway": (3.75, 15.0),
    "motorway_link": (3.5, 6.0),
    "trunk": (3.5, 12.0),
    "trunk_link": (3.5, 6.0),
    "primary": (3.5, 10.0),
    "primary_link": (3.25, 6.0),
    "secondary": (3.25, 8.0),
    "secondary_link": (3.0, 6.0),
    "tertiary": (3.0, 7.0),
    "tertiary_link": (3.0, 5.0),
    "unclassified": (3.0, 6.0),
    "residential": (3.0, 6.0),
    "living_street": (3.0, 5.0),
    "service": (3.0, 4.0),
    "pedestrian": (3.0, 5.0),
    "busway": (3.5, 7.0),
    "road": (3.0, 6.0),
    "track": (3.0, 3.0),
    "cycleway": (1.5, 2.5),
    "footway": (1.5, 2.0),
    "path": (1.5, 1.5),
    "bridleway": (1.5, 2.0),
    "steps": (1.5, 2.0),
    "corridor": (1.5, 2.0),
}


def utm_crs(frame: gpd.GeoDataFrame | gpd.GeoSeries) -> pyproj.CRS:
    """The WGS 84 UTM zone (EPSG:326xx north, 327xx south) of ``frame``'s bounding-box centre.

    Standard 6-degree zones, without the Norway and Svalbard exceptions (a
    neighbouring zone is still metric and nearly conformal there).
    """
    if frame.crs is None:
        raise ValueError("geometries have no CRS; cannot choose a metric CRS for buffering")
    to_lonlat = pyproj.Transformer.from_crs(frame.crs, "EPSG:4326", always_xy=True)
    west, south, east, north = to_lonlat.transform_bounds(*frame.total_bounds)
    if not np.all(np.isfinite([west, south, east, north])):
        raise ValueError(f"cannot locate the geometries' bounds {tuple(frame.total_bounds)}")
    lon, lat = (west + east) / 2, (south + north) / 2
    zone = min(int((lon + 180) // 6) + 1, 60)
    return pyproj.CRS.from_epsg((32600 if lat >= 0 else 32700) + zone)


def road_widths(
    roads: gpd.GeoDataFrame, *, table: Mapping[str, tuple[float, float]] | None = None
) -> pd.DataFrame:
    """Carriageway width of every road in metres and where it came from.

    The ``width`` tag wins; else ``lanes`` x the class's lane width; else the
    class's default width. Tags are parsed as OSM tags (``"7 m"``, ``"2;3"``:
    the largest); a tag that is present but not a positive number (``-3``,
    ``0``, ``"narrow"``) is reported with a warning and the next source is used.

    Args:
        roads: Output of :func:`sciml.geo.load_roads` (``highway``, ``lanes``, ``width``).
        table: Entries that replace or extend :data:`WIDTH_TABLE`.

    Returns:
        A frame with ``width_m`` (float) and ``source`` (``"width"``, ``"lanes"``
        or ``"default"``), indexed like ``roads``.

    Raises:
        ValueError: A road class needs the table but has no entry in it, or a
            table entry is not two positive numbers of metres.
    """
    from sciml.geo.osm import parse_lanes, parse_metres

    if "highway" not in roads:
        raise ValueError(
            "width='osm' needs a 'highway' column (OSM road class); "
            f"columns: {list(roads.columns)}; or pass a constant width in metres"
        )
    merged = {**WIDTH_TABLE, **_checked_table(table)}
    highway = roads["highway"].astype(str)
    tagged = _usable(roads, "width", parse_metres)
    lanes = _usable(roads, "lanes", parse_lanes)
    needs_table = tagged.isna()
    missing = sorted(set(highway[needs_table]) - set(merged))
    if missing:
        raise ValueError(
            f"no width for highway class(es) {missing}: add them with "
            "table={class: (lane_width_m, default_width_m)}"
        )
    lane_width = highway.map(lambda c: merged.get(c, (np.nan, np.nan))[0])
    default = highway.map(lambda c: merged.get(c, (np.nan, np.nan))[1])
    width = tagged.fillna(lanes * lane_width).fillna(default)
    source = np.where(tagged.notna(), "width", np.where(lanes.notna(), "lanes", "default"))
    return pd.DataFrame({"width_m": width.astype(float), "source": source}, index=roads.index)


def _checked_table(table: Mapping[str, tuple[float, float]] | None) -> dict:
    for name, entry in (table or {}).items():
        values = np.asarray(entry, dtype=float)
        if values.shape != (2,) or not (np.isfinite(values).all() and (values > 0).all()):
            raise ValueError(
                f"table[{name!r}] must be (lane_width_m, default_width_m) > 0, got {entry!r}"
            )
    return dict(table or {})


def _usable(roads: pd.DataFrame, column: str, parse: Callable[[pd.Series], pd.Series]) -> pd.Series:
    """The column's positive values; present but unusable values warned about, then NaN."""
    if column not in roads:
        return pd.Series(np.nan, index=roads.index)
    raw = roads[column]
    values = parse(raw)
    good = (values > 0) & np.isfinite(values)
    bad = raw.notna() & ~good
    if bad.any():
        examples = sorted(set(raw[bad].astype(str)))[:5]
        warnings.warn(
            f"{int(bad.sum())} road(s) with a '{column}' that is not a positive number "
            f"(e.g. {examples}); they get their width from the next source",
            stacklevel=3,
        )
    return values.where(good)


def buffer_roads(
    roads: gpd.GeoDataFrame,
    *,
    width: float | Literal["osm"] = "osm",
    margin: float = 0.0,
    crs: pyproj.CRS | str | None = None,
    table: Mapping[str, tuple[float, float]] | None = None,
    quad_segs: int = 8,
) -> gpd.GeoSeries:
    """Buffer road centre lines into road-area polygons, in metres.

    Each line is buffered by ``width / 2 + margin`` with round caps in its local
    UTM zone (or ``crs`` if given, which must be metric), never in degrees.

    Args:
        roads: Road lines with a CRS.
        width: ``"osm"`` (per-road width from :func:`road_widths`) or a constant in metres.
        margin: Extra distance in metres on each side (how far from the kerb
            the inventory is complete).
        crs: Metric CRS to buffer in (default: the UTM zone of the centroid).
        table: Width table overrides, see :func:`road_widths`.
        quad_segs: Segments per quarter circle of the round caps and joins (8, as
            shapely and GEOS by default).

    Returns:
        Polygons in the buffering CRS, indexed like ``roads``.
    """
    if roads.crs is None:
        raise ValueError("roads have no CRS; cannot buffer them in metres")
    metric = pyproj.CRS.from_user_input(crs) if crs is not None else utm_crs(roads)
    units = {axis.unit_name for axis in metric.axis_info}
    if metric.is_geographic or not units <= {"metre", "meter"}:
        raise ValueError(f"buffering CRS must be projected in metres, got {metric.name}")
    if isinstance(width, str):
        if width != "osm":
            raise ValueError(f"width must be 'osm' or a number of metres, got {width!r}")
        half = road_widths(roads, table=table)["width_m"].to_numpy() / 2.0
    else:
        if not np.isfinite(width) or width <= 0:
            raise ValueError(f"width must be a positive number of metres, got {width}")
        half = np.full(len(roads), float(width) / 2.0)
    if not (np.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0 metres, got {margin}")
    if quad_segs < 1:
        raise ValueError(f"quad_segs must be >= 1, got {quad_segs}")
    lines = roads.geometry.to_crs(metric)
    return lines.buffer(half + margin, quad_segs=quad_segs)
