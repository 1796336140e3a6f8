"""One optimiser step of :func:`sciml.training.fit`: micro-batches, autocast, global values.

:class:`StepRunner` runs ``loss_fn`` on the micro-batches of one batch (under
bf16 autocast when asked), back-propagates each part's loss weighted by its
share of the batch, and returns the values to log as *global* values:

* with a spatially parallel model (:func:`sciml.spatial_parallel.parallelize`)
  whose output stays split in space (an ``(N, C, D, H, W)`` block), each
  rank's ``loss_fn`` values are its terms of the global value (as
  :func:`~sciml.spatial_parallel.spatial_mean` gives them): the global value is
  their sum over the spatial group;
* with a replicated output (after global pooling and a dense head), every
  spatial rank's value is the global value;
* in both cases (and without a mesh) the value of a step is the mean over the
  data-parallel replicas, as the gradient is.

:meth:`StepRunner.scale` gives the factor that turns a rank's values into
its share of that sum over every rank.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from sciml.distributed import all_reduce_cpu, to_device, world
from sciml.training.batches import split_loss
from sciml.training.config import TrainConfig
from sciml.training.setup import LossFn

if TYPE_CHECKING:
    from sciml.spatial_parallel.mesh import SpatialMesh

__all__ = ["StepRunner", "global_values"]


def _is_split(output: object) -> bool:
    """True if ``output`` holds a 5-D block that is not replicated over the spatial group."""
    from sciml.spatial_parallel.replicated import is_split_volume, output_tensors

    return any(is_split_volume(t) for t in output_tensors(output))


def global_values(values: dict[str, float], scale: float) -> dict[str, float]:
    """The mean over every rank of ``values * scale`` (a collective: every rank calls it)."""
    names = sorted(values)
    packed = torch.tensor([values[name] * scale for name in names], dtype=torch.float64)
    summed = all_reduce_cpu(packed).tolist()
    return {name: value / world()[1] for name, value in zip(names, summed, strict=True)}


class StepRunner:
    """Forward and backward passes of one batch, and the scale of its logged values.

    Args:
        model: The model (a parallel one carries its mesh).
        loss_fn: ``loss_fn(model, batch)``.
        config: Gives ``precision``.
        device: Where batches go.
        mesh: The model's mesh, or ``None``.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        config: TrainConfig,
        device: torch.device,
        mesh: SpatialMesh | None,
    ) -> None:
        """Remember what a step needs (arguments: see the class)."""
        self.model, self.loss_fn, self.device, self.mesh = model, loss_fn, device, mesh
        self.bf16 = config.precision == "bf16"
        self.split: bool | None = None

    @contextlib.contextmanager
    def _watch(self) -> Iterator[None]:
        """Record whether the model's output is split in space while the block runs."""
        if self.mesh is None or self.mesh.spatial_size == 1:
            yield
            return

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self.split = _is_split(output)

        handle = self.model.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    def scale(self) -> float:
        """The factor of this rank's values in the sum over every rank (see the module)."""
        if self.mesh is None or not self.split:
            return 1.0
        return float(self.mesh.spatial_size)

    def loss(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """``loss_fn`` on one batch (under autocast when asked): the loss and its values."""
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)
        with self._watch(), autocast:
            return split_loss(self.loss_fn(self.model, to_device(batch, self.device)))

    def backward(
        self, parts: Sequence[Any], sizes: Sequence[int], *, where: str
    ) -> dict[str, float]:
        """Back-propagate every part of a batch; the batch's values (weighted by size).

        Raises:
            FloatingPointError: If a loss is not finite (``where`` names the step).
        """
        total = sum(sizes)
        values: dict[str, float] = {}
        for part, size in zip(parts, sizes, strict=True):
            loss, part_values = self.loss(part)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"loss is {float(loss.detach())} {where}; lower the learning rate or check "
                    "the inputs"
                )
            (loss * (size / total) if len(parts) > 1 else loss).backward()
            for name, value in part_values.items():
                values[name] = values.get(name, 0.0) + value * size / total
        return values
