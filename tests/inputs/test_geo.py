"""Rasters and tree inventories as other tools write them, through ``geo labels`` and
``geo mask``.

The bundled NEON image (``OSBS_029.tif``) and its DeepForest boxes (``OSBS_029.csv``) are
rewritten as other tools do: the CRS spelled otherwise, another dtype, no-data set, other
tiling, the image reprojected; the CSV's columns reordered, rows shuffled, extra columns,
``image_path`` as a path, empty or absent, or naming another image; the files emptied or
truncated. Each gives the same labels and mask (a reprojected image: the same mask but at
pixels within one pixel of the road's edge) or a refusal naming the file that leaves every
file as it was.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import rasterio
from hypothesis import given
from hypothesis import strategies as st

from sciml.datasets import sample_path
from tests.inputs import variants as v
from tests.inputs.harness import QUICK, SLOW, ran, refused

pytestmark = pytest.mark.xdist_group("inputs_geo")

IMAGE = "OSBS_029.tif"


def _read(path: Path) -> tuple[np.ndarray, Any, Any]:
    with rasterio.open(path) as src:
        return src.read(1), src.crs, src.transform


def _labels_argv(csv: Path, image: Path, out: Path, crs: str = "pixel") -> list[str]:
    return ["geo", "labels", str(csv), str(image), str(out), "--crs", crs]


def _mask_argv(roads: Path, image: Path, out: Path) -> list[str]:
    return ["geo", "mask", str(roads), str(image), str(out), "--width", "3"]


class Base(dict[str, Any]):
    def __repr__(self) -> str:
        return f"Base({self['image']})"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    """The bundled image and boxes, a road across the image, and both commands' answers."""
    import geopandas as gpd
    from shapely.geometry import LineString

    folder = tmp_path_factory.mktemp("geo_base")
    image = Path(shutil.copy(sample_path("osbs_image"), folder / IMAGE))
    csv = Path(shutil.copy(sample_path("osbs_crowns"), folder / "OSBS_029.csv"))
    with rasterio.open(image) as src:
        left, bottom, right, top = src.bounds
        crs = src.crs
    road = LineString([(left + 3, bottom + 5), (right - 5, top - 2)])
    roads = folder / "roads.geojson"
    gpd.GeoDataFrame({"highway": ["residential"]}, geometry=[road], crs=crs).to_file(roads)
    assert ran(_labels_argv(csv, image, folder / "labels.tif"), csv, image) == 0
    assert ran(_mask_argv(roads, image, folder / "mask.tif"), roads, image) == 0
    return Base(
        image=image,
        csv=csv,
        roads=roads,
        frame=pd.read_csv(csv),
        labels=_read(folder / "labels.tif"),
        mask=_read(folder / "mask.tif"),
    )


# -- raster variants ---------------------------------------------------------------------------


def _rewrite(base: Base, folder: Path, **profile: Any) -> tuple[Path, v.Expect]:
    with rasterio.open(base["image"]) as src:
        data, meta = src.read(), src.profile
    dtype = profile.pop("dtype", meta["dtype"])
    meta.update(profile, dtype=dtype)
    path = folder / IMAGE
    with rasterio.open(path, "w", **meta) as dst:
        dst.write(data.astype(dtype))
    return path, v.SAME


def _reprojected(base: Base, folder: Path, crs: str) -> tuple[Path, v.Expect]:
    from rasterio.warp import Resampling, calculate_default_transform, reproject

    path = folder / IMAGE
    with rasterio.open(base["image"]) as src:
        transform, width, height = calculate_default_transform(
            src.crs, crs, src.width, src.height, *src.bounds
        )
        meta = src.profile | {"crs": crs, "transform": transform, "width": width}
        meta |= {"height": height}
        meta.pop("blockysize", None)
        with rasterio.open(path, "w", **meta) as dst:
            for band in range(1, src.count + 1):
                reproject(
                    rasterio.band(src, band),
                    rasterio.band(dst, band),
                    resampling=Resampling.nearest,
                )
    return path, v.Expect(grid=True)


def _truncated(base: Base, folder: Path, fraction: float) -> tuple[Path, v.Expect]:
    """The image cut short. ``geo mask`` and ``geo labels`` read only its grid (the header):
    the same answer while the header is whole, else a refusal naming it."""
    path = Path(shutil.copy(base["image"], folder / IMAGE))
    v.truncated(path, fraction)
    return path, v.SAME


