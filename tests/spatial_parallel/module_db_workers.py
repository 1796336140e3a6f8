"""Torch's own module test configurations of the 3-D layers, run through ``parallelize``.

``torch.testing._internal.common_modules.module_db`` holds, for each module,
the constructor arguments and inputs torch tests it with. Every configuration
of a 3-D module (and of the modules ``parallelize`` passes through) whose input
is one ``(N, C, D, H, W)`` batch is compared with one device in float64, or
must be refused by ``parallelize`` or the split blocks with an error naming
the layer or op. Empty batches and tuple outputs are compared forward only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sciml.spatial_parallel import SpatialMesh, parallelize, shard, unshard
from sciml.spatial_parallel.split.op_names import SplitOpError
from sciml.spatial_parallel.testing import compare_parallel

#: Modules of module_db checked besides those named ``...3d``.
ALSO = ("GroupNorm", "LayerNorm", "PReLU", "Softmax", "Softmin", "LogSoftmax")


#: Configurations module_db lacks that once failed: ``(key, class, kwargs, input shape)``.
EXTRA = [
    ("Upsample(size=12)[empty]", nn.Upsample, {"size": 12}, (0, 2, 8, 6, 6)),
    ("Upsample(size=12)", nn.Upsample, {"size": 12}, (2, 2, 8, 6, 6)),
    (
        "BatchNorm3d(momentum=None)[3 steps]",
        nn.BatchNorm3d,
        {"num_features": 2, "momentum": None},
        (2, 2, 6, 5, 4),
    ),
]


def _configurations() -> list[tuple[str, Any, Any, bool, torch.Tensor]]:
    """``(key, class, constructor input, training, input)`` of each 5-D configuration."""
    from torch.testing._internal.common_modules import FunctionInput, module_db

    generator = torch.Generator().manual_seed(0)
    found = [
        (key, cls, FunctionInput(**kwargs), True, torch.randn(shape, generator=generator).double())
        for key, cls, kwargs, shape in EXTRA
    ]
    for info in module_db:
        name = info.module_cls.__name__
        if not (name.endswith("3d") or name in ALSO) or name.startswith("Lazy"):
            continue
        for training in (True, False):
            inputs = info.module_inputs_func(
                info, device="cpu", dtype=torch.float64, requires_grad=False, training=training
            )
            for i, module_input in enumerate(inputs):
                forward = module_input.forward_input
                if forward is None or len(forward.args) != 1 or forward.kwargs:
                    continue
                x = forward.args[0]
                if not isinstance(x, torch.Tensor) or x.dim() != 5:
                    continue
                mode = "train" if training else "eval"
                key = f"{name}[{i}:{mode}]"
                found.append((key, info.module_cls, module_input.constructor_input, training, x))
    return found


def configuration_keys() -> list[str]:
    """The key of every configuration (``Conv3d[2:train]``)."""
    return [key for key, *_ in _configurations()]


def compare_module_db(mesh_kwargs: dict[str, int], keys: list[str]) -> dict[str, str]:
    """``"exact"``, ``"refused: ..."`` or what went wrong, for each configuration of ``keys``."""
    mesh = SpatialMesh(**mesh_kwargs)
    chosen = set(keys)
    out = {}
    for key, cls, constructor, training, x in _configurations():
        if key not in chosen:
            continue
        torch.manual_seed(0)
        module = cls(*constructor.args, **constructor.kwargs).double()
        try:
            if x.shape[0] == 0 or isinstance(module.train(training)(x), tuple):
                out[key] = _forward_only(module, mesh, x)
                continue
            steps = 3 if "steps" in key else 2
            result = compare_parallel(
                module, mesh, tuple(x.shape), train=training, evaluate=training, steps=steps
            )
        except (ValueError, SplitOpError) as err:
            out[key] = f"refused: {err}"
        except Exception as err:  # noqa: BLE001 - reported as what it is
            out[key] = f"{type(err).__name__}: {err}"
        else:
            out[key] = "exact" if result.ok else f"differs: {result.failures()}"
    return out


def _forward_only(module: nn.Module, mesh: SpatialMesh, x: torch.Tensor) -> str:
    """The parallel module's forward pass against the module's, output by output.

    For what :func:`compare_parallel` does not take: empty batches and modules
    that return several tensors (``return_indices=True``).
    """
    expected = module(x)
    got = parallelize(module, mesh)(shard(x, mesh))
    pairs = zip(got, expected, strict=True) if isinstance(expected, tuple) else [(got, expected)]
    for y, reference in pairs:
        y = unshard(y, mesh)
        if tuple(y.shape) != tuple(reference.shape):
            return f"shape {tuple(y.shape)} != {tuple(reference.shape)}"
        if not torch.allclose(y, reference, rtol=1e-12, atol=0):
            return f"differs by {float((y - reference).abs().max())}"
    return "exact"
