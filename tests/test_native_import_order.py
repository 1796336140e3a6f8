"""Native libraries of the wheels coexist whatever order a script or notebook loads them in.

``xr.open_dataset`` without ``engine=`` loads every xarray backend to guess one, cfgrib's
among them: ecCodes' wheels then load eckit's libraries, PROJ included, into the
process's global symbol scope (see :mod:`sciml._native`). A script that opened a
netCDF file first and then imported pyproj, rasterio or sciml aborted at exit with
"double free or corruption" (issue 40). Each order runs in a fresh interpreter, all
at once, since what breaks is what one process has loaded before what.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# One worker runs them all (make test's --dist loadgroup): the fixture starts them in parallel.
pytestmark = pytest.mark.xdist_group("native_import_order")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"

#: What a user writes, one step each; every step checks that it got the right answer.
STEPS = {
    # A notebook's first cell: no engine named, so xarray guesses among all backends.
    "open_netcdf": """
        import xarray as xr
        ds = xr.open_dataset(DATA / "era5_ensemble_sample.nc")
        ds.load()
        assert ds.sizes
    """,
    # pyproj, rasterio, geopandas and pyogrio through sciml.geo.
    "import_sciml": """
        import sciml
        from sciml.geo import RasterGrid, load_trees, tree_labels, utm_crs
        tif = DATA / "OSBS_029.tif"
        assert RasterGrid.from_like(tif).crs.to_epsg() == 32617
        trees = load_trees(DATA / "OSBS_029.csv", crs="pixel", like=tif)
        assert utm_crs(trees.to_crs(4326)).to_epsg() == 32617
        assert int(tree_labels(trees, like=tif).sum()) > 0
        trees[["geometry"]].to_file(TMP / "trees.geojson", engine="pyogrio")
        assert len(load_trees(TMP / "trees.geojson")) == len(trees)
    """,
    "import_pyproj": """
        import pyproj
        x, _ = pyproj.Transformer.from_crs(4326, 32617, always_xy=True).transform(-82.0, 29.7)
        assert 400_000 < x < 500_000, x
    """,
    "import_rasterio": """
        import rasterio
        import rasterio.warp
        with rasterio.open(DATA / "OSBS_029.tif") as src:
            assert src.crs.to_epsg() == 32617
            assert src.read(1, window=((0, 4), (0, 4))).shape == (4, 4)
            corner = [src.bounds.left], [src.bounds.top]
            lon, _ = rasterio.warp.transform(src.crs, "EPSG:4326", *corner)
        assert -83 < lon[0] < -81, lon
    """,
}

OPEN = "open_netcdf"
LOADERS = [step for step in STEPS if step != OPEN]

#: Every order of all four steps, and the two-step scripts of the issue (open, then one import).
ORDERS = [*itertools.permutations(STEPS), *((OPEN, step) for step in LOADERS)]

#: make test's share: for each set of imports written before the open, one order
#: (what the dynamic linker sees differ by), the issue's script, and the after-open
#: imports reversed; make system-test runs the other orders too.
QUICK = {
    *(
        (*before, OPEN, *(step for step in LOADERS if step not in before))
        for size in range(len(LOADERS) + 1)
        for before in itertools.combinations(LOADERS, size)
    ),
    (OPEN, "import_sciml"),
    (OPEN, *reversed(LOADERS)),
}


def _script(order: tuple[str, ...], tmp: Path) -> str:
    head = f"from pathlib import Path\nDATA = Path({str(DATA)!r})\nTMP = Path({str(tmp)!r})\n"
    return head + "".join(textwrap.dedent(STEPS[step]) for step in order) + "print('ok')\n"


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, ...], subprocess.CompletedProcess]:
    """The exit and output of each order this session runs, in fresh interpreters side by side."""
    wanted = {  # this module's orders in the session (another module may have an "order")
        item.callspec.params["order"]
        for item in request.session.items
        if item.path == request.path and hasattr(item, "callspec")
    }
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}

    def run(order: tuple[str, ...], tmp: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", _script(order, tmp)],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    runs = [order for order in ORDERS if order in wanted]
    # made here, not in the threads: a worker's first temporary folder (re)creates its base
    # folder, and two threads doing so at once removed the folder the other had made
    folders = [tmp_path_factory.mktemp("order") for _ in runs]
    with ThreadPoolExecutor(max_workers=max(2, min(12, os.cpu_count() or 2))) as pool:
        return dict(zip(runs, pool.map(run, runs, folders), strict=True))


@pytest.mark.parametrize(
    "order",
    [order if order in QUICK else pytest.param(order, marks=pytest.mark.slow) for order in ORDERS],
    ids=" > ".join,
)
def test_any_import_order_exits_cleanly(
    order: tuple[str, ...], outcomes: dict[tuple[str, ...], subprocess.CompletedProcess]
) -> None:
    result = outcomes[order]
    message = f"{' > '.join(order)}: exit {result.returncode}\n{result.stderr[-3000:]}"
    assert "double free" not in result.stderr, message
    assert "corruption" not in result.stderr, message
    assert result.returncode == 0, message
    assert result.stdout.strip().endswith("ok"), message


# A second PROJ made global as ecCodes' wheels make eckit's (pyproj's own libproj under
# another soname: the same version, so only the binding differs), then sciml and pyproj
# as a user imports them after xr.open_dataset has loaded cfgrib. Whatever eckitlib a
# user's environment resolved, pyproj must keep to its own libproj.
_FOREIGN_PROJ = r"""
import ctypes, importlib.util, sys
from pathlib import Path

