"""The spread predictor and its losses (tiny grids)."""

import numpy as np
import pytest
import scipy.integrate
import scipy.special
import torch

from sciml.weather.spread.model import (
    FIELD_MEAN_WEIGHT,
    SIGMA_MIN,
    SpreadPredictor,
    expected_ensemble_spread,
    expected_gaussian_crps,
    spread_loss,
)


def _batch(history: int = 1, n: int = 2, k: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    fields = torch.randn(n, history, k, 4, 8, 8, generator=gen)
    return fields, torch.ones(n, history)


def _closed_form(fields: torch.Tensor, out: torch.Tensor, ensemble: int) -> np.ndarray:
    """The model's output from its U-Net's ``out`` in float64 numpy (the module docstring)."""
    n, k = fields.shape[0], fields.shape[2]
    sample = fields[:, 0].double().numpy().var(1, ddof=1)  # (N, C, lat, lon)
    local, pooled = np.exp(out.double().numpy().reshape(n, 2, *sample.shape[1:])).swapaxes(0, 1)
    field_mean = sample.mean((-2, -1), keepdims=True)
    variance = sample * local + FIELD_MEAN_WEIGHT * field_mean * pooled
    return np.sqrt(((k - 1) * sample + (ensemble - k) * variance) / (ensemble - 1) + 1e-8)


def test_untrained_model_adds_a_little_of_the_field_mean_to_the_sample_variance() -> None:
    model = SpreadPredictor(2, members=3, ensemble=6, levels=2, base_channels=4, depth=1)
    fields, available = _batch()
    fields[0, 0, :, 1] = 0.5  # a channel without spread: SIGMA_MIN, still > 0
    sd = model.double()(fields.double(), available.double()).detach()
    assert sd.shape == (2, 4, 8, 8)
    assert bool((sd[0, 1] == 1e-4).all()) and bool((sd > 0).all())
    expected = _closed_form(fields, torch.zeros(2, 4, 2, 8, 8), 6)
    # float64: a variance of 3 members, a mean of 64 points, a few products (< 128 eps)
    np.testing.assert_allclose(sd.numpy(), expected, rtol=128 * np.finfo(np.float64).eps)


def test_the_head_keeps_the_members_own_part_and_estimates_the_rest() -> None:
    """Any head gives the closed form of its outputs, never below the k members' own part."""
    torch.manual_seed(0)
    model = SpreadPredictor(2, members=3, ensemble=6, levels=2, base_channels=4, depth=1)
    model = _random_head(model.double(), std=0.5)
    fields, available = _batch()
    fields, available = fields.double(), available.double()
    seen: list[torch.Tensor] = []
    model.unet.register_forward_hook(lambda *args: seen.append(args[2]))
    sd = model(fields, available)
    expected = _closed_form(fields, seen[0].detach(), 6)
    np.testing.assert_allclose(sd.detach().numpy(), expected, rtol=128 * np.finfo(np.float64).eps)
    for parameter in model.unet.head.parameters():  # a head that says "no spread beyond"
        torch.nn.init.constant_(parameter, -50.0)
    own = np.sqrt(2 / 5 * fields[:, 0].numpy().var(1, ddof=1) + 1e-8)  # (k - 1) / (M - 1)
    np.testing.assert_allclose(model(fields, available).detach().numpy(), own, rtol=1e-12)


def test_the_expected_full_variance_given_the_sample_variance_by_simulation() -> None:
    """E[s_M^2 | s_k^2] = ((k-1) s_k^2 + (M-k) sigma^2) / (M-1), float64 Monte Carlo.

    The residual of the right form is orthogonal to 1, s_k^2 and sigma^2 (the conditional
    mean's defining property, given the linear form) within 5 standard errors; the form
    with M-k+1 (the cross term of the sub-means counted twice) is off by sigma^2/(M-1).
    """
    rng = np.random.default_rng(0)
    k, m, n = 5, 10, 200_000
    sigma2 = np.exp(rng.standard_normal(n))  # a variance per point
    members = rng.standard_normal(n)[:, None] + np.sqrt(sigma2)[:, None] * rng.standard_normal(
        (n, m)
    )
    full, sample = members.var(1, ddof=1), members[:, :k].var(1, ddof=1)
    predicted = expected_ensemble_spread(
        torch.from_numpy(sample), torch.from_numpy(sigma2), members=k, ensemble=m
    )
    residual = full - (predicted.numpy() ** 2 - SIGMA_MIN**2)
    for weight in (np.ones(n), sample, sigma2):
        product = residual * weight
        assert abs(product.mean()) < 5 * product.std() / np.sqrt(n)
    wrong = full - ((k - 1) * sample + (m - k + 1) * sigma2) / (m - 1)
    assert abs(wrong.mean()) > 5 * wrong.std() / np.sqrt(n)


def test_model_overfits_a_tiny_batch() -> None:
    torch.manual_seed(0)
    model = SpreadPredictor(2, members=3, ensemble=6, levels=2, base_channels=8, depth=1)
    fields, available = _batch()
    # an arbitrary per-point variance beyond the members' own part (3 of 6 members)
    variance = (0.5 + torch.rand(2, 4, 8, 8, generator=torch.Generator().manual_seed(1))) ** 2
    target = torch.sqrt((2 * fields[:, 0].var(1) + 3 * variance) / 5)
    batch = {"history": fields, "available": available, "spread": target}
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = spread_loss(model, batch, loss="mse").item()
    for _ in range(150):
        optimiser.zero_grad()
        loss = spread_loss(model, batch, loss="mse")
        loss.backward()
        optimiser.step()
    assert loss.item() < 0.12 * first  # an arbitrary per-point target, memorised


def test_temporal_model_uses_the_earlier_lead_times() -> None:
    torch.manual_seed(0)
    model = SpreadPredictor(2, members=3, ensemble=6, levels=2, history=2, base_channels=4, depth=1)
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


def _random_head(model: SpreadPredictor, *, std: float) -> SpreadPredictor:
    """A trained-like head: a zero one outputs the sample spread, which commutes with anything."""
    for parameter in model.unet.head.parameters():
        torch.nn.init.normal_(parameter, std=std)
    return model


@pytest.mark.parametrize("periodic", [("lon",), ("lat", "lon")])
def test_the_model_commutes_with_a_roll_along_its_periodic_dims_exactly(
    periodic: tuple[str, ...],
) -> None:
    """Rolling by a multiple of 2**depth (the coarsest cell) is a symmetry, seam included.

    The old pad-and-crop wrap (a margin of 2**depth points, narrower than the receptive
    field) was off by O(1) here.
    """
    torch.manual_seed(0)
    model = SpreadPredictor(
        2, members=3, ensemble=6, levels=2, periodic=periodic, base_channels=4, depth=2
    )
    model = _random_head(model.double(), std=0.5)
    gen = torch.Generator().manual_seed(0)
    fields = torch.randn(2, 1, 3, 4, 8, 16, generator=gen, dtype=torch.float64)
    available = torch.ones(2, 1, dtype=torch.float64)
    out = model(fields, available)
    # the rolled run does the same float64 operations, its sums in another order: each
    # dot product of n terms is off by at most n eps relative, n the largest fan-in
    fan_in = max(p[0].numel() for name, p in model.named_parameters() if "weight" in name)
    bound = fan_in * np.finfo(np.float64).eps * out.abs().max().item()
    dims = [d for d, name in ((-2, "lat"), (-1, "lon")) if name in periodic]
    for shift in (4, 8):
        for dim in dims:
            rolled = model(fields.roll(shift, dims=dim), available)
            assert (rolled - out.roll(shift, dims=dim)).abs().max().item() <= bound
    if periodic == ("lon",):  # latitude has walls: no symmetry
        rolled = model(fields.roll(4, dims=-2), available)
        assert (rolled - out.roll(4, dims=-2)).abs().max().item() > 1e6 * bound


def test_only_periodic_dims_join_their_edges() -> None:
    """Without wrapping (a regional grid), the west edge does not reach the east edge.

    The lon axis is wider than the receptive field, and there is no normalisation (a group
    norm's statistics span the whole field). The network's own output (the log-ratio) is
    compared: the head's reference, a field mean, spans the whole field by design.
    """
    fields = torch.randn(1, 1, 3, 4, 8, 32, generator=torch.Generator().manual_seed(0))
    changed = fields.clone()
    changed[..., 0] += 1.0
    available = torch.ones(1, 1)
    for periodic, linked in ((("lon",), True), ((), False)):
        torch.manual_seed(0)
        model = SpreadPredictor(
            2,
            members=3,
            ensemble=6,
            levels=2,
            periodic=periodic,
            base_channels=4,
            depth=1,
            norm="none",
        )
        model = _random_head(model, std=0.1)
        seen: list[torch.Tensor] = []
        model.unet.register_forward_hook(lambda *args, seen=seen: seen.append(args[2]))
        model(fields, available), model(changed, available)
        assert (not torch.equal(seen[0][..., -1], seen[1][..., -1])) == linked
    with pytest.raises(ValueError, match="periodic dims must be among"):
        SpreadPredictor(2, members=3, ensemble=6, levels=2, periodic=("level",))


def test_bad_model_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="members must be an integer >= 2"):
        SpreadPredictor(2, members=1, ensemble=6, levels=2)
    for ensemble in (2, True, 6.0):
        with pytest.raises(ValueError, match=r"ensemble \(the full ensemble's size\) must be an"):
            SpreadPredictor(2, members=3, ensemble=ensemble, levels=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="members must be an integer >= 2"):
        expected_ensemble_spread(torch.ones(1), torch.ones(1), members=1, ensemble=10)
    model = SpreadPredictor(2, members=3, ensemble=6, levels=2, base_channels=4, depth=1)
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


