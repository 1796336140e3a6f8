"""The runs that :mod:`sciml.spatial_parallel.testing` compares: one model, every quantity.

:func:`run_quantities` runs a model (single-device or parallel) through a few
forward and backward steps and returns this rank's view of every quantity the
design promises: output blocks, the gathered output, input gradient blocks,
parameter gradients, buffers and an eval-mode output. :func:`reversed_batch_run`
runs the float64 reference again on the batch in reverse order, whose
difference from the first run samples the rounding noise of reordering itself.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.sharding import shard, unshard


def block_of(y: torch.Tensor, mesh: SpatialMesh) -> torch.Tensor:
    """This rank's block of a global output: split in space, or its batch rows only."""
    if y.dim() == 5:
        return shard(y, mesh)
    return y[mesh.block([y.shape[0], 1, 1, 1, 1])[0]]


def output_tensors(y: Any) -> list[torch.Tensor]:
    """The floating tensors of a model's output: itself, or those in its tuples, lists, dicts."""
    return [
        t
        for t in tree_leaves(y)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
    ]


def _named(name: str, values: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{"out0": y}`` for one output; ``{"out0.0": y0, "out0.1": y1}`` for several."""
    if len(values) == 1:
        return {name: values[0]}
    return {f"{name}.{i}": v for i, v in enumerate(values)}


def run_quantities(
    model: nn.Module,
    mesh: SpatialMesh,
    inputs: list[torch.Tensor],
    weights: list[tuple[torch.Tensor, ...]],
    *,
    parallel: bool,
    seed: int,
    eval_input: torch.Tensor | None,
    draw_dtype: torch.dtype = torch.float64,
    device: torch.device | None = None,
) -> tuple[dict[str, torch.Tensor], float]:
    """This rank's view of every compared quantity, and the last step's seconds.

    ``weights`` holds the loss weights of each step, one per output tensor (a model
    may return tuples, lists and dicts of them: the loss sums over all); when it is
    empty they are drawn (from ``seed``, rounded to ``draw_dtype``) and appended. The
    parallel model runs on ``device`` (the CPU by default).
    """
    out: dict[str, torch.Tensor] = {}
    seconds = 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # dropout masks: the same draws on every run
        for step, x in enumerate(inputs):
            if parallel:
                xin = shard(x.to(device), mesh).requires_grad_()
                if torch.distributed.is_initialized():
                    torch.distributed.barrier()
                start = time.perf_counter()
                ys = output_tensors(model(xin))
                loss = sum(
                    (y * block_of(w, mesh).to(y.device)).sum()
                    for y, w in zip(ys, weights[step], strict=True)
                )
                assert isinstance(loss, torch.Tensor)
                loss.backward()
                seconds = time.perf_counter() - start
                assert xin.grad is not None
                whole = [unshard(y.detach(), mesh) for y in ys]
                block, xgrad = [y.detach() for y in ys], xin.grad
            else:
                xin = x.clone().requires_grad_()
                ys = output_tensors(model(xin))
                if len(weights) == step:
                    generator = torch.Generator().manual_seed(seed + 1 + step)
                    weights.append(
                        tuple(
                            torch.randn(y.shape, dtype=draw_dtype, generator=generator).to(x.dtype)
                            for y in ys
                        )
                    )
                loss = sum((y * w).sum() for y, w in zip(ys, weights[step], strict=True))
                assert isinstance(loss, torch.Tensor)
                loss.backward()
                whole = [y.detach() for y in ys]
                block = [block_of(y.detach(), mesh) for y in ys]
                assert xin.grad is not None
                xgrad = shard(xin.grad, mesh)
            out |= _named(f"out{step}", block) | _named(f"unshard{step}", whole)
            out[f"xgrad{step}"] = xgrad
    for name, p in model.named_parameters():
        if p.grad is not None:
            # the parallel gradient is averaged over replicas, as DistributedDataParallel does
            out[f"grad:{name}"] = p.grad if parallel else p.grad / mesh.data
    for name, b in model.named_buffers():
        out[f"buffer:{name}"] = b.detach().clone()
    if eval_input is not None:
        model.eval()
        with torch.no_grad():
            x = shard(eval_input.to(device), mesh) if parallel else eval_input
            ys = output_tensors(model(x))
        out |= _named("eval", [unshard(y, mesh) if parallel else y for y in ys])
    return out, seconds


def reversed_batch_run(
    reference: nn.Module,
    mesh: SpatialMesh,
    inputs: list[torch.Tensor],
    weights: list[tuple[torch.Tensor, ...]],
    seed: int,
) -> dict[str, torch.Tensor]:
    """The parameter gradients and buffers of the float64 reference run on the batch reversed.

    The reference run again on the batch in reverse order (its loss weights too)
    sums the same terms in another order, as the parallel model does: the
    relative difference of each quantity that does not depend on the batch
    order from the first run is a sample of the float64 noise of reordering
    itself. It is the estimate that holds where the float32 probe's cannot: a
    quantity that cancels so much that float32 keeps few of its digits (a weight
    gradient through a batch norm of few values) is out of the probe's linear
    regime. ``reference`` is the float64 model before its first run. Empty for one
    sample or a model that draws random numbers (dropout).
    """
    random = any(
        isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in reference.modules()
    )
    if inputs[0].shape[0] < 2 or random:
        return {}
    reordered, _ = run_quantities(
        reference,
        mesh,
        [x.double().flip(0) for x in inputs],
        [tuple(w.double().flip(0) for w in step) for step in weights],
        parallel=False,
        seed=seed,
        eval_input=None,
    )
    return {k: v for k, v in reordered.items() if k.startswith(("grad:", "buffer:"))}