tmp = Path(sys.argv[1])
libs = Path(importlib.util.find_spec("pyproj").submodule_search_locations[0]).parent / "pyproj.libs"
proj = next(libs.glob("libproj-*"))
foreign = tmp / proj.name.replace("libproj", "libPROJ")
foreign.write_bytes(proj.read_bytes().replace(proj.name.encode(), foreign.name.encode()))
pending = [lib for lib in libs.iterdir() if lib != proj]  # its dependencies, found by soname
for _ in range(len(pending)):
    for lib in list(pending):
        try:
            ctypes.CDLL(str(lib))
            pending.remove(lib)
        except OSError:
            pass
ctypes.CDLL(str(foreign), mode=ctypes.RTLD_GLOBAL)

import sciml
import pyproj
from sciml.geo import utm_crs
import geopandas as gpd
from shapely.geometry import Point

frame = gpd.GeoDataFrame(geometry=[Point(-82.0, 29.7)], crs=4326)
assert utm_crs(frame).to_epsg() == 32617
x, _ = pyproj.Transformer.from_crs(4326, 32617, always_xy=True).transform(-82.0, 29.7)
assert 400_000 < x < 500_000, x
print(foreign)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's dynamic linker and its LD_DEBUG")
def test_pyproj_keeps_its_own_proj_when_another_is_global(tmp_path: Path) -> None:
    spec = importlib.util.find_spec("pyproj")
    assert spec is not None and spec.submodule_search_locations
    wheel_libs = Path(spec.submodule_search_locations[0]).parent / "pyproj.libs"
    if not list(wheel_libs.glob("libproj-*")):
        pytest.skip("pyproj links a PROJ that is not its wheel's own (conda, a system build)")
    log = tmp_path / "ld"
    env = {**os.environ, "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(log)}
    result = subprocess.run(
        [sys.executable, "-c", _FOREIGN_PROJ, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    foreign = result.stdout.strip().splitlines()[-1]
    bindings = "".join(path.read_text(errors="replace") for path in tmp_path.glob("ld.*"))
    assert f"to {foreign}" in bindings  # the dynamic linker was heard, and the PROJ is global
    taken = sorted(
        {
            line.split()[3]
            for line in bindings.splitlines()
            if f"to {foreign}" in line and "binding file" in line and "/pyproj" in line.split()[3]
        }
    )
    assert taken == [], f"pyproj's calls went to the other PROJ from {taken}"
