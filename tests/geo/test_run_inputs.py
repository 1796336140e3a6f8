"""What ``sciml geo`` commands check about their inputs and outputs, on real GeoTIFFs.

A run trained on a 64 x 64 crop of the bundled OSBS orthophoto (uint8, nodata
255, 75 no-data pixels in the crop) records its pixel scaling; ``geo predict``
reads an image in those units or refuses it. No command writes over one of
its inputs or over an existing output without ``--overwrite``; ``--seed``
reproduces a run.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
import xarray as xr

from sciml.cli import main
from sciml.datasets import sample_path
from sciml.geo import load_trees, tree_labels
from sciml.geo.rasters import read_image, write_geotiff

#: The crop of OSBS_029.tif: rows and columns (75 no-data pixels, some crowns).
CROP = {"y": slice(192, 256), "x": slice(288, 352)}
SMALL = ["--tile", "32", "--overlap", "8", "--base-channels", "4", "--depth", "2"]
PREDICT = ["--tile", "32", "--overlap", "8"]


def _write_image(
    path: Path,
    values: np.ndarray,
    like: xr.DataArray,
    *,
    descriptions: list[str] | tuple[str, ...] | None = None,
    **profile: object,
) -> Path:
    """Write ``values`` with rasterio on ``like``'s grid (as another tool would)."""
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        height=values.shape[1],
        width=values.shape[2],
        count=values.shape[0],
        dtype=values.dtype,
        crs=like.attrs["crs"],
        transform=rasterio.Affine(*like.attrs["transform"]),
        **profile,
    ) as dst:
        dst.write(values)
        for index, name in enumerate(descriptions or (), start=1):
            dst.set_band_description(index, name)
    return path


@pytest.fixture(scope="module")
def crop() -> xr.DataArray:
    image = read_image(sample_path("osbs_image")).isel(CROP)
    return image.assign_coords(band=["red", "green", "blue"])


