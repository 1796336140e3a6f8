"""The spread predictor and its losses (tiny grids)."""

import numpy as np
import pytest
import scipy.integrate
import scipy.special
import torch

from sciml.weather.spread import SpreadPredictor, expected_gaussian_crps, spread_loss


def _batch(history: int = 1, n: int = 2, k: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    fields = torch.randn(n, history, k, 4, 8, 8, generator=gen)
    return fields, torch.ones(n, history)


def test_untrained_output_is_the_sample_spread_and_positive() -> None:
    model = SpreadPredictor(2, members=3, levels=2, base_channels=4, depth=1)
    fields, available = _batch()
    fields[0, 0, :, 1] = 0.5  # a channel without spread: still > 0
    sd = model(fields, available)
    assert sd.shape == (2, 4, 8, 8)
    assert bool((sd > 0).all())
    sample = fields[:, 0].std(1)
    torch.testing.assert_close(sd, sample + 1e-4)


def test_model_overfits_a_tiny_batch() -> None:
    torch.manual_seed(0)
    model = SpreadPredictor(2, members=3, levels=2, base_channels=8, depth=1)
    fields, available = _batch()
    target = 0.5 + torch.rand(2, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    batch = {"history": fields, "available": available, "spread": target}
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = spread_loss(model, batch, loss="mse").item()
    for _ in range(100):
        optimiser.zero_grad()
        loss = spread_loss(model, batch, loss="mse")
        loss.backward()
        optimiser.step()
    assert loss.item() < 0.12 * first  # an arbitrary per-point target, memorised


def test_temporal_model_uses_the_earlier_lead_times() -> None:
    torch.manual_seed(0)
    model = SpreadPredictor(2, members=3, levels=2, history=2, base_channels=4, depth=1)
    for parameter in model.unet.head.parameters():
        torch.nn.init.normal_(parameter, std=0.1)  # a trained-like head
    fields, available = _batch(history=2)
    changed = fields.clone()
    changed[:, 1] += 1.0
    assert not torch.allclose(model(fields, available), model(changed, available))
    # a missing earlier step is flagged, and the flag enters the model
    missing = available.clone()
    missing[:, 1] = 0
    assert not torch.allclose(model(fields, available), model(fields, missing))


def test_periodic_dims_are_wrapped() -> None:
    """On a lon axis wider than the receptive field, only wrapping links its two edges.

    (Without normalisation: a group norm's statistics span the whole field.)
    """
    fields = torch.randn(1, 1, 3, 4, 8, 32, generator=torch.Generator().manual_seed(0))
    changed = fields.clone()
    changed[..., 0] += 1.0
    available = torch.ones(1, 1)
    for periodic, linked in ((("lon",), True), ((), False)):
        torch.manual_seed(0)
        model = SpreadPredictor(
            2, members=3, levels=2, periodic=periodic, base_channels=4, depth=1, norm="none"
        )
        for parameter in model.unet.head.parameters():
            torch.nn.init.normal_(parameter, std=0.1)
        east = model(fields, available)[..., -1], model(changed, available)[..., -1]
        assert (not torch.equal(*east)) == linked
    with pytest.raises(ValueError, match="periodic dims must be among"):
        SpreadPredictor(2, members=3, levels=2, periodic=("level",))


def test_bad_model_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="members must be an integer >= 2"):
        SpreadPredictor(2, members=1, levels=2)
    model = SpreadPredictor(2, members=3, levels=2, base_channels=4, depth=1)
    fields, available = _batch(k=4)
    with pytest.raises(ValueError, match=r"history must be \(N, T=1, k=3, C=4"):
        model(fields, available)


def test_expected_gaussian_crps_matches_quadrature_and_is_smallest_at_the_target() -> None:
    sigma = np.array([0.3, 1.0, 2.5])
    s = np.array([1.0, 1.0, 0.7])

    def crps(y: float, sd: float) -> float:  # closed-form CRPS of N(0, sd^2) at y, float64
        z = y / sd
        pdf = np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi)
        return sd * (z * (2 * scipy.special.ndtr(z) - 1) + 2 * pdf - 1 / np.sqrt(np.pi))

    # float64 reference: E over Y ~ N(0, s^2) by adaptive quadrature, minus s/sqrt(pi)
    reference = [
        scipy.integrate.quad(
            lambda y, sd=sd, t=t: (
                crps(y, sd) * np.exp(-0.5 * (y / t) ** 2) / (t * np.sqrt(2 * np.pi))
            ),
            -np.inf,
            np.inf,
            epsabs=1e-14,
            epsrel=1e-14,
        )[0]
        - t / np.sqrt(np.pi)
        for sd, t in zip(sigma, s, strict=True)
    ]
    got = expected_gaussian_crps(torch.tensor(sigma), torch.tensor(s)).numpy()
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-12)
    at = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    value = expected_gaussian_crps(at, torch.tensor([1.0], dtype=torch.float64))
    value.backward()
    eps = np.finfo(np.float64).eps  # sqrt(2) * sqrt(2) - 2 rounds to a few eps
    assert abs(value.item()) < 4 * eps and abs(at.grad.item()) < 4 * eps
