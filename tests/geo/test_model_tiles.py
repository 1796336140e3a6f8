"""Tiles, stitched inference, masked losses and metrics against closed forms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyproj
import pytest
import rasterio
import torch
from torch.nn import functional as F

from sciml.geo import RasterGrid
from sciml.geo.losses import masked_loss
from sciml.geo.model import MaskedUNet
from sciml.geo.rasters import read_image, write_geotiff
from sciml.geo.scores import segmentation_metrics, tree_recall
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
    np.testing.assert_allclose(back.values[0], prob.values)
    with rasterio.open(path) as src:
        assert src.crs.to_epsg() == 32635 and src.profile["compress"] == "deflate"
    assert blend_weights(16, 4).min() > 0


def test_masked_losses_against_closed_forms() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 1, 8, 8)
    target = (torch.rand(2, 1, 8, 8) > 0.5).float()
    valid = (torch.rand(2, 1, 8, 8) > 0.3).float()
    keep = valid.bool()
    bce = F.binary_cross_entropy_with_logits(logits[keep], target[keep])
    torch.testing.assert_close(masked_loss(logits, target, valid), bce)
    p, t = torch.sigmoid(logits[keep]), target[keep]
    tp, fp, fn = (p * t).sum(), (p * (1 - t)).sum(), ((1 - p) * t).sum()
    dice = 1 - (2 * tp + 1) / (2 * tp + fp + fn + 1)
    torch.testing.assert_close(masked_loss(logits, target, valid, kind="dice"), dice)
    tversky = 1 - (tp + 1) / (tp + 0.3 * fp + 0.7 * fn + 1)
    torch.testing.assert_close(masked_loss(logits, target, valid, kind="tversky"), tversky)
    # pixels outside the mask do not change the loss or get gradients
    logits.requires_grad_(True)
    masked_loss(logits, target, valid, kind="bce+dice").backward()
    assert (logits.grad[~keep] == 0).all() and (logits.grad[keep] != 0).any()
    with pytest.raises(ValueError, match="unknown loss kind"):
        masked_loss(logits, target, valid, kind="focal")


def test_metrics_and_tree_recall() -> None:
    pred = np.array([[1, 1, 0, 0], [0, 1, 0, 1]], bool)
    true = np.array([[1, 0, 0, 0], [1, 1, 0, 1]], bool)
    valid = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    m = segmentation_metrics(pred, true, valid)  # tp=2 fp=1 fn=1 tn=3
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (2, 1, 1, 3)
    assert m["accuracy"] == pytest.approx(5 / 7) and m["precision"] == pytest.approx(2 / 3)
    assert m["recall"] == pytest.approx(2 / 3) and m["iou"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx(2 / 3)
    ids = np.array([[1, 1, 2, 2], [3, 3, 3, 0]])
    hits = np.array([[1, 0, 0, 0], [1, 1, 0, 1]], bool)
    assert tree_recall(hits, ids) == pytest.approx(2 / 3)
    assert tree_recall(hits, ids, min_fraction=0.6) == pytest.approx(1 / 3)


def test_masked_unet_shapes_and_mask_coating() -> None:
    model = MaskedUNet(4, base_channels=4, depth=2)
    image, mask = torch.rand(2, 4, 32, 32), torch.zeros(2, 1, 32, 32)
    mask[..., :16] = 1
    logits = model(image, mask)
    assert logits.shape == (2, 1, 32, 32)
    prob = MaskedUNet.probability(logits, mask)
    assert (prob[..., 16:] == 0).all() and (prob[..., :16] > 0).all()
    with pytest.raises(ValueError, match="expected 4 image bands"):
        model(torch.rand(2, 3, 32, 32), mask)
    assert pyproj.CRS(GRID.crs).to_epsg() == 32635


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


def test_pixel_auc_against_pairs() -> None:
    from sciml.geo.scores import pixel_auc

    rng = np.random.default_rng(1)
    prob = rng.integers(0, 5, 60) / 4.0  # ties on purpose
    truth = rng.random(60) < 0.4
    pairs = [
        1.0 if p > q else 0.5 if p == q else 0.0
        for p, t in zip(prob, truth, strict=True)
        if t
        for q, u in zip(prob, truth, strict=True)
        if not u
    ]
    assert pixel_auc(prob, truth) == pytest.approx(np.mean(pairs), rel=1e-12)
    assert pixel_auc(truth.astype(float), truth) == 1.0
    with_nan = np.where(np.arange(60) < 5, np.nan, prob)
    assert pixel_auc(with_nan, truth) == pixel_auc(prob[5:], truth[5:])
    with pytest.raises(ValueError, match="needs tree and background"):
        pixel_auc(prob, np.ones(60, bool))


def test_best_threshold_maximises_f1_over_every_cut() -> None:
    from sciml.geo.scores import best_threshold

    rng = np.random.default_rng(2)
    prob = rng.integers(0, 20, 200) / 19.0
    truth = rng.random(200) < prob
    threshold = best_threshold(prob, truth)
    best = segmentation_metrics(prob > threshold, truth)["f1"]
    for cut in np.r_[-1.0, np.unique(prob)]:
        assert segmentation_metrics(prob > cut, truth)["f1"] <= best
    assert best_threshold(np.array([0.2, 0.9]), np.array([True, True])) < 0.2


def test_scores_refuse_maps_that_do_not_line_up() -> None:
    from sciml.geo.scores import best_threshold, pixel_auc

    pred, truth = np.ones((4, 5), bool), np.zeros((4, 5), bool)
    with pytest.raises(ValueError, match="valid shape \\(1, 5\\) differs"):
        segmentation_metrics(pred, truth, np.ones((1, 5), bool))  # would broadcast
    with pytest.raises(ValueError, match="differs from instances"):
        tree_recall(pred, np.ones((5, 4), int))
    with pytest.raises(ValueError, match="valid shape"):
        pixel_auc(pred.astype(float), truth, np.ones((1, 5), bool))
    with pytest.raises(ValueError, match="differs from truth shape"):
        best_threshold(pred.astype(float), truth.T)