def test_the_log_loss_is_the_mean_absolute_log_ratio() -> None:
    model = SpreadPredictor(2, members=3, ensemble=6, levels=2, base_channels=4, depth=1).double()
    fields, available = _batch()
    fields = fields.double()
    sample = model(fields, available.double()).detach()  # the untrained model's output
    target = sample * torch.exp(torch.linspace(-1, 1, sample.numel(), dtype=torch.float64)).view(
        sample.shape
    )
    batch = {"history": fields, "available": available.double(), "spread": target - 1e-4}
    # |log(output) - log(target)| = |linspace(-1, 1)|, whose mean is known in closed form
    n = sample.numel()
    expected = np.abs(np.linspace(-1, 1, n)).mean()
    got = spread_loss(model, batch, loss="log_l1").item()
    assert got == pytest.approx(expected, rel=0, abs=n * np.finfo(np.float64).eps)


def test_a_missing_step_enters_as_zeros_and_the_current_spread_also_as_its_log() -> None:
    model = SpreadPredictor(2, members=3, ensemble=6, levels=2, history=2, base_channels=4, depth=1)
    fields, available = _batch(history=2)
    fields[:, 1], available[:, 1] = 0.0, 0.0  # the step before the first lead time
    seen: list[torch.Tensor] = []
    model.unet.register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    model(fields, available)
    # channels: per step, (k members + sd + log sd) x 2 variables, then 1 availability flag
    x = seen[0].reshape(2, -1, 2, 8, 8)  # (N, channels, level, lat, lon)
    per_step = (3 + 2) * 2
    assert bool((x[:, per_step:] == 0).all())  # step 1 and its flag: zeros
    current = fields[:, 0].reshape(2, 3, 2, 2, 8, 8)  # (N, k, V, D, lat, lon)
    log_sd = torch.log(current.double().std(1) + 1e-4)  # (N, V, D, lat, lon), float64
    x_step = x[:, :per_step].reshape(2, 5, 2, 2, 8, 8)  # (N, k + 2, V, D, ...)
    # the float32 spread of 3 members, to a few roundings u (two passes: about 3 + 3 of
    # them relative, which the log turns into absolute ones), and the log's own rounding
    u = float(torch.finfo(torch.float32).eps) / 2
    torch.testing.assert_close(x_step[:, 4].double(), log_sd, rtol=u, atol=8 * u)
