"""Small index and weight tensors, built once per device and reused.

Building ``torch.tensor(values, device="cuda")`` in a forward pass copies from
pageable host memory and synchronises with the host. The layers' index lists
and interpolation weights depend only on the geometry, so they are made once
and cached here (callers never modify them).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import torch

#: Cached tensors (each a few hundred values at most).
CACHE_SIZE = 4096


@functools.lru_cache(maxsize=CACHE_SIZE)
def _cached(values: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def constant(
    values: Iterable[float], *, dtype: torch.dtype = torch.int64, device: torch.device
) -> torch.Tensor:
    """A 1-D tensor of ``values`` on ``device``, shared with earlier calls (do not modify it)."""
    cast = int if dtype == torch.int64 else float
    return _cached(tuple(cast(v) for v in values), dtype, device)
