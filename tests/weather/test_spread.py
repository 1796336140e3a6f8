"""The spread predictor, its losses and its samples (tiny grids)."""

from pathlib import Path

import numpy as np
import pytest
import scipy.integrate
import scipy.special
import torch
import xarray as xr

from sciml.weather.spread import SpreadPredictor, expected_gaussian_crps, spread_loss
from sciml.weather.spread_data import SpreadDataset


def tiny_ensemble(*, members: int = 4, dates: int = 3, leads: int = 3, seed: int = 0) -> xr.Dataset:
    """A toy-shaped ensemble of ``psi`` and ``q`` on 2 levels, 8 x 8, spread growing with lead."""
    rng = np.random.default_rng(seed)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    shape = (members, dates, leads, 2, 8, 8)
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(dates) * np.timedelta64(2, "D"),
        "lead_time": np.arange(leads) * np.timedelta64(1, "D"),
        "level": [1, 2],
        "lat": np.linspace(30, 60, 8),
        "lon": np.arange(8) * 45.0,
    }
    scale = 0.2 + np.linspace(0, 1, leads)[:, None, None, None] * rng.random((2, 8, 8))
    data = {}
    for name in ("psi", "q"):
        signal = rng.standard_normal(shape[1:])
        data[name] = (dims, signal + scale * rng.standard_normal(shape))
        data[f"{name}_truth"] = (dims[1:], signal + scale * rng.standard_normal(shape[1:]))
    return xr.Dataset(data, coords=coords)


def write_tiny(path: Path, **kwargs: int) -> Path:
    """:func:`tiny_ensemble` as a netCDF file."""
    tiny_ensemble(**kwargs).to_netcdf(path)
    return path


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


def test_dataset_stacks_the_same_members_over_lead_times() -> None:
    ds = tiny_ensemble()
    data = SpreadDataset(ds, ["psi", "q"], members=2, history=3, choice="random")
    torch.manual_seed(0)
    first_lead, last_lead = data.__getitems__([3, 5])  # date 1, lead times 0 and 2
    assert first_lead["available"].tolist() == [1, 0, 0]
    assert bool((first_lead["history"][1:] == 0).all())
    assert last_lead["available"].tolist() == [1, 1, 1]
    full = SpreadDataset(ds, ["psi", "q"], members=4, history=3, stats=data.stats)[5]["history"]
    # step s of sample (date 1, lead 2) is lead 2 - s, and one member choice for all steps
    picked = [int((full[0] == m).all(dim=(1, 2, 3)).nonzero()) for m in last_lead["history"][0]]
    for step in range(3):
        torch.testing.assert_close(last_lead["history"][step], full[step][picked])
    expected = ds[["psi", "q"]].isel(time=1, lead_time=2).std("member", ddof=1)
    scale = np.array(data.stats.std)[:, None, None]
    values = np.concatenate([expected["psi"].values, expected["q"].values]) / scale
    np.testing.assert_allclose(last_lead["spread"].numpy(), values, rtol=1e-5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"members": 5}, r"members must be an integer in \[2, 4\] \(the ensemble has 4"),
        ({"members": 1}, r"members must be an integer in \[2, 4\]"),
        ({"members": 2, "history": 4}, r"history .* in \[1, 3\] \(the data have 3 lead times"),
        ({"members": 2, "history": 0}, r"history .* in \[1, 3\]"),
    ],
)
def test_bad_dataset_options_are_named(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpreadDataset(tiny_ensemble(), ["psi", "q"], **options)


def test_bad_data_are_named() -> None:
    ds = tiny_ensemble()
    with pytest.raises(ValueError, match="lead_time must be strictly ascending"):
        SpreadDataset(ds.isel(lead_time=[2, 1, 0]), ["psi"], members=2)
    with pytest.raises(ValueError, match=r"variables \['psi'\] have no 'level' dim"):
        SpreadDataset(ds.isel(level=0), ["psi"], members=2)
    with pytest.raises(ValueError, match="needs a 'lead_time' dimension"):
        SpreadDataset(ds.isel(lead_time=0), ["psi"], members=2)
