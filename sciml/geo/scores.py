"""Scores of tree maps: pixel metrics, per-tree recall, ranking (AUC) and thresholds.

Every function takes numpy arrays (or tensors) and an optional ``valid`` map of
the pixels that count; NaN probabilities (no-data pixels) never count.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["best_threshold", "pixel_auc", "segmentation_metrics", "tree_recall"]


def segmentation_metrics(
    predicted: np.ndarray | torch.Tensor,
    truth: np.ndarray | torch.Tensor,
    valid: np.ndarray | torch.Tensor | None = None,
) -> dict[str, float]:
    """Pixel accuracy, precision, recall, F1 and IoU of boolean maps over ``valid`` pixels.

    Args:
        predicted: Predicted tree pixels (bool or 0/1).
        truth: True tree pixels (bool or 0/1).
        valid: Pixels that count (default: all), e.g. the mask.

    Returns:
        ``accuracy``, ``precision``, ``recall``, ``f1``, ``iou`` (NaN when undefined)
        and the counts ``tp``, ``fp``, ``fn``, ``tn``.
    """
    pred = np.asarray(predicted).astype(bool)
    true = np.asarray(truth).astype(bool)
    if pred.shape != true.shape:
        raise ValueError(f"prediction shape {pred.shape} differs from truth shape {true.shape}")
    keep = np.ones_like(pred) if valid is None else np.asarray(valid).astype(bool)
    if keep.shape != pred.shape:
        raise ValueError(f"valid shape {keep.shape} differs from prediction shape {pred.shape}")
    tp = int((pred & true & keep).sum())
    fp = int((pred & ~true & keep).sum())
    fn = int((~pred & true & keep).sum())
    tn = int((~pred & ~true & keep).sum())

    def ratio(num: int, den: int) -> float:
        return num / den if den else float("nan")

    precision, recall = ratio(tp, tp + fp), ratio(tp, tp + fn)
    return {
        "accuracy": ratio(tp + tn, tp + fp + fn + tn),
        "precision": precision,
        "recall": recall,
        "f1": ratio(2 * tp, 2 * tp + fp + fn),
        "iou": ratio(tp, tp + fp + fn),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
    }


def tree_recall(
    predicted: np.ndarray, instances: np.ndarray, *, min_fraction: float = 0.5
) -> float:
    """Fraction of trees found: a tree counts when ``min_fraction`` of its crown is predicted.

    Args:
        predicted: Predicted tree pixels (bool).
        instances: Crown instance ids (0 = no tree), see :func:`sciml.geo.tree_instances`.
        min_fraction: Share of a crown's pixels that must be predicted.
    """
    if np.shape(predicted) != np.shape(instances):
        raise ValueError(
            f"prediction shape {np.shape(predicted)} differs from instances {np.shape(instances)}"
        )
    ids = np.asarray(instances).ravel()
    hit = np.asarray(predicted).astype(bool).ravel()
    size = np.bincount(ids)
    found = np.bincount(ids, weights=hit, minlength=len(size))
    present = size[1:] > 0
    if not present.any():
        raise ValueError("no tree instance in the map")
    return float(np.mean(found[1:][present] / size[1:][present] >= min_fraction))


def _scored(
    probability: np.ndarray, truth: np.ndarray, valid: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities and truth of the valid, finite pixels, checked to line up."""
    prob = np.asarray(probability, dtype=float)
    true = np.asarray(truth).astype(bool)
    if prob.shape != true.shape:
        raise ValueError(f"probability shape {prob.shape} differs from truth shape {true.shape}")
    keep = np.isfinite(prob)
    if valid is not None:
        valid = np.asarray(valid).astype(bool)
        if valid.shape != prob.shape:
            raise ValueError(f"valid shape {valid.shape} differs from {prob.shape}")
        keep &= valid
    return prob[keep], true[keep]


def pixel_auc(probability: np.ndarray, truth: np.ndarray, valid: np.ndarray | None = None) -> float:
    """Area under the ROC curve: the chance a tree pixel scores above a background pixel.

    Ties count one half (the Mann-Whitney U statistic). 0.5 is chance, 1 a
    perfect ranking; the value does not depend on any threshold.

    Raises:
        ValueError: No tree or no background pixel among the valid ones.
    """
    from scipy.stats import rankdata

    prob, true = _scored(probability, truth, valid)
    trees, background = int(true.sum()), int((~true).sum())
    if trees == 0 or background == 0:
        raise ValueError(f"AUC needs tree and background pixels, got {trees} and {background}")
    ranks = rankdata(prob)
    return float((ranks[true].sum() - trees * (trees + 1) / 2) / (trees * background))


def best_threshold(
    probability: np.ndarray, truth: np.ndarray, valid: np.ndarray | None = None
) -> float:
    """The probability threshold with the highest F1 over the valid pixels.

    Choose it on validation pixels, then apply it elsewhere. A pixel is
    predicted tree when ``probability > threshold``; the threshold lies midway
    between the lowest probability predicted tree and the next lower one.

    Raises:
        ValueError: No tree pixel among the valid ones.
    """
    prob, true = _scored(probability, truth, valid)
    if not true.any():
        raise ValueError("choosing a threshold needs tree pixels among the valid ones")
    order = np.argsort(-prob, kind="stable")
    prob, true = prob[order], true[order]
    last = np.r_[prob[1:] != prob[:-1], True]  # the last pixel of every group of ties
    tp = np.cumsum(true)[last]
    predicted = np.flatnonzero(last) + 1
    f1 = 2 * tp / (predicted + true.sum())
    best = int(np.argmax(f1))
    values = prob[last]
    if best + 1 == len(values):  # every pixel predicted tree
        return float(np.nextafter(values[best], -np.inf))
    return float((values[best] + values[best + 1]) / 2)  # midway to the next lower value
