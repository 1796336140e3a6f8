"""Torch CRPS losses: same values as the metrics, correct gradients."""

import numpy as np
import pytest
import scoringrules as sr
import torch

from sciml.weather.metrics.kernels import crps_ensemble_array, crps_gaussian_array
from sciml.weather.metrics.losses import (
    crps_ensemble_loss,
    crps_gaussian_loss,
    twcrps_ensemble_loss,
)


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ens = torch.randn(6, 5, 8, generator=gen, dtype=torch.float64)  # (time, lat, member)
    obs = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    return obs, ens


@pytest.mark.parametrize("fair", [False, True])
def test_crps_loss_matches_numpy_metric(
    data: tuple[torch.Tensor, torch.Tensor], fair: bool
) -> None:
    obs, ens = data
    got = crps_ensemble_loss(obs, ens, fair=fair, reduction="none")
    ref = crps_ensemble_array(obs.numpy(), ens.numpy(), fair=fair)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10)
    moved = crps_ensemble_loss(obs, ens.movedim(-1, 0), member_dim=0, fair=fair)
    assert float(moved) == pytest.approx(ref.mean(), rel=1e-12)
    # float32: against the float64 value of the same (rounded) inputs, within the rounding
    # of O(M) float32 operations on values of the inputs' magnitude
    obs32, ens32 = obs.float(), ens.float()
    f32 = crps_ensemble_loss(obs32, ens32, fair=fair, reduction="none").double().numpy()
    ref32 = crps_ensemble_array(obs32.double().numpy(), ens32.double().numpy(), fair=fair)
    members = ens.shape[-1]
    scale = ens32.abs().amax(-1).double().numpy() + obs32.abs().double().numpy()
    bound = 4 * members * np.finfo(np.float32).eps * scale
    assert np.all(np.abs(f32 - ref32) <= bound)


def test_twcrps_and_gaussian_losses_match_references(
    data: tuple[torch.Tensor, torch.Tensor],
) -> None:
    obs, ens = data
    got = twcrps_ensemble_loss(obs, ens, a=0.2, reduction="none")
    np.testing.assert_allclose(
        got.numpy(), sr.twcrps_ensemble(obs.numpy(), ens.numpy(), 0.2), rtol=1e-10, atol=1e-14
    )
    mu, sigma = ens.mean(-1), ens.std(-1)
    got = crps_gaussian_loss(obs, mu, sigma, reduction="sum")
    ref = crps_gaussian_array(obs.numpy(), mu.numpy(), sigma.numpy()).sum()
    assert float(got) == pytest.approx(ref, rel=1e-12)


def test_weights_and_reductions(data: tuple[torch.Tensor, torch.Tensor]) -> None:
    obs, ens = data
    per_point = crps_ensemble_loss(obs, ens, reduction="none")
    w = torch.linspace(0.5, 1.5, 5, dtype=torch.float64)
    weighted = crps_ensemble_loss(obs, ens, weights=w)
    expected = (per_point * w).sum() / (w.expand_as(per_point)).sum()
    assert float(weighted) == pytest.approx(float(expected), rel=1e-12)
    assert float(crps_ensemble_loss(obs, ens, reduction="sum")) == pytest.approx(
        float(per_point.sum())
    )
    with pytest.raises(ValueError, match="reduction"):
        crps_ensemble_loss(obs, ens, reduction="max")
    with pytest.raises(ValueError, match="shape"):
        crps_ensemble_loss(obs[:2], ens)
    with pytest.raises(ValueError, match="at least 2 member"):
        crps_ensemble_loss(obs, ens[..., :1], fair=True)
    with pytest.raises(ValueError, match="at least 1 member"):
        crps_ensemble_loss(obs, ens[..., :0])


def test_bad_parameters_and_weights_are_errors(data: tuple[torch.Tensor, torch.Tensor]) -> None:
    obs, ens = data
    mu, sigma = ens.mean(-1), ens.std(-1)
    for bad in (-sigma, sigma * 0):
        with pytest.raises(ValueError, match="sigma must be > 0"):
            crps_gaussian_loss(obs, mu, bad)
    with pytest.raises(ValueError, match="sigma must be > 0"):
        crps_gaussian_loss(obs, mu, torch.tensor(-1.0, dtype=torch.float64))
    # a per-time mu would silently enlarge a per-point target: refused
    with pytest.raises(ValueError, match="without enlarging"):
        crps_gaussian_loss(obs[0], mu, sigma)
    with pytest.raises(ValueError, match="without enlarging"):
        crps_gaussian_loss(obs, mu[:, :2], sigma)
    # a scalar sigma is fine
    got = crps_gaussian_loss(obs, mu, torch.tensor(0.7, dtype=torch.float64), reduction="none")
    np.testing.assert_allclose(got, crps_gaussian_array(obs.numpy(), mu.numpy(), 0.7), rtol=1e-12)
    w = torch.ones(5, dtype=torch.float64)
    for bad in (-w, w * float("nan"), w * float("inf")):
        with pytest.raises(ValueError, match="finite and non-negative"):
            crps_ensemble_loss(obs, ens, weights=bad)
    with pytest.raises(ValueError, match="all zero"):
        crps_ensemble_loss(obs, ens, weights=w * 0)
    with pytest.raises(ValueError, match="do not broadcast"):
        crps_ensemble_loss(obs, ens, weights=torch.ones(3))


@pytest.mark.parametrize("fair", [False, True])
def test_crps_loss_gradcheck(data: tuple[torch.Tensor, torch.Tensor], fair: bool) -> None:
    obs, ens = data
    obs = obs[:2, :3].clone().requires_grad_()
    ens = ens[:2, :3].clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda o, e: crps_ensemble_loss(o, e, fair=fair, reduction="none"), (obs, ens)
    )
    assert torch.autograd.gradcheck(
        lambda o, e: twcrps_ensemble_loss(o, e, a=-0.5, b=2.0, reduction="none"), (obs, ens)
    )


def test_gaussian_loss_gradcheck(data: tuple[torch.Tensor, torch.Tensor]) -> None:
    obs, ens = data
    obs = obs[:2].clone().requires_grad_()
    mu = ens[:2, :, 0].clone().requires_grad_()
    sigma = (ens[:2, :, 1].abs() + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda o, m, s: crps_gaussian_loss(o, m, s, reduction="none"), (obs, mu, sigma)
    )


def test_crps_gradient_closed_form(data: tuple[torch.Tensor, torch.Tensor]) -> None:
    """dCRPS/dy = (2 F(y) - 1) for the ensemble CDF F (no ties)."""
    obs, ens = data
    obs = obs.clone().requires_grad_()
    crps_ensemble_loss(obs, ens, reduction="sum").backward()
    cdf = (ens < obs.detach().unsqueeze(-1)).double().mean(-1)
    torch.testing.assert_close(obs.grad, 2 * cdf - 1)
