"""Rank functions that record what the parallel layers send (module level, for spawn)."""

from __future__ import annotations

import torch
from torch import nn

from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.audit import CommLog
from sciml.spatial_parallel.testing import relative_error


def halo_model() -> nn.Module:
    """Convolutions and pooling whose halos need edges, corners and a circular wrap."""
    return nn.Sequential(
        nn.Conv3d(2, 3, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool3d(3, stride=2, padding=1),
        nn.Conv3d(3, 2, 3, padding=1, padding_mode="circular"),
    )


def posted_messages(mesh_kwargs: dict[str, int]) -> dict[str, CommLog]:
    """The messages of one forward and backward pass, with and without overlap.

    Also a U-Net, whose skip connections leave several exchanges in flight in the
    backward pass (their order must still agree between ranks).
    """
    from sciml.models import UNet

    mesh = SpatialMesh(**mesh_kwargs)
    logs = {}
    models = [("stack", halo_model, (2, 2, 7, 6, 5))]
    models.append(
        (
            "unet",
            lambda: UNet(dims=3, in_channels=2, out_channels=1, depth=1, base_channels=4),
            (1, 2, 8, 8, 4),
        )
    )
    for name, build, shape in models:
        for overlap in (True, False):
            torch.manual_seed(0)
            pmodel = parallelize(build(), mesh, overlap=overlap)
            x = shard(torch.randn(shape), mesh).requires_grad_()
            with CommLog() as log:
                pmodel(x).square().sum().backward()
            logs[f"{name} overlap={overlap}"] = log
    return logs


def head_model() -> nn.Module:
    """Every kind of layer that needs a global shape: windows, norms, upsampling, a head."""
    return nn.Sequential(
        nn.Conv3d(2, 4, 3, padding=1),
        nn.BatchNorm3d(4),
        nn.ReLU(),
        nn.MaxPool3d(2),
        nn.Conv3d(4, 4, 3, padding=1),
        nn.GroupNorm(2, 4),
        nn.Upsample(scale_factor=2, mode="trilinear"),
        nn.Dropout3d(0.5),
        nn.Conv3d(4, 2, 3, padding=1),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(2, 3),
        nn.Dropout(0.5),
    )


def forward_collectives(mesh_kwargs: dict[str, int]) -> dict[str, list[str]]:
    """The collectives of one forward pass for each way the model learns its input's shape."""
    mesh = SpatialMesh(**mesh_kwargs)
    torch.manual_seed(0)
    model = head_model()
    marked = shard(torch.randn(2, 2, 8, 6, 6), mesh)
    runs = {
        "marked": (parallelize(model, mesh), marked),
        "declared": (parallelize(model, mesh, input_shape=(8, 6, 6)), marked.clone()),
        "fallback": (parallelize(model, mesh), marked.clone()),
        "layer_alone": (parallelize(model, mesh)[0], marked),
    }
    names = {}
    for key, (net, x) in runs.items():
        with CommLog() as log:
            net(x)
        names[key] = [call.name for call in log.collectives]
    return names


class DataDependent(nn.Module):
    """Applies its convolution once or twice depending on the data (cannot run on meta)."""

    def __init__(self) -> None:
        """One convolution."""
        super().__init__()
        self.conv = nn.Conv3d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution, again when the first result's mean is positive."""
        y = self.conv(x)
        local = y.sum().reshape(1)
        if torch.distributed.is_initialized():  # the same decision on every rank
            torch.distributed.all_reduce(local)
        return self.conv(y) if local.item() > 0 else y


def untraceable(mesh_kwargs: dict[str, int]) -> dict[str, object]:
    """A model that the shape trace cannot run: warned once, then one collective per layer."""
    import warnings

    from sciml.spatial_parallel import unshard

    mesh = SpatialMesh(**mesh_kwargs)
    torch.manual_seed(0)
    model = DataDependent()
    pmodel = parallelize(model, mesh)
    x = torch.randn(1, 2, 6, 4, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = unshard(pmodel(shard(x, mesh)), mesh)
    with CommLog() as log:
        pmodel(shard(x, mesh))
    return {
        "warnings": [str(w.message) for w in caught],
        "error": relative_error(y, model(x)),
        "collectives": len(log.collectives),
        "calls": 2 if float(model.conv(x).sum()) > 0 else 1,
    }


def exchanges_per_step(
    mesh_kwargs: dict[str, int], model: nn.Module, shape: tuple[int, ...]
) -> int:
    """Halo exchanges (``batch_isend_irecv`` calls) of one training step on this rank.

    The model's input needs no gradient, as in training.
    """
    torch.manual_seed(0)
    mesh = SpatialMesh(**mesh_kwargs)
    pmodel = parallelize(model, mesh)
    x = shard(torch.randn(shape), mesh)
    with CommLog() as log:
        pmodel(x).square().sum().backward()
    return len(log.batches)