@pytest.fixture(scope="module")
def inputs(crop: xr.DataArray, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The crop (bands named), an all-ones mask and the crown labels, as GeoTIFFs."""
    folder = tmp_path_factory.mktemp("osbs")
    full = read_image(sample_path("osbs_image"))
    trees = load_trees(sample_path("osbs_crowns"), crs="pixel", like=full)
    labels = tree_labels(trees, crop.isel(band=0, drop=True))
    paths = {
        "image": folder / "image.tif",
        "mask": folder / "mask.tif",
        "labels": folder / "labels.tif",
    }
    write_geotiff(crop, paths["image"], nodata=255)
    write_geotiff(np.ones(crop.shape[1:], np.uint8), paths["mask"], like=crop)
    write_geotiff(labels, paths["labels"])
    return paths


def _train(inputs: dict[str, Path], run: Path, *extra: str) -> int:
    args = [str(inputs[k]) for k in ("image", "mask", "labels")]
    return main(["geo", "train", *args, "--run-dir", str(run), *SMALL, *extra])


@pytest.fixture(scope="module")
def run(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run") / "run"
    assert _train(inputs, folder, "--epochs", "1") == 0
    return folder


def _predict(image: Path, out: Path, run: Path, *extra: str) -> int:
    return main(["geo", "predict", str(image), str(out), "--run-dir", str(run), *PREDICT, *extra])


def _probability(image: Path, run: Path, out: Path) -> np.ndarray:
    assert _predict(image, out, run) == 0
    with rasterio.open(out) as src:
        return src.read(1)


@pytest.fixture(scope="module")
def expected(inputs: dict[str, Path], run: Path) -> np.ndarray:
    """The prediction of the training image itself (uint8, bands named, nodata 255)."""
    return _probability(inputs["image"], run, run.parent / "expected.tif")


def _valid_range(crop: xr.DataArray) -> tuple[float, float]:
    data = crop.values[:, ~np.all(crop.values == 255, axis=0)]
    return float(data.min()), float(data.max())


def test_the_run_records_the_pixel_scaling(crop: xr.DataArray, run: Path) -> None:
    from sciml.geo.pixels import PixelScaling
    from sciml.geo.training import run_pixel_scaling

    assert run_pixel_scaling(run) == PixelScaling(
        units="uint8",
        scale=255.0,
        bands=3,
        band_names=("red", "green", "blue"),
        nodata=255.0,
        value_range=_valid_range(crop),
    )


@pytest.mark.parametrize(
    ("case", "dtype", "profile", "order"),
    [
        ("float32 0..255", np.float32, {"nodata": 255}, [0, 1, 2]),
        ("float64 0..255, no nodata", np.float64, {}, [0, 1, 2]),
        ("bands named in another order", np.uint8, {"nodata": 255}, [2, 0, 1]),
    ],
)
def test_the_same_pixels_stored_otherwise_give_the_same_prediction(
    crop: xr.DataArray,
    run: Path,
    expected: np.ndarray,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    dtype: type,
    profile: dict[str, object],
    order: list[int],
) -> None:
    values = crop.values[order].astype(dtype)
    names = [("red", "green", "blue")[i] for i in order] if order != [0, 1, 2] else None
    path = _write_image(tmp_path / "image.tif", values, crop, descriptions=names, **profile)
    assert np.isnan(expected).sum() == 75  # the crop's no-data pixels
    np.testing.assert_array_equal(_probability(path, run, tmp_path / "p.tif"), expected)
    if "nodata" not in profile:
        assert "declares no nodata: using the training image's 255" in capsys.readouterr().out


TRAINED_ON = (
    "the model was trained on uint8 (values {low:g}..{high:g}), divided by 255, 3 band(s) "
    "(red, green, blue)"
)


@pytest.mark.parametrize(
    ("case", "make", "descriptions", "message"),
    [
        (
            "reflectance 0..1",
            lambda v: v.astype(np.float32) / np.float32(255),
            None,
            "holds float32 values {low_reflectance:.6g}..1 (not whole numbers: e.g. ",
        ),
        ("uint16", lambda v: v.astype(np.uint16), None, "holds uint16 values {low}..255, but "),
        ("4 bands", lambda v: np.concatenate([v, v[:1]]), None, "has 4 band(s), but "),
        (
            "other band names",
            lambda v: v,
            ("nir", "red", "green"),
            "has bands ['nir', 'red', 'green'], but the model was trained on bands "
            "['red', 'green', 'blue']",
        ),
    ],
)
def test_pixels_in_other_units_or_bands_are_refused(
    crop: xr.DataArray,
    run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    make: object,
    descriptions: tuple[str, ...] | None,
    message: str,
) -> None:
    values = make(crop.values)  # type: ignore[operator]
    path = _write_image(tmp_path / "image.tif", values, crop, descriptions=descriptions)
    out = tmp_path / "p.tif"
    assert _predict(path, out, run) == 1
    err = capsys.readouterr().err
    low, high = _valid_range(crop)
    message = message.format(low=int(low), low_reflectance=np.float32(low) / np.float32(255))
    assert f"image {path} {message}" in err, err
    assert TRAINED_ON.format(low=low, high=high) in err or case == "other band names", err
    assert f"({run / 'model.json'})" in err, err
    assert not out.exists()


def _fingerprints(*paths: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in paths}


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["labels", "{crowns}", "{image}", "{image}", "--crs", "pixel"], "out ({image}) is the"),
        (["predict", "{image}", "{image}", "--run-dir", "{run}"], "out ({image}) is the input"),
        (["predict", "{image}", "{link}", "--run-dir", "{run}"], "out ({link}) is the input"),
        (["predict", "{image}", "{run}/model.json", "--run-dir", "{run}"], "is inside the input"),
        (["mask", "{roads}", "{image}", "{image}"], "out ({image}) is the input like"),
        (["train", "{image}", "{mask}", "{labels}", "--run-dir", "{image}"], "--run-dir ({image})"),
        (["scene", "{osm_folder}", "--osm", "{osm_folder}/image.tif"], "is the input --osm"),
    ],
    ids=["labels", "predict", "predict-hard-link", "predict-in-run", "mask", "train", "scene"],
)
def test_no_command_writes_over_its_input(
    inputs: dict[str, Path],
    run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    message: str,
) -> None:
    link = tmp_path / "link.tif"
    os.link(inputs["image"], link)
    osm_folder = tmp_path / "scene"
    osm_folder.mkdir()
    (osm_folder / "image.tif").write_bytes(Path(sample_path("helsinki_osm")).read_bytes())
    names = {
        **{k: str(v) for k, v in inputs.items()},
        "run": str(run),
        "link": str(link),
        "crowns": str(sample_path("osbs_crowns")),
        "roads": str(sample_path("helsinki_osm")),
        "osm_folder": str(osm_folder),
    }
    watched = [*inputs.values(), run / "model.json", osm_folder / "image.tif"]
    before = _fingerprints(*watched)
    assert main(["geo", *(part.format(**names) for part in command)]) == 1
    err = capsys.readouterr().err
    assert message.format(**names) in err and "would destroy the input" in err, err
    assert _fingerprints(*watched) == before


def test_an_existing_output_needs_overwrite(
    inputs: dict[str, Path], run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.tif"
    out.write_bytes(b"an earlier result")
    assert _predict(inputs["image"], out, run) == 1
    assert "exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert out.read_bytes() == b"an earlier result"
    assert _predict(inputs["image"], out, run, "--overwrite") == 0
    with rasterio.open(out) as src:
        assert src.shape == (64, 64)
    scene = tmp_path / "scene"
    scene.mkdir()
    (scene / "trees.gpkg").write_bytes(b"kept")
    assert main(["geo", "scene", str(scene)]) == 1
    assert f"out/trees.gpkg ({scene / 'trees.gpkg'}) exists" in capsys.readouterr().err
    assert (scene / "trees.gpkg").read_bytes() == b"kept"


def _losses(run: Path) -> list[tuple[str, ...]]:
    with open(run / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [tuple(row.values()) for row in rows if row["metric"].endswith("loss")]


def test_the_same_seed_reproduces_a_run(inputs: dict[str, Path], tmp_path: Path) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    for folder in runs:
        torch.rand(7)  # whatever ran before must not matter
        assert _train(inputs, folder, "--epochs", "2", "--seed", "3") == 0
    assert _losses(runs[0]) and _losses(runs[0]) == _losses(runs[1])
    weights = [
        torch.load(folder / "checkpoints" / "last.pt", weights_only=True)["model"]
        for folder in runs
    ]
    assert weights[0].keys() == weights[1].keys()
    for key, value in weights[0].items():
        assert torch.equal(value, weights[1][key]), key


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["labels", "{crowns}", "{image}", "{out}"], "(--crs EPSG:... on the command line)"),
        (["train", "{image}", "{missing}", "{labels}", "--run-dir", "{out}"], "mask not found: "),
        (
            ["predict", "{image}", "{out}", "--run-dir", "{empty}"],
            "{empty}/model.json not found: {empty} (--run-dir) is not a run folder",
        ),
        (
            ["predict", "{image}", "{out}", "--run-dir", "{damaged}"],
            "{damaged}/model.json is not valid JSON",
        ),
        (
            ["predict", "{image}", "{out}", "--run-dir", "{old}"],
            "{old} holds a segmenter run of format 1; this version of sciml reads format 3",
        ),
        (
            ["predict", "{image}", "{out}", "--run-dir", "{flat}"],
            "{flat} holds a segmenter run of format 2; this version of sciml reads format 3 "
            "(the record now holds the run's SegmenterConfig",
        ),
    ],
    ids=[
        "labels-no-crs",
        "train-missing-mask",
        "predict-not-a-run",
        "predict-damaged-run",
        "predict-older-run",
        "predict-flat-record",
    ],
)
def test_errors_name_options_and_files(
    inputs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    message: str,
) -> None:
    names = {
        **{k: str(v) for k, v in inputs.items()},
        "crowns": str(sample_path("osbs_crowns")),
        "missing": str(tmp_path / "missing.tif"),
        "out": str(tmp_path / "out"),
        "empty": str(tmp_path / "empty"),
        "damaged": str(tmp_path / "damaged"),
        "old": str(tmp_path / "old"),
        "flat": str(tmp_path / "flat"),
    }
    (tmp_path / "empty").mkdir()
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "model.json").write_text('{"in_channels": 3,')  # cut short
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "model.json").write_text('{"in_channels": 3}')  # before format 2
    (tmp_path / "flat").mkdir()  # format 2: the U-Net's arguments beside the options
    flat = '{"kind": "geo-segmenter", "version": 2, "config": {"in_channels": 3, "lr": 0.001}}'
    (tmp_path / "flat" / "model.json").write_text(flat)
    assert main(["geo", *(part.format(**names) for part in command)]) == 1
    assert message.format(**names) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
