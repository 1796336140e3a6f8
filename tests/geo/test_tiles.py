"""Tile layout, tile datasets and stitched inference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyproj
import pytest
import rasterio
import torch

from sciml.geo import RasterGrid
from sciml.geo.rasters import read_image, write_geotiff
from sciml.geo.tiles import SceneTiles, blend_weights, predict_scene, tile_origins
from sciml.geo.trees import IGNORE_INDEX

GRID = RasterGrid.from_bounds((385700.0, 6671900.0, 385800.0, 6671970.0), 0.5, "EPSG:32635")


class ChannelModel(torch.nn.Module):
    """Logits whose sigmoid is the image's first band: stitching must give it back."""

    def __init__(self) -> None:
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.logit(image[:, :1].clamp(1e-4, 1 - 1e-4))


def test_tile_origins_cover_every_pixel() -> None:
    for size, tile, overlap in ((100, 32, 8), (32, 32, 0), (20, 32, 4), (257, 64, 16)):
        starts = tile_origins(size, tile, overlap)
        covered = np.zeros(max(size, tile), bool)
        for start in starts:
            covered[start : start + tile] = True
        assert covered[:size].all() and starts[-1] + tile >= size
        assert all(b - a <= tile - overlap for a, b in zip(starts, starts[1:], strict=False))
    with pytest.raises(ValueError, match="overlap < tile"):
        tile_origins(10, 8, 8)


def test_scene_tiles_skip_and_valid() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (3, 100, 140), dtype=np.uint8)
    mask = np.zeros((100, 140), bool)
    mask[:40, :50] = True
    labels = np.where(mask, rng.integers(0, 2, (100, 140)), IGNORE_INDEX).astype(np.uint8)
    tiles = SceneTiles(image, mask, labels, tile=32, overlap=8)
    assert 0 < len(tiles) < len(tile_origins(100, 32, 8)) * len(tile_origins(140, 32, 8))
    item = tiles[0]
    assert item["image"].shape == (3, 32, 32) and item["image"].max() <= 1.0
    row, col = item["row"], item["col"]
    window = (slice(row, row + 32), slice(col, col + 32))
    np.testing.assert_array_equal(item["valid"][0].numpy(), mask[window])
    np.testing.assert_array_equal(item["label"][0].numpy(), np.where(mask, labels, 0)[window])
    with pytest.raises(ValueError, match="no tile has both mask pixels and data"):
        SceneTiles(image, np.zeros((100, 140), bool), tile=32, overlap=8)
    with pytest.raises(ValueError, match="mask shape"):
        SceneTiles(image, np.ones((10, 10), bool))


def test_predict_scene_stitches_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    values = rng.uniform(0.05, 0.95, (3, *GRID.shape)).astype(np.float32)
    image = GRID.dataarray(values[0], name="b")
    image = image.expand_dims(band=3).copy(data=values)
    mask = np.ones(GRID.shape, bool)
    mask[:, :20] = False
    prob = predict_scene(ChannelModel(), image, mask, tile=64, overlap=16, batch_size=3)
    expected = np.where(mask, values[0], 0.0)
    np.testing.assert_allclose(prob.values, expected, atol=1e-5)
    path = write_geotiff(prob, tmp_path / "prob.tif")
    back = read_image(path)
    assert RasterGrid.from_like(back) == GRID
    assert pyproj.CRS(GRID.crs).to_epsg() == 32635
    np.testing.assert_allclose(back.values[0], prob.values)
    with rasterio.open(path) as src:
        assert src.crs.to_epsg() == 32635 and src.profile["compress"] == "deflate"
    assert blend_weights(16, 4).min() > 0


def test_augmented_tiles_are_the_eight_orientations() -> None:
    rng = np.random.default_rng(2)
    image = rng.uniform(size=(3, 40, 40)).astype(np.float32)
    labels = rng.integers(0, 2, (40, 40)).astype(np.uint8)
    plain = SceneTiles(image, None, labels, tile=16, overlap=4)
    augmented = SceneTiles(image, None, labels, tile=16, overlap=4, augment=True)
    assert len(augmented) == 8 * len(plain)
    base = plain[1]["label"]
    seen = []
    for k in range(8):
        item = augmented[k * len(plain) + 1]
        expected = torch.rot90(base, k % 4, dims=(-2, -1))
        expected = expected.flip(-1) if k >= 4 else expected
        torch.testing.assert_close(item["label"], expected)
        seen.append(item["image"].numpy().tobytes())
    assert len(set(seen)) == 8
    with pytest.raises(IndexError):
        augmented[len(augmented)]


def test_tiles_without_data_are_skipped() -> None:
    image = np.zeros((3, 64, 64), dtype=np.uint8)
    image[:, :32, :32] = 100  # data only in the top-left quarter; 0 = nodata
    tiles = SceneTiles(image, None, None, tile=32, overlap=0, nodata=0)
    assert [(t["row"], t["col"]) for t in (tiles[i] for i in range(len(tiles)))] == [(0, 0)]
    assert "label" not in tiles[0]
