"""A tree CSV's ``image_path`` column (DeepForest annotations) must name the image given."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rasterio

from sciml.cli import main
from sciml.datasets import sample_path
from sciml.geo.rasters import read_image
from sciml.geo.trees import load_trees, tree_labels
from tests.file_digests import digests

IMAGE = "OSBS_029.tif"  # the bundled image's file name, as its annotations write it


@pytest.fixture(scope="module")
def boxes() -> pd.DataFrame:
    """The bundled OSBS annotations: 61 boxes in pixels of OSBS_029.tif."""
    frame = pd.read_csv(sample_path("osbs_crowns"))
    assert set(frame["image_path"]) == {IMAGE}
    return frame


def _labels(csv: Path, out: Path) -> int:
    return main(
        ["geo", "labels", str(csv), str(sample_path("osbs_image")), str(out), "--crs", "pixel"]
    )


def test_boxes_of_another_image_are_refused_untouched(
    boxes: pd.DataFrame, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: every box was burned into OSBS_029's labels, exit 0.
    csv, out = tmp_path / "crowns.csv", tmp_path / "labels.tif"
    boxes.assign(image_path="OSBS_030.tif").to_csv(csv, index=False)
    before = digests(csv, sample_path("osbs_image"), out)
    assert _labels(csv, out) == 1
    err = capsys.readouterr().err
    assert f"{csv}: column 'image_path' names 'OSBS_030.tif' (61 rows), not the image given" in err
    assert f"({IMAGE!r}: {sample_path('osbs_image')})" in err
    assert digests(csv, sample_path("osbs_image"), out) == before


def test_a_file_of_several_images_keeps_this_images_rows(
    boxes: pd.DataFrame, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv, out = tmp_path / "crowns.csv", tmp_path / "labels.tif"
    mixed = boxes.copy()
    mixed.loc[40:, "image_path"] = "OSBS_030.tif"
    mixed.loc[:10, "image_path"] = f"/data/neon/{IMAGE}"  # a path: compared by its file name
    mixed.to_csv(csv, index=False)
    with pytest.warns(
        UserWarning, match=r"names 2 image\(s\); using the 40 of 61 rows for 'OSBS_029"
    ):
        assert _labels(csv, out) == 0
    assert "tree labels (40 trees" in capsys.readouterr().out
    own = load_trees(sample_path("osbs_crowns"), crs="pixel", like=sample_path("osbs_image"))
    expected = tree_labels(own.iloc[:40], sample_path("osbs_image")).values
    with rasterio.open(out) as written:
        np.testing.assert_array_equal(written.read(1), expected)


def test_rows_without_an_image_and_an_image_without_a_file_name_are_kept(
    boxes: pd.DataFrame, tmp_path: Path
) -> None:
    csv = tmp_path / "crowns.csv"
    boxes.assign(image_path="").to_csv(csv, index=False)
    assert len(load_trees(csv, crs="pixel", like=sample_path("osbs_image"))) == 61
    boxes.assign(image_path="OSBS_030.tif").to_csv(csv, index=False)
    image = read_image(sample_path("osbs_image"))  # in memory: no file name to compare
    assert len(load_trees(csv, crs="pixel", like=image)) == 61
