"""Grid enumeration and the recommendation: fastest grid that fits, never over the limit."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from sciml.models import UNet
from sciml.spatial_parallel.planner.graph import trace
from sciml.spatial_parallel.planner.plan import (
    grids,
    measure_costs,
    parse_memory,
    plan_graph,
    recommend,
)
from tests.spatial_parallel.planner.test_cost import PROFILE


def test_grids_are_every_ordered_factorisation() -> None:
    found = grids(12)
    # 12 = 2^2 * 3: C(2 + 3, 3) ways for the twos times C(1 + 3, 3) for the three
    assert len(found) == len(set(found)) == 10 * 4
    assert all(math.prod(g) == 12 for g in found)
    assert grids(1) == [(1, 1, 1, 1)]


@pytest.mark.parametrize("world", [0, -2, 2.0, True])
def test_bad_world_is_refused(world: object) -> None:
    with pytest.raises(ValueError, match="world must be a positive integer"):
        grids(world)  # type: ignore[arg-type]


GRAPH = trace(UNet(1, 1, base_channels=2, depth=2), (4, 1, 16, 16, 16))


@pytest.mark.parametrize("fraction", [0.05, 0.2, 0.5, 1.0])
def test_recommendation_never_exceeds_the_memory_limit(fraction: float) -> None:
    everything = plan_graph(GRAPH, world=8, memory=1e12, profile=PROFILE)
    peaks = sorted(e.peak_memory for e in everything.fitting)
    limit = peaks[0] + fraction * (peaks[-1] - peaks[0])
    plan = plan_graph(GRAPH, world=8, memory=limit, profile=PROFILE)
    assert plan.fitting and all(e.peak_memory <= limit for e in plan.fitting)
    assert all(e.peak_memory > limit for e in plan.too_big)
    assert plan.best.step_time == min(e.step_time for e in plan.fitting)
    assert len(plan.fitting) + len(plan.too_big) + len(plan.unsplittable) == len(grids(8))


def test_no_fit_names_the_smallest_need() -> None:
    plan = plan_graph(GRAPH, world=8, memory=1.0, profile=PROFILE)
    with pytest.raises(ValueError, match=r"no grid of 8 ranks fits in .* the smallest, .* needs"):
        plan.mesh  # noqa: B018


def test_grids_that_cannot_split_are_listed_with_the_reason() -> None:
    plan = plan_graph(GRAPH, world=8, memory=1e12, profile=PROFILE)
    reasons = dict(plan.unsplittable)
    # 16 / 8 = 2 per rank at the input, 1 after one pooling: the 3x3x3 halo still fits,
    # but after two poolings 4 voxels cannot cover 8 ranks
    assert "too small for its halo" in reasons[(1, 8, 1, 1)]
    assert reasons[(8, 1, 1, 1)] == "data=8 replicas but the batch has 4 samples"


def test_recommend_returns_a_spatialmesh_keyword_dict() -> None:
    plan = recommend("cosmoflow", (2, 4, 32, 32, 32), world=4, memory="80GiB", profile="a100")
    assert set(plan.mesh) == {"data", "depth", "height", "width"}
    assert math.prod(plan.mesh.values()) == 4
    assert plan.to_dict()["recommended"]["mesh"] == plan.mesh  # type: ignore[index]
    assert "profile a100" in plan.table()


def test_recommend_traces_any_module() -> None:
    model = nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1))
    plan = recommend(model, (1, 1, 8, 8, 8), world=2, memory=2**30, profile=PROFILE)
    assert plan.mesh["data"] == 1  # one sample: the two ranks split space
    assert model[0].weight.dtype == torch.float32


@pytest.mark.parametrize(
    ("text", "expected"),
    [("80GiB", 80 * 2**30), ("40GB", 40e9), ("512 MiB", 512 * 2**20), ("1.5tB", 1.5e12)],
)
def test_parse_memory(text: str, expected: float) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["80", "-1GiB", "0GB", "nanGB", "80 parsecs", "", "1e400GB"])
def test_parse_memory_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="memory must be"):
        parse_memory(text)


@pytest.mark.parametrize("text", ["80Gb", "1.5tb", "512 Mib", "8b"])
def test_parse_memory_refuses_bits(text: str) -> None:
    with pytest.raises(ValueError, match="must be in bytes .* lower-case b means bits"):
        parse_memory(text)


def test_recommend_refuses_bad_options() -> None:
    with pytest.raises(ValueError, match="optimizer must be one of"):
        recommend("unet", (1, 1, 8, 8, 8), world=1, memory=2**30, optimizer="lbfgs")
    with pytest.raises(ValueError, match="unknown model 'resnet'"):
        recommend("resnet", (1, 1, 8, 8, 8), world=1, memory=2**30)
    with pytest.raises(ValueError, match="unknown profile 'v100'"):
        recommend("unet", (1, 1, 8, 8, 8), world=1, profile="v100")
    with pytest.raises(ValueError, match="memory must be a positive number"):
        recommend("unet", (1, 1, 8, 8, 8), world=1, memory=-5.0)


@pytest.mark.parametrize("concurrency", [0, -1, 1.5, True, "2"])
def test_measure_costs_refuses_a_bad_concurrency(concurrency: object) -> None:
    graph = trace(nn.Conv3d(1, 1, 3, padding=1), (1, 1, 4, 4, 4))
    with pytest.raises(ValueError, match="concurrency must be a positive integer"):
        measure_costs(graph, [(1, 1, 1, 1)], concurrency=concurrency)  # type: ignore[arg-type]
