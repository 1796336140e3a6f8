"""Torch CRPS losses: same values as the metrics, correct gradients."""

import numpy as np
import pytest
import scoringrules as sr
import torch

from sciml.weather.kernels import crps_ensemble_array, crps_gaussian_array
from sciml.weather.losses import crps_ensemble_loss, crps_gaussian_loss, twcrps_ensemble_loss


@pytest.fixture
def data():
    gen = torch.Generator().manual_seed(0)
    ens = torch.randn(6, 5, 8, generator=gen, dtype=torch.float64)  # (time, lat, member)
    obs = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    return obs, ens


@pytest.mark.parametrize("fair", [False, True])
def test_crps_loss_matches_numpy_metric(data, fair):
    obs, ens = data
    got = crps_ensemble_loss(obs, ens, fair=fair, reduction="none")
    ref = crps_ensemble_array(obs.numpy(), ens.numpy(), fair=fair)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10)
    moved = crps_ensemble_loss(obs, ens.movedim(-1, 0), member_dim=0, fair=fair)
    assert float(moved) == pytest.approx(ref.mean(), rel=1e-12)
    f32 = crps_ensemble_loss(obs.float(), ens.float(), fair=fair, reduction="none")
    np.testing.assert_allclose(f32.numpy(), ref, rtol=1e-4, atol=1e-6)


def test_twcrps_and_gaussian_losses_match_references(data):
    obs, ens = data
    got = twcrps_ensemble_loss(obs, ens, a=0.2, reduction="none")
    np.testing.assert_allclose(
        got.numpy(), sr.twcrps_ensemble(obs.numpy(), ens.numpy(), 0.2), rtol=1e-10, atol=1e-14
    )
    mu, sigma = ens.mean(-1), ens.std(-1)
    got = crps_gaussian_loss(obs, mu, sigma, reduction="sum")
    ref = crps_gaussian_array(obs.numpy(), mu.numpy(), sigma.numpy()).sum()
    assert float(got) == pytest.approx(ref, rel=1e-12)


def test_weights_and_reductions(data):
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
    with pytest.raises(ValueError, match="two members"):
        crps_ensemble_loss(obs, ens[..., :1], fair=True)


@pytest.mark.parametrize("fair", [False, True])
def test_crps_loss_gradcheck(data, fair):
    obs, ens = data
    obs = obs[:2, :3].clone().requires_grad_()
    ens = ens[:2, :3].clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda o, e: crps_ensemble_loss(o, e, fair=fair, reduction="none"), (obs, ens)
    )
    assert torch.autograd.gradcheck(
        lambda o, e: twcrps_ensemble_loss(o, e, a=-0.5, b=2.0, reduction="none"), (obs, ens)
    )


def test_gaussian_loss_gradcheck(data):
    obs, ens = data
    obs = obs[:2].clone().requires_grad_()
    mu = ens[:2, :, 0].clone().requires_grad_()
    sigma = (ens[:2, :, 1].abs() + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda o, m, s: crps_gaussian_loss(o, m, s, reduction="none"), (obs, mu, sigma)
    )


def test_crps_gradient_closed_form(data):
    """dCRPS/dy = (2 F(y) - 1) for the ensemble CDF F (no ties)."""
    obs, ens = data
    obs = obs.clone().requires_grad_()
    crps_ensemble_loss(obs, ens, reduction="sum").backward()
    cdf = (ens < obs.detach().unsqueeze(-1)).double().mean(-1)
    torch.testing.assert_close(obs.grad, 2 * cdf - 1)