RASTERS: dict[str, st.SearchStrategy[Any]] = {
    "crs spelled otherwise": st.sampled_from(("wkt", "proj4")).map(
        lambda spelling: (
            f"crs as {spelling}",
            lambda b, f: _rewrite(b, f, crs=_spelled(b["image"], spelling)),
        )
    ),
    "other dtype": st.sampled_from(("uint16", "int16", "float32", "float64")).map(
        lambda dtype: (dtype, lambda b, f: _rewrite(b, f, dtype=dtype))
    ),
    "nodata": st.sampled_from((0, 254, None)).map(
        lambda nodata: (f"nodata {nodata}", lambda b, f: _rewrite(b, f, nodata=nodata))
    ),
    "tiled otherwise": st.tuples(
        st.sampled_from((16, 64, 256)), st.sampled_from(("deflate", "none"))
    ).map(
        lambda t: (
            f"tiles {t}",
            lambda b, f: _rewrite(
                b, f, tiled=True, blockxsize=t[0], blockysize=t[0], compress=t[1]
            ),
        )
    ),
    "reprojected": st.sampled_from(("EPSG:3857", "EPSG:26917", "EPSG:32616")).map(
        lambda crs: (f"reprojected to {crs}", lambda b, f: _reprojected(b, f, crs))
    ),
    "truncated": st.floats(0.05, 0.95).map(
        lambda fraction: (f"cut to {fraction:.2f}", lambda b, f: _truncated(b, f, fraction))
    ),
}


def _spelled(image: Path, spelling: str) -> str:
    with rasterio.open(image) as src:
        return src.crs.to_wkt() if spelling == "wkt" else src.crs.to_proj4()


def _edge_pixels(mask: np.ndarray) -> int:
    """Pixels within one pixel (8 neighbours) of the mask's edge: where nearest-neighbour
    resampling to another grid may put the other value."""
    padded = np.pad(mask.astype(bool), 1, mode="edge")
    windows = [
        padded[1 + dy : padded.shape[0] - 1 + dy, 1 + dx : padded.shape[1] - 1 + dx]
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
    ]
    stack = np.stack(windows)
    return int((stack.any(0) & ~stack.all(0)).sum())


