"""Spread-prediction samples: one member choice stacked over lead times, and bad data."""

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciml.weather.spread.data import SpreadDataset


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
