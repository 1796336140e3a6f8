"""``sciml geo`` end to end on a small synthetic scene, through ``sciml.cli.main``."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import rasterio

from sciml.cli import main
from sciml.geo import RasterGrid

BOUNDS = ["385840", "6672300", "386000", "6672460"]  # 160 m x 160 m, UTM 35N


@pytest.mark.parametrize("command", ["mask", "labels", "train", "predict", "scene"])
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["geo", command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: sciml geo" in capsys.readouterr().out


def test_scene_mask_labels_train_predict(
    tmp_path: Path, helsinki_pbf: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scene = tmp_path / "scene"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            main(
                [
                    "geo",
                    "scene",
                    str(scene),
                    "--osm",
                    helsinki_pbf,
                    "--resolution",
                    "1",
                    "--bounds",
                    *BOUNDS,
                ]
            )
            == 0
        )
    image = scene / "image.tif"
    mask, labels, prob = tmp_path / "mask.tif", tmp_path / "labels.tif", tmp_path / "prob.tif"
    assert main(["geo", "mask", helsinki_pbf, str(image), str(mask), "--margin", "4"]) == 0
    assert (
        main(
            [
                "geo",
                "labels",
                str(scene / "inventory.gpkg"),
                str(image),
                str(labels),
                "--mask",
                str(mask),
            ]
        )
        == 0
    )
    run = tmp_path / "run"
    assert (
        main(
            [
                "geo",
                "train",
                str(image),
                str(mask),
                str(labels),
                "--run-dir",
                str(run),
                "--epochs",
                "1",
                "--tile",
                "32",
                "--overlap",
                "8",
                "--base-channels",
                "4",
                "--depth",
                "2",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "geo",
                "predict",
                str(image),
                str(prob),
                "--run-dir",
                str(run),
                "--tile",
                "64",
                "--overlap",
                "16",
            ]
        )
        == 0
    )
    grid = RasterGrid.from_like(image)
    for path in (mask, labels, prob, scene / "truth.tif"):
        assert RasterGrid.from_like(path) == grid, path
    with rasterio.open(labels) as src_labels, rasterio.open(mask) as src_mask:
        road = src_mask.read(1).astype(bool)
        values = src_labels.read(1)
    assert road.any() and (values[~road] == 255).all() and set(np.unique(values[road])) <= {0, 1}
    with rasterio.open(prob) as src:
        probability = src.read(1)
    assert probability.dtype == np.float32 and 0 <= probability.min() <= probability.max() <= 1
    assert "tree probability" in capsys.readouterr().out


def test_bad_width_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["geo", "mask", "a.osm", "b.tif", "c.tif", "--width", "wide"])
    assert "width must be 'osm' or metres" in capsys.readouterr().err


def test_mask_classes(
    tmp_path: Path, helsinki_pbf: str, capsys: pytest.CaptureFixture[str]
) -> None:
    like = tmp_path / "like.tif"
    grid = RasterGrid.from_bounds((385600.0, 6672150.0, 386100.0, 6672650.0), 2.0, "EPSG:32635")
    from sciml.geo.rasters import write_geotiff

    write_geotiff(np.zeros(grid.shape, np.uint8), like, like=grid)
    counts = {}
    for classes in (None, "all", "residential,service"):
        extra = [] if classes is None else ["--classes", classes]
        out = str(tmp_path / f"m-{classes}.tif")
        assert main(["geo", "mask", helsinki_pbf, str(like), out, "--width", "5", *extra]) == 0
        counts[classes] = int(capsys.readouterr().out.split("(")[1].split()[0])
    assert counts["residential,service"] < counts[None] < counts["all"]
