"""Segmentation scores against closed forms and brute force."""

from __future__ import annotations

import numpy as np
import pytest

from sciml.geo.scores import segmentation_metrics, tree_recall


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
