"""Index and weight tensors are built once per values, dtype and device."""

from __future__ import annotations

import numpy as np
import torch

from sciml.spatial_parallel.constants import constant


def test_the_same_values_give_the_same_tensor() -> None:
    cpu = torch.device("cpu")
    first = constant((0, 2, 1), device=cpu)
    assert constant(np.array([0, 2, 1]), device=cpu) is first
    assert first.dtype == torch.int64 and first.tolist() == [0, 2, 1]
    weights = constant([0.25, 0.5], dtype=torch.float32, device=cpu)
    assert weights is constant((0.25, 0.5), dtype=torch.float32, device=cpu)
    assert constant((0.25, 0.5), dtype=torch.float64, device=cpu) is not weights
