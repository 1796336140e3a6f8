"""Masked vs unmasked training on a synthetic scene, judged on the complete truth.

The scene is split into a checkerboard of square blocks: training tiles come
from one colour, evaluation from the other. The masked model learns from the
street-tree inventory inside the road mask only (mask as input channel, loss
inside the mask); the unmasked baseline treats every pixel outside the
inventory crowns as background. Both predict every tree with an all-ones
mask, and are scored on the complete truth of the evaluation blocks.

On SIGTERM/SIGUSR1 the training run in progress checkpoints and
:func:`run_experiment` raises :class:`ExperimentInterrupted`; calling it again
with the same ``run_dir`` resumes (a finished run is not trained again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import ConcatDataset

from sciml.distributed import torch_threads
from sciml.geo.config import SegmenterConfig
from sciml.geo.scene import Scene
from sciml.geo.scores import segmentation_metrics, tree_recall
from sciml.geo.tiles import SceneTiles, predict_scene
from sciml.geo.training import load_segmenter, train_segmenter
from sciml.training.config import TrainConfig

#: Accuracy inside the mask reached by the reference study (Hamburg, 0.2 m).
REFERENCE_ACCURACY = 0.784


class ExperimentInterrupted(RuntimeError):
    """A training run of the experiment stopped on a signal after checkpointing.

    Attributes:
        name: ``"masked"`` or ``"unmasked"``.
        result: The interrupted :class:`sciml.training.TrainResult`.
        status: ``"interrupted"``.
        checkpoint: The checkpoint the rerun resumes from.
    """

    def __init__(self, name: str, result: Any) -> None:
        """Build the message from the model ``name`` and its interrupted ``result``."""
        super().__init__(
            f"training of the {name} model was interrupted by a signal (checkpoint "
            f"{result.checkpoint}); run the experiment again with the same run_dir to resume"
        )
        self.name, self.result = name, result
        self.status, self.checkpoint = result.status, result.checkpoint


@dataclass
class ExperimentResult:
    """Scores of one trained model on the evaluation blocks.

    Attributes:
        name: ``"masked"`` or ``"unmasked"``.
        tree_recall: Share of all trees (complete truth) with half their crown found.
        truth: Pixel metrics against the complete truth (all trees).
        in_mask: Pixel metrics inside the road mask against the inventory labels
            (the masked model is given the road mask, the unmasked one ones).
        probability: Predicted tree probability of the whole scene (mask of ones).
        model: The trained model.
    """

    name: str
    tree_recall: float
    truth: dict[str, float]
    in_mask: dict[str, float]
    probability: Any
    model: torch.nn.Module


def checkerboard(shape: tuple[int, int], block: int) -> np.ndarray:
    """Bool map, True on the evaluation blocks (``(i + j) % 2 == 1``) of side ``block``."""
    rows, cols = np.indices(shape) // block
    return (rows + cols) % 2 == 1


def _training_tiles(
    scene: Scene, labels: np.ndarray, mask: np.ndarray, *, block: int, config: SegmenterConfig
) -> ConcatDataset:
    image = scene.image.values
    height, width = mask.shape
    parts = []
    for row in range(0, height - block + 1, block):
        for col in range(0, width - block + 1, block):
            if (row // block + col // block) % 2:
                continue  # evaluation block
            window = (slice(row, row + block), slice(col, col + block))
            if not mask[window].any():
                continue
            parts.append(
                SceneTiles(
                    image[(slice(None), *window)],
                    mask[window],
                    labels[window],
                    tile=config.tile,
                    overlap=config.overlap,
                    augment=True,
                )
            )
    return ConcatDataset(parts)


#: The experiment's training: 64 px tiles overlapping by 16, 8 epochs of 16 tiles a step.
EXPERIMENT_CONFIG = SegmenterConfig(
    train=TrainConfig(epochs=8, batch_size=16, tensorboard=False), lr=2e-3, tile=64, overlap=16
)


def run_experiment(
    scene: Scene,
    config: SegmenterConfig,
    run_dir: str | Path,
    *,
    block: int = 256,
    threads: int | None = 1,
) -> dict[str, ExperimentResult]:
    """Train the masked and the unmasked model and score both on the evaluation blocks.

    Args:
        scene: The synthetic scene.
        config: The masked model's training (e.g. :data:`EXPERIMENT_CONFIG`); the
            unmasked baseline trains the same with ``unmasked=True``. Tiles are augmented
            with their 8 dihedral orientations.
        run_dir: Folder for the two training runs (``masked/``, ``unmasked/``).
        block: Side of the checkerboard blocks (pixels).
        threads: Torch threads while training and predicting (``None``: unchanged).

    Returns:
        ``{"masked": ..., "unmasked": ...}`` :class:`ExperimentResult`.

    Raises:
        ValueError: ``config`` is the unmasked baseline's (it trains both).
        ExperimentInterrupted: A signal stopped a training run (checkpointed).
        sciml.geo.training.RunConfigError: ``run_dir`` holds runs of other options.
    """
    if config.unmasked:
        raise ValueError(
            "run_experiment trains the masked model and the unmasked baseline: pass the "
            "masked model's config (unmasked=False)"
        )
    run_dir = Path(run_dir)
    road = scene.mask.values
    evaluation = checkerboard(road.shape, block)
    truth = scene.truth.values.astype(bool)
    instances = np.where(evaluation, scene.instances.values, 0)
    inventory = scene.labels(masked=True).values
    source: dict[str, str | int] = {"scene": str(scene.grid), "block": block}
    tile, overlap = 4 * config.tile, config.tile // 2
    results = {}
    with torch_threads(threads):
        for name, masked in (("masked", True), ("unmasked", False)):
            labels = inventory if masked else scene.labels(masked=False).values
            train_mask = road if masked else np.ones_like(road)
            dataset = _training_tiles(scene, labels, train_mask, block=block, config=config)
            run = replace(config, unmasked=not masked)
            trained = train_segmenter(dataset, run, run_dir / name, source=source)
            if trained.status == "interrupted":
                raise ExperimentInterrupted(name, trained)
            model = load_segmenter(run_dir / name)
            everywhere = predict_scene(model, scene.image, None, tile=tile, overlap=overlap)
            on_roads = (  # each model sees the mask channel it was trained with
                predict_scene(model, scene.image, road, tile=tile, overlap=overlap)
                if masked
                else everywhere
            )
            found = everywhere.values > 0.5
            results[name] = ExperimentResult(
                name=name,
                tree_recall=tree_recall(found, instances),
                truth=segmentation_metrics(found, truth, evaluation),
                in_mask=segmentation_metrics(
                    on_roads.values > 0.5, inventory == 1, road & evaluation
                ),
                probability=everywhere,
                model=model,
            )
    return results


#: OSBS_029.tif columns: crown labels are "known" left of ``OSBS_KNOWN``; the
#: model trains left of ``OSBS_TRAIN`` and the strip between chooses the threshold.
OSBS_KNOWN, OSBS_TRAIN = 200, 150


@dataclass
class OsbsResult:
    """Held-out scores of the masked U-Net on the real OSBS orthophoto.

    Attributes:
        probability: Tree probability of the whole image (NaN on no-data pixels).
        labels: Training labels (255 outside the training columns).
        truth: All 61 crown boxes as a bool map.
        threshold: Probability threshold with the best F1 on the validation strip.
        auc: Pixel AUC on the right half (threshold-free; 0.5 is chance).
        test: Pixel metrics on the right half at ``threshold``.
        all_trees: The same metrics for predicting every pixel tree (the baseline).
    """

    probability: Any
    labels: Any
    truth: np.ndarray
    threshold: float
    auc: float
    test: dict[str, float]
    all_trees: dict[str, float]


def osbs_experiment(
    run_dir: str | Path,
    *,
    epochs: int = 4,
    base_channels: int = 8,
    seed: int = 0,
    threads: int | None = 1,
) -> OsbsResult:
    """Train on the left of ``OSBS_029.tif``, pick the threshold on a strip, score the right half.

    Labels (the 61 crown boxes) count as known on the left ``OSBS_KNOWN``
    columns only: the model trains on the first ``OSBS_TRAIN`` of them, the
    threshold is chosen on the rest (best F1), and the right half is the test.

    Raises:
        ExperimentInterrupted: A signal stopped training (checkpointed; rerun resumes).
    """
    from sciml.datasets import sample_path
    from sciml.geo.rasters import read_image
    from sciml.geo.scores import best_threshold, pixel_auc
    from sciml.geo.trees import load_trees, tree_labels

    image = read_image(sample_path("osbs_image"))
    trees = load_trees(sample_path("osbs_crowns"), crs="pixel", like=image)
    truth = tree_labels(trees, image).values.astype(bool)
    columns = np.indices(truth.shape)[1]
    train, test = columns < OSBS_TRAIN, columns >= OSBS_KNOWN
    labels = tree_labels(trees, image, mask=train)
    loop = TrainConfig(epochs=epochs, batch_size=8, seed=seed, tensorboard=False)
    config = SegmenterConfig(train=loop, tile=64, overlap=16, base_channels=base_channels)
    dataset = SceneTiles(
        image, train, labels, tile=config.tile, overlap=config.overlap, augment=True
    )
    with torch_threads(threads):
        trained = train_segmenter(dataset, config, run_dir, source={"study": "osbs"})
        if trained.status == "interrupted":
            raise ExperimentInterrupted("OSBS", trained)
        model = load_segmenter(run_dir)
        probability = predict_scene(model, image, None, tile=128, overlap=32)
    prob = probability.values
    threshold = best_threshold(prob, truth, ~train & ~test)
    finite = np.isfinite(prob)
    return OsbsResult(
        probability=probability,
        labels=labels,
        truth=truth,
        threshold=threshold,
        auc=pixel_auc(prob, truth, test),
        test=segmentation_metrics(prob > threshold, truth, test & finite),
        all_trees=segmentation_metrics(np.ones_like(truth), truth, test & finite),
    )
