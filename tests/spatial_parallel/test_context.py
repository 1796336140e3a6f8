"""The parallel context parallelize attaches, found through wrappers; one answer to "replicated"."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sciml.distributed import init_distributed
from sciml.spatial_parallel import (
    SpatialMesh,
    gradient_sync,
    parallel_context,
    parallelize,
)
from sciml.spatial_parallel.replicated import (
    is_replicated,
    is_split_volume,
    mark_replicated,
    output_tensors,
)


def test_parallelize_attaches_one_context_outside_the_model_dict() -> None:
    model = nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.ReLU())
    with init_distributed():
        mesh = SpatialMesh(depth=1)
        pmodel = parallelize(model, mesh)
        context = parallel_context(pmodel)
        assert context is not None and context.mesh is mesh
        assert context.split.mesh is mesh and gradient_sync(pmodel) is context.grad_sync
        assert not [k for k in vars(pmodel) if k.startswith("spatial")]
        assert parallel_context(model) is None
        assert parallel_context(torch.compile(pmodel)) is context
        ddp = nn.parallel.DistributedDataParallel(pmodel)
        assert parallel_context(ddp) is context
        assert parallel_context(torch.compile(ddp)) is context
        with pytest.raises(ValueError, match="already made by parallelize"):
            parallelize(torch.compile(pmodel), mesh)
        with pytest.raises(ValueError, match="was not made by sciml parallelize"):
            gradient_sync(model)


def test_one_answer_to_replicated() -> None:
    block, pooled = torch.zeros(1, 1, 2, 2, 2), mark_replicated(torch.zeros(1, 1, 2, 2, 2))
    assert is_replicated(pooled) and not is_replicated(block) and not is_replicated("x")
    assert is_split_volume(block) and not is_split_volume(pooled)
    assert not is_split_volume(torch.zeros(1, 4))
    assert output_tensors({"a": block, "b": 1}) == [block]
    assert output_tensors((block, pooled)) == [block, pooled] and output_tensors(None) == []
