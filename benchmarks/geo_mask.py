"""Road masks of the Helsinki extract at 0.2 m: time and peak memory.

Compares, each in a fresh process (so peak RSS is its own):

* ``direct``: buffer every road in UTM, ``shapely.union_all``, then
  ``rasterio.features.rasterize`` of the union on the whole grid;
* ``in_memory``: :func:`sciml.geo.road_mask` on the same grid;
* ``stream``: :func:`sciml.geo.write_road_mask` to a tiled, compressed GeoTIFF,
  on the same grid and on a city-sized grid made of ``k x k`` translated copies
  of the Helsinki roads (7 x 7 copies at 0.2 m: 2.1 gigapixels).

Run ``python benchmarks/geo_mask.py [--quick] [--out runs/bench/geo_mask.json]``.
Files are written under ``--tmp`` (default ``/tmp``) and deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from _report import write_report

if TYPE_CHECKING:
    import geopandas as gpd

    from sciml.geo import RasterGrid


def _roads(copies: int) -> gpd.GeoDataFrame:
    import geopandas as gpd
    import pandas as pd

    from sciml.datasets import sample_path
    from sciml.geo import load_roads, utm_crs

    roads = load_roads(sample_path("helsinki_osm"))
    roads = roads.to_crs(utm_crs(roads))
    left, bottom, right, top = roads.total_bounds
    width, height = right - left, top - bottom
    parts = [
        roads.assign(geometry=roads.geometry.translate(i * width, j * height))
        for i in range(copies)
        for j in range(copies)
    ]
    return gpd.GeoDataFrame(pd.concat(parts, ignore_index=True), crs=roads.crs)


def _grid(roads: gpd.GeoDataFrame, resolution: float) -> RasterGrid:
    from sciml.geo import RasterGrid

    return RasterGrid.from_bounds(tuple(roads.total_bounds), resolution, roads.crs)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(case: str, resolution: float, copies: int, tmp: Path) -> dict:
    """Run one case in this process and return its measurements."""
    import numpy as np

    roads = _roads(copies)
    grid = _grid(roads, resolution)
    base_mb = _peak_mb()
    start = time.perf_counter()
    extra: dict = {}
    if case == "direct":
        import shapely
        from rasterio.features import rasterize

        from sciml.geo import buffer_roads

        union = shapely.union_all(buffer_roads(roads, crs=roads.crs).to_numpy())
        mask = rasterize([union], out_shape=grid.shape, transform=grid.transform)
        extra["road_fraction"] = float(mask.mean())
    elif case == "in_memory":
        from sciml.geo import road_mask

        mask = road_mask(roads, grid).values
        extra["road_fraction"] = float(mask.mean())
    elif case == "stream":
        from sciml.geo import write_road_mask

        path = tmp / f"sciml-bench-mask-{os.getpid()}.tif"
        try:
            write_road_mask(roads, grid, path)
            seconds = time.perf_counter() - start
            extra["file_mb"] = path.stat().st_size / 2**20
            if copies == 1:  # check against the in-memory path
                import rasterio

                from sciml.geo import road_mask

                with rasterio.open(path) as src:
                    same = np.array_equal(src.read(1).astype(bool), road_mask(roads, grid).values)
                extra["equals_in_memory"] = bool(same)
        finally:
            path.unlink(missing_ok=True)
        return _row(case, grid, seconds, base_mb, extra)
    else:
        raise ValueError(f"unknown case {case}")
    return _row(case, grid, time.perf_counter() - start, base_mb, extra)


def _row(case: str, grid: RasterGrid, seconds: float, base_mb: float, extra: dict) -> dict:
    pixels = grid.height * grid.width
    return {
        "case": case,
        "height": grid.height,
        "width": grid.width,
        "megapixels": pixels / 1e6,
        "seconds": seconds,
        "mpx_per_s": pixels / 1e6 / seconds,
        "peak_rss_mb": _peak_mb(),
        "peak_rss_increase_mb": _peak_mb() - base_mb,
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    """Run every case in its own process, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 m pixels, 2 x 2 copies")
    parser.add_argument("--out", default="runs/bench/geo_mask.json", help="JSON output")
    parser.add_argument("--tmp", default="/tmp", help="folder for the streamed GeoTIFFs")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--copies", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    resolution = 1.0 if args.quick else 0.2
    if args.case:  # child process
        print(json.dumps(run_case(args.case, resolution, args.copies, Path(args.tmp))))
        return 0
    big = 2 if args.quick else 7
    cases = [("direct", 1), ("in_memory", 1), ("stream", 1), ("stream", big)]
    rows = []
    for case, copies in cases:
        command = [sys.executable, __file__, "--case", case, "--copies", str(copies)]
        command += ["--tmp", args.tmp] + (["--quick"] if args.quick else [])
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(output.strip().splitlines()[-1]))
        row = rows[-1]
        print(
            f"{row['case']:>10} {row['megapixels']:9.1f} Mpx {row['seconds']:8.2f} s "
            f"{row['mpx_per_s']:8.1f} Mpx/s  peak RSS {row['peak_rss_mb']:7.0f} MB "
            f"(+{row['peak_rss_increase_mb']:.0f} MB over roads loaded)",
            flush=True,
        )
    write_report(args.out, "geo_mask", rows, resolution_m=resolution)
    return 0


if __name__ == "__main__":
    sys.exit(main())
