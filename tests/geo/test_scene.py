"""The synthetic Helsinki scene and the masked-vs-unmasked experiment (smoke size)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import shapely

from sciml.demos.geo import results_table
from sciml.geo.experiment import EXPERIMENT_CONFIG, checkerboard, run_experiment
from sciml.geo.scene import Scene, synthesize_scene
from sciml.geo.trees import tree_labels

CROP = (385700.0, 6672300.0, 386000.0, 6672600.0)  # a park and its streets, UTM 35N


@pytest.fixture(scope="module")
def scene(helsinki_pbf: str) -> Scene:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GDAL, shapely: rings broken by the clip
        return synthesize_scene(helsinki_pbf, resolution=1.0, bounds=CROP, seed=3)


def test_scene_truth_and_inventory(scene: Scene) -> None:
    assert scene.image.shape == (3, 300, 300) and scene.image.dtype == np.uint8
    assert scene.grid.crs.to_epsg() == 32635
    assert {"osm", "park"} <= set(scene.trees["source"])
    inventory = scene.inventory
    assert 0 < len(inventory) < 0.5 * len(scene.trees)  # most trees are not in the inventory
    np.testing.assert_array_equal(scene.truth.values, tree_labels(scene.trees, scene.grid).values)
    np.testing.assert_array_equal(scene.truth.values > 0, scene.instances.values > 0)
    xy = shapely.get_coordinates(inventory.geometry.to_numpy())
    col, row = ~scene.grid.transform @ (xy[:, 0], xy[:, 1])
    assert scene.mask.values[row.astype(int), col.astype(int)].all()
    masked = scene.labels(masked=True).values
    assert set(np.unique(masked[~scene.mask.values])) == {255}
    crowns = scene.truth.values.astype(bool)
    image = scene.image.values.astype(float)
    assert image[1][crowns].mean() < image[1][~crowns].mean()  # crowns are darker


def test_scene_is_deterministic(helsinki_pbf: str, scene: Scene) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = synthesize_scene(helsinki_pbf, resolution=1.0, bounds=CROP, seed=3)
    np.testing.assert_array_equal(again.image.values, scene.image.values)


def test_experiment_smoke(scene: Scene, tmp_path: Path) -> None:
    config = replace(EXPERIMENT_CONFIG, tile=32, overlap=8, base_channels=4)
    results = run_experiment(scene, config.with_loop(epochs=1, batch_size=8), tmp_path, block=100)
    assert set(results) == {"masked", "unmasked"}
    for result in results.values():
        assert 0.0 <= result.tree_recall <= 1.0
        assert 0.0 <= result.in_mask["accuracy"] <= 1.0
        assert result.probability.shape == scene.truth.shape
        assert (tmp_path / result.name / "metrics.csv").exists()
    assert "0.784" in results_table(results)
    board = checkerboard((4, 4), 2)
    assert board.sum() == 8 and board[0, 2] and board[2, 0] and not board[0, 0] | board[2, 2]
