"""Deep post-processors: the raw ensemble's Gaussian at the start, they learn, inputs checked."""

import math

import pytest
import torch

from sciml.weather.postprocess.mixed import MixedPostProcessor
from sciml.weather.postprocess.models import (
    SIGMA_MIN,
    GaussianPostProcessor,
    PointwiseConv2d,
    PostProcessor,
    gaussian_crps_loss,
    member_mean_sd,
    residual_gaussian,
)
from sciml.weather.postprocess.pooled import PooledPostProcessor

MODELS = ("mlp", "unet", "mixed", "pooled")


def _model(name: str, *, lead_time: bool = True) -> GaussianPostProcessor:
    """A small model of each kind for 2 channels, 1 static field, an 8 x 8 grid."""
    if name == "mixed":
        return MixedPostProcessor(
            2, height=8, width=8, static=1, features=8, base_channels=8, depth=1, periodic=True
        )
    if name == "pooled":
        return PooledPostProcessor(2, static=1, hidden=16, periodic=True)
    return PostProcessor(2, static=1, backbone=name, base_channels=8, depth=1, lead_time=lead_time)  # type: ignore[arg-type]


def _batch(generator: torch.Generator) -> dict[str, torch.Tensor]:
    members = torch.randn(4, 5, 2, 8, 8, generator=generator)
    # a systematic error to correct: the truth is 1.5 x the mean, shifted
    truth = 1.5 * members.mean(1) + 0.5 + 0.3 * torch.randn(4, 2, 8, 8, generator=generator)
    return {
        "members": members,
        "truth": truth,
        "static": torch.randn(4, 1, 8, 8, generator=generator),
        "lead_time": torch.tensor([0.0, 1.0, 2.5, 6.0]),
    }


def _train(model: GaussianPostProcessor, batch: dict[str, torch.Tensor], steps: int) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = gaussian_crps_loss(model, batch)
        loss.backward()
        optimizer.step()
    return loss.item()


@pytest.mark.parametrize("name", MODELS)
def test_starts_from_the_raw_ensemble_and_overfits_a_batch(name: str) -> None:
    torch.manual_seed(0)
    batch = _batch(torch.Generator().manual_seed(0))
    model = _model(name)
    mu, sigma = model(batch["members"], batch["static"], batch["lead_time"])
    torch.testing.assert_close(mu, batch["members"].mean(1))
    torch.testing.assert_close(sigma, batch["members"].std(1) + SIGMA_MIN)
    raw = gaussian_crps_loss(model, batch).item()  # the raw ensemble's Gaussian CRPS
    assert _train(model, batch, 100) < 0.5 * raw


def test_residual_head_has_an_additive_mean_and_spread() -> None:
    mean, sd = torch.tensor([[[1.0]]]), torch.tensor([[[0.0]]])  # (N, C, H), zero raw spread
    out = torch.tensor([0.5, 0.0, 2.0, 3.0]).reshape(1, 4, 1)
    mu, sigma = residual_gaussian(mean, sd, out)
    # s o0 and s exp(o1) vanish with s = 0; o2 shifts the mean, softplus(o3 + b) is the floor
    floor = math.log1p(math.exp(3.0 + math.log(math.expm1(SIGMA_MIN))))
    torch.testing.assert_close(mu, torch.tensor([[[3.0]]]))
    torch.testing.assert_close(sigma, torch.tensor([[[floor]]]))


def test_the_lead_time_lets_a_per_point_model_widen_only_the_late_forecasts() -> None:
    """Errors of std 0.1 at day 0 and 3 at day 6, members that carry no hint of either.

    The expected Gaussian CRPS of N(mu=y's mean, s) for y ~ N(0, t^2) is
    sqrt(s^2 + t^2) sqrt(2/pi) - s/sqrt(pi): the best single s for both leads gives 1.091,
    the right s per lead (t / sqrt(pi) each) 0.874. Only a model that reads the lead time
    can go below 1.091.
    """
    gen = torch.Generator().manual_seed(1)
    members = torch.randn(16, 5, 1, 8, 8, generator=gen)
    lead = torch.tensor([0.0, 6.0]).repeat(8)
    scale = torch.where(lead == 0, 0.1, 3.0)[:, None, None, None]
    truth = members.mean(1) + scale * torch.randn(16, 1, 8, 8, generator=gen)
    batch = {"members": members, "truth": truth, "lead_time": lead}
    torch.manual_seed(0)
    blind = PostProcessor(1, lead_time=False)
    torch.manual_seed(0)
    reading = PostProcessor(1)
    assert _train(blind, batch, 150) > 1.0
    assert _train(reading, batch, 150) < 0.95


@pytest.mark.parametrize("name", MODELS)
def test_inputs_are_checked(name: str) -> None:
    model = _model(name)
    static, lead = torch.zeros(1, 1, 8, 8), torch.zeros(1)
    with pytest.raises(ValueError, match=r"members must be \(N, k >= 2, C=2, H, W\)"):
        model(torch.zeros(1, 1, 2, 8, 8), static, lead)
    with pytest.raises(ValueError, match=r"members must be \(N, k >= 2, C=2, H, W\)"):
        model(torch.zeros(1, 3, 3, 8, 8), static, lead)
    with pytest.raises(ValueError, match=r"expected 1 static field\(s\)"):
        model(torch.zeros(1, 3, 2, 8, 8), None, lead)
    with pytest.raises(ValueError, match=r"expected 1 static field\(s\) as \(N=1, S=1, H=8"):
        model(torch.zeros(1, 3, 2, 8, 8), torch.zeros(1, 1, 4, 4), lead)
    with pytest.raises(ValueError, match="the lead time is missing"):
        model(torch.zeros(1, 3, 2, 8, 8), static)
    with pytest.raises(ValueError, match=r"lead_time must be 1 lead times in days \(N,\), got"):
        model(torch.zeros(1, 3, 2, 8, 8), static, torch.zeros(2))


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="backbone must be one of"):
        PostProcessor(2, backbone="cnn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channels must be an integer >= 1"):
        PostProcessor(0)
    with pytest.raises(ValueError, match="static must be an integer >= 0"):
        PostProcessor(2, static=-1)


def test_the_fast_forms_compute_what_torch_computes() -> None:
    """The MLP's 1x1 convolution as a matrix product, the members' spread in two passes:
    in float64 both equal torch's forms (and their gradients) to rounding."""
    torch.manual_seed(0)
    fast = PointwiseConv2d(5, 3).double()
    conv = torch.nn.Conv2d(5, 3, 1).double()
    conv.load_state_dict(fast.state_dict())  # the same parameters: checkpoints load alike
    x = torch.randn(2, 5, 4, 6, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(fast(x), conv(x), rtol=1e-12, atol=0)
    (grad,) = torch.autograd.grad(fast(x).square().sum(), x)
    (expected,) = torch.autograd.grad(conv(x).square().sum(), x)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=0)
    members = torch.randn(3, 5, 2, 4, 4, dtype=torch.float64) * 4 + 10
    mean, sd = member_mean_sd(members)
    torch.testing.assert_close(mean, members.mean(1), rtol=1e-13, atol=0)
    torch.testing.assert_close(sd, members.std(1), rtol=1e-13, atol=0)