def check_raster(
    command: str, data: st.DataObject, kind: str, base: Base, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        name, make = data.draw(RASTERS[kind], label=kind)
        image, expect = make(base, folder)
        out = folder / "out.tif"
        if command == "labels":
            if expect.grid:  # pixel boxes mean other places on another grid
                return
            argv, other = _labels_argv(base["csv"], image, out), base["csv"]
        else:
            argv, other = _mask_argv(base["roads"], image, out), base["roads"]
        if expect.refuse:
            refused(argv, capsys, image, image, other, out)
            return
        code = ran(argv, image, other)
        err = capsys.readouterr().err
        if code == 1 and (expect.grid or kind == "truncated"):
            assert str(image) in err and not out.exists(), f"{name}: {err[-2000:]}"
            return
        assert code == 0, f"{name}: {err[-2000:]}"
        values, crs, transform = _read(out)
        want, want_crs, want_transform = base[command]
        if not expect.grid:
            assert crs == want_crs and transform == want_transform, name
            np.testing.assert_array_equal(values, want, err_msg=name)
            return
        # the answer on the variant's grid against the answer resampled to it
        from rasterio.warp import Resampling, reproject

        resampled = np.zeros_like(values)
        reproject(
            want,
            resampled,
            src_transform=want_transform,
            src_crs=want_crs,
            dst_transform=transform,
            dst_crs=crs,
            resampling=Resampling.nearest,
            dst_nodata=0,
        )
        with rasterio.open(image) as src:
            inside = src.read_masks(1) > 0 if src.nodata is not None else np.ones_like(values, bool)
        bound = _edge_pixels(resampled)
        differ = int(((values != resampled) & inside).sum())
        assert differ <= bound, (name, differ, bound)


# -- tree inventory variants -------------------------------------------------------------------


def _csv(frame: pd.DataFrame, folder: Path, expect: v.Expect = v.SAME) -> tuple[Path, v.Expect]:
    path = folder / "crowns.csv"
    frame.to_csv(path, index=False)
    return path, expect


def _cut(base: Base, folder: Path, fraction: float) -> tuple[Path, v.Expect]:
    path = Path(shutil.copy(base["csv"], folder / "crowns.csv"))
    text = path.read_bytes()
    path.write_bytes(text[: max(1, int(len(text) * fraction))])
    return path, v.Expect(grid=True)


INVENTORIES: dict[str, st.SearchStrategy[Any]] = {
    "columns reordered": st.permutations(
        ["image_path", "xmin", "ymin", "xmax", "ymax", "label"]
    ).map(lambda cols: (f"columns {cols}", lambda b, f: _csv(b["frame"][list(cols)], f))),
    "rows shuffled": st.randoms(use_true_random=False).map(
        lambda rnd: (
            "rows shuffled",
            lambda b, f: _csv(b["frame"].sample(frac=1.0, random_state=rnd.randrange(2**31)), f),
        )
    ),
    "extra columns": st.just(
        ("extra columns", lambda b, f: _csv(b["frame"].assign(score=0.9, site="OSBS"), f))
    ),
    "columns renamed": st.sampled_from(("upper", "title", "spaces")).map(
        lambda how: (
            f"columns {how}",
            lambda b, f: _csv(b["frame"].rename(columns=_renamer(how)), f, v.Expect(grid=True)),
        )
    ),
    "image_path as a path": st.sampled_from(("/data/neon/", "./", "C:/neon/")).map(
        lambda prefix: (
            f"image_path {prefix}",
            lambda b, f: _csv(b["frame"].assign(image_path=prefix + IMAGE), f),
        )
    ),
    "image_path empty": st.just(
        ("image_path empty", lambda b, f: _csv(b["frame"].assign(image_path=""), f))
    ),
    "image_path absent": st.just(
        ("no image_path", lambda b, f: _csv(b["frame"].drop(columns="image_path"), f))
    ),
    "image_path another image": st.sampled_from(("OSBS_030.tif", "osbs_029.png")).map(
        lambda other: (
            f"image_path {other}",
            lambda b, f: _csv(b["frame"].assign(image_path=other), f, v.REFUSED),
        )
    ),
    "emptied": st.just(("no rows", lambda b, f: _csv(b["frame"].iloc[:0], f, v.REFUSED))),
    "truncated": st.floats(0.02, 0.98).map(
        lambda fraction: (f"cut to {fraction:.2f}", lambda b, f: _cut(b, f, fraction))
    ),
}


def _renamer(how: str) -> Any:
    return {"upper": str.upper, "title": str.title, "spaces": lambda c: f" {c} "}[how]


def check_inventory(
    data: st.DataObject, kind: str, base: Base, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        name, make = data.draw(INVENTORIES[kind], label=kind)
        csv, expect = make(base, folder)
        out = folder / "labels.tif"
        argv = _labels_argv(csv, base["image"], out)
        if expect.refuse:
            refused(argv, capsys, csv, csv, base["image"], out)
            return
        with warnings.catch_warnings():  # a row cut short is skipped with a warning
            warnings.simplefilter("ignore")
            code = ran(argv, csv, base["image"])
        err = capsys.readouterr().err
        if code == 1 and expect.grid:
            assert str(csv) in err and not out.exists(), f"{name}: {err[-2000:]}"
            return
        assert code == 0, f"{name}: {err[-2000:]}"
        values, crs, transform = _read(out)
        want, want_crs, want_transform = base["labels"]
        assert crs == want_crs and transform == want_transform
        if kind == "truncated":  # the rows read are the file's first ones: a subset of boxes
            assert ((values == 1) <= (want == 1)).all(), name
            return
        np.testing.assert_array_equal(values, want, err_msg=name)


CASES = [("mask", kind) for kind in RASTERS] + [("labels", kind) for kind in RASTERS]
CASES += [("inventory", kind) for kind in INVENTORIES]


def _check(command: str, kind: str, data: st.DataObject, base: Base, capsys: Any) -> None:
    if command == "inventory":
        check_inventory(data, kind, base, capsys)
    else:
        check_raster(command, data, kind, base, capsys)


@pytest.mark.parametrize(("command", "kind"), CASES)
@QUICK
@given(data=st.data())
def test_geo_variants(
    command: str, kind: str, data: st.DataObject, base: Base, capsys: pytest.CaptureFixture[str]
) -> None:
    _check(command, kind, data, base, capsys)


@pytest.mark.slow
@pytest.mark.parametrize(("command", "kind"), CASES)
@SLOW
@given(data=st.data())
def test_geo_variants_explored(
    command: str, kind: str, data: st.DataObject, base: Base, capsys: pytest.CaptureFixture[str]
) -> None:
    _check(command, kind, data, base, capsys)
