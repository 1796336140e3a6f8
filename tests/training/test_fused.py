"""FusedModels: K copies trained as one equal K separate runs, for every post-processor family.

Each copy is built after its own seed and trained with its own Adam learning rate;
the separate runs are the same models built after the same seeds. Both strategies are
tested: batched (``vmap``, a GPU's default) and one after another (``loop``, the CPU's).
In float64 the batched and separate computations differ only in the order a batched
(grouped) convolution sums its terms, so after a few Adam steps every weight, buffer and
loss agrees to 1e-10 relative (the bound of the fused-sweep issue; measured: 0 for the
per-point families, about 1e-13 for those with 3x3 convolutions).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from sciml.datasets.sampling import seed_everything
from sciml.spatial_parallel.testing import relative_error
from sciml.training.fused import STRATEGIES, FusedModels
from sciml.weather.postprocess.mixed import MixedPostProcessor
from sciml.weather.postprocess.models import PostProcessor, gaussian_crps_loss
from sciml.weather.postprocess.pooled import PooledPostProcessor

EXACT = 1e-10
#: The strategies a test runs under (``auto`` picks one of them by device).
CALLS = [s for s in STRATEGIES if s != "auto"]
SEEDS = (0, 1, 2)
RATES = (1e-2, 3e-3, 1e-2)
#: A small version of each family (the U-Net has batch norms: running statistics per copy).
FAMILIES: dict[str, Callable[[], nn.Module]] = {
    "mlp": lambda: PostProcessor(2, static=1, hidden=8),
    "unet": lambda: PostProcessor(2, static=1, backbone="unet", base_channels=4, depth=1),
    "mixed": lambda: MixedPostProcessor(2, height=8, width=8, static=1),
    "pooled": lambda: PooledPostProcessor(2, static=1, hidden=8),
}


def _copies(build: Callable[[], nn.Module]) -> list[nn.Module]:
    models = []
    for seed in SEEDS:
        seed_everything(seed)
        models.append(build().double())
    return models


def _batches(step: int) -> dict[str, torch.Tensor]:
    """One batch per copy (leading dim K), different at every step."""
    generator = torch.Generator().manual_seed(100 + step)
    k = len(SEEDS)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(k, *shape, generator=generator, dtype=torch.float64)

    return {
        "members": draw(4, 3, 2, 8, 8),
        "static": draw(4, 1, 8, 8),
        "lead_time": draw(4).abs() * 5,
        "truth": draw(4, 2, 8, 8),
    }


def _train(
    build: Callable[[], nn.Module],
    loss_fn: Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor],
    batches: list[dict[str, torch.Tensor]],
    *,
    dtype: torch.dtype = torch.float64,
    strategy: str = "vmap",
) -> tuple[nn.ModuleList, list[nn.Module], list[tuple[torch.Tensor, torch.Tensor]]]:
    """Adam steps of the copies fused and of the same models separately, one per batch.

    Returns the fused copies, the separate models and each step's losses (fused, separate).
    """
    fused = FusedModels([m.to(dtype) for m in _copies(build)], strategy=strategy)
    separate = [m.to(dtype) for m in _copies(build)]
    fused_optimizer = torch.optim.Adam(fused.param_groups(lr=list(RATES)))
    optimizers = [
        torch.optim.Adam(m.parameters(), lr=lr) for m, lr in zip(separate, RATES, strict=True)
    ]
    losses = []
    for batch in batches:
        batch = {name: value.to(dtype) for name, value in batch.items()}
        fused_losses = fused.losses(loss_fn, batch)
        fused_optimizer.zero_grad()
        fused_losses.sum().backward()
        fused_optimizer.step()
        alone = []
        for k, (model, optimizer) in enumerate(zip(separate, optimizers, strict=True)):
            loss = loss_fn(model, {name: v[k] for name, v in batch.items()})
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            alone.append(loss.detach())
        losses.append((fused_losses.detach(), torch.stack(alone)))
    return fused.copies, separate, losses


@pytest.mark.parametrize("strategy", CALLS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_fused_copies_train_as_their_separate_runs(family: str, strategy: str) -> None:
    copies, separate, losses = _train(
        FAMILIES[family],
        gaussian_crps_loss,
        [_batches(step) for step in range(3)],
        strategy=strategy,
    )
    for step, (fused_losses, alone) in enumerate(losses):
        assert relative_error(fused_losses, alone) < EXACT, step
    for k, (copy, model) in enumerate(zip(copies, separate, strict=True)):
        ours, theirs = copy.state_dict(), model.state_dict()
        assert ours.keys() == theirs.keys()
        for name, value in theirs.items():
            if value.is_floating_point():
                assert relative_error(ours[name], value) < EXACT, (k, name)
            else:  # counters: batch norms' num_batches_tracked
                assert torch.equal(ours[name], value), (k, name)
    # the copies really differ (their seeds) and really moved (their rates)
    first, second = (dict(m.named_parameters()) for m in copies[:2])
    assert any(not torch.equal(first[n], second[n]) for n in first)


@pytest.mark.parametrize("strategy", CALLS)
def test_forward_stacks_each_copys_outputs(strategy: str) -> None:
    fused = FusedModels(_copies(FAMILIES["mlp"]), strategy=strategy)
    batch = _batches(0)
    mu, sigma = fused(batch["members"], batch["static"], batch["lead_time"])
    assert mu.shape == sigma.shape == (3, 4, 2, 8, 8)
    for k, model in enumerate(fused.copies):
        alone = model(batch["members"][k], batch["static"][k], batch["lead_time"][k])
        assert torch.equal(mu[k], alone[0]) and torch.equal(sigma[k], alone[1])


def test_bad_copies_and_inputs_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="at least one copy"):
        FusedModels([])
    mlp, unet = FAMILIES["mlp"](), FAMILIES["unet"]()
    with pytest.raises(ValueError, match="copy 1 .* differs from copy 0"):
        FusedModels([mlp, unet])
    with pytest.raises(ValueError, match="copy 1 .* differs from copy 0"):
        FusedModels([mlp, PostProcessor(2, static=1, hidden=16)])
    with pytest.raises(ValueError, match="copy 1 is the same module"):
        FusedModels([mlp, mlp])
    fused = FusedModels([nn.Linear(3, 2), nn.Linear(3, 2)])
    with pytest.raises(ValueError, match=r"leading dim of 2 .* shape \(3, 3\)"):
        fused(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="lr must be one value or 2"):
        fused.param_groups(lr=[1e-3, 1e-3, 1e-3])
    groups = fused.param_groups(lr=[1e-3, 3e-4], weight_decay=0.1)
    assert [g["lr"] for g in groups] == [1e-3, 3e-4] and {g["weight_decay"] for g in groups} == {
        0.1
    }
    with pytest.raises(TypeError, match="scalar tensor for each copy"):
        fused.losses(lambda model, x: model(x), torch.zeros(2, 5, 3))


@pytest.mark.parametrize("strategy", CALLS)
def test_a_random_op_is_refused(strategy: str) -> None:
    copies = [nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)) for _ in range(2)]
    fused = FusedModels(copies, strategy=strategy)
    with pytest.raises(ValueError, match="random op .* dropout"):
        fused(torch.zeros(2, 4, 3))
    fused.eval()  # no draw: evaluation runs fused
    assert fused(torch.zeros(2, 4, 3)).shape == (2, 4, 3)


@pytest.mark.parametrize("family", ["mlp", "unet"])
def test_float32_fused_copies_are_as_close_to_float64_as_the_separate_runs(family: str) -> None:
    """In float32 the fused and separate runs round differently (the order a batched
    convolution sums in); each is a float32 evaluation of the same float64 run, so the
    fused copies may be no further from it than the separate runs are: their error is
    within 4x the separate runs' (two orders of summation of the same terms have errors
    of one size) plus a few roundings of each weight (where the separate run is exact)."""
    batches = [_batches(step) for step in range(3)]
    runs = {
        dtype: _train(FAMILIES[family], gaussian_crps_loss, batches, dtype=dtype)[:2]
        for dtype in (torch.float64, torch.float32)
    }
    reference = runs[torch.float64][1]
    ours, theirs = runs[torch.float32]
    roundings = 4 * float(torch.finfo(torch.float32).eps)
    for k, truth in enumerate(reference):
        expected = dict(truth.named_parameters())
        for (name, fused_p), (_, separate_p) in zip(
            ours[k].named_parameters(), theirs[k].named_parameters(), strict=True
        ):
            exact = expected[name].detach()
            fused_error = float((fused_p.detach().double() - exact).abs().max())
            separate_error = float((separate_p.detach().double() - exact).abs().max())
            bound = 4 * separate_error + roundings * float(exact.abs().max())
            assert fused_error <= bound, (family, k, name, fused_error, separate_error)


def test_fused_spread_predictors_train_as_their_separate_runs() -> None:
    """The spread predictor (a 3-D U-Net with group norms over lead time, level, lat, lon)."""
    from functools import partial

    from sciml.weather.spread.model import SpreadPredictor, spread_loss

    def build() -> nn.Module:
        return SpreadPredictor(
            2, members=3, ensemble=5, levels=2, history=2, base_channels=4, depth=1
        )

    generator = torch.Generator().manual_seed(7)
    k = len(SEEDS)
    batches = [
        {
            "history": torch.randn(k, 2, 2, 3, 4, 8, 8, generator=generator, dtype=torch.float64),
            "available": torch.ones(k, 2, 2, dtype=torch.float64),
            "spread": torch.rand(k, 2, 4, 8, 8, generator=generator, dtype=torch.float64) + 0.1,
        }
        for _ in range(3)
    ]
    copies, separate, losses = _train(build, partial(spread_loss, loss="crps"), batches)
    for step, (fused_losses, alone) in enumerate(losses):
        assert relative_error(fused_losses, alone) < EXACT, step
    for copy, model in zip(copies, separate, strict=True):
        for name, value in model.state_dict().items():
            assert relative_error(copy.state_dict()[name], value) < EXACT, name


def test_the_copies_run_one_after_another_on_the_cpu_unless_told() -> None:
    copies = [nn.Linear(3, 2) for _ in range(2)]
    assert not FusedModels(copies).batched()  # auto, on the CPU
    assert FusedModels(copies, strategy="vmap").batched()
    assert not FusedModels(copies, strategy="loop").batched()
    with pytest.raises(ValueError, match="strategy must be one of"):
        FusedModels(copies, strategy="grouped")
    # a dict of outputs is stacked per entry, as vmap stacks it
    fused = FusedModels(copies, strategy="loop")
    out = fused.apply_each(lambda m, x: {"y": m(x), "n": (x.sum(), x.mean())}, torch.ones(2, 4, 3))
    assert out["y"].shape == (2, 4, 2) and out["n"][0].shape == (2,)
