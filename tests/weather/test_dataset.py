"""EnsembleDataset: member subsets, truth, full-ensemble spread and static fields, lazily."""

import numpy as np
import pytest
import torch
import xarray as xr
from torch.utils.data import DataLoader

from sciml.datasets.channels import compute_stats
from sciml.weather.dataset import EnsembleDataset

LEVEL = ("level",)


def _ensemble(rng: np.random.Generator) -> xr.Dataset:
    """A toy-shaped ensemble: 4 members, 3 start dates, 2 lead times, 2 levels, 5 x 6."""
    shape = (4, 3, 2, 2, 5, 6)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(3) * np.timedelta64(2, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "level": [1, 2],
    }
    data = {}
    for k, name in enumerate(("psi", "q")):
        data[name] = (dims, 10.0 * k + rng.standard_normal(shape) * (k + 1))
        data[f"{name}_truth"] = (dims[1:], 10.0 * k + rng.standard_normal(shape[1:]))
    data["topography"] = (("lat", "lon"), rng.standard_normal((5, 6)))
    return xr.Dataset(data, coords=coords).chunk({"time": 1})


def test_samples_hold_members_truth_spread_and_static_fields() -> None:
    ds = _ensemble(np.random.default_rng(0))
    stats = compute_stats(ds, ["psi", "q"], channel_dims=LEVEL)
    data = EnsembleDataset(ds, ["psi", "q"], members=2, stats=stats, static=("topography",))
    assert len(data) == 6 and data.channels == stats.channels
    mean = np.array(stats.mean)[:, None, None]
    std = np.array(stats.std)[:, None, None]
    loaded = ds.load()
    for index in (0, 5):
        time, lead = divmod(index, 2)
        sample = data[index]
        point = {"time": time, "lead_time": lead}

        def channels(fields: xr.Dataset) -> np.ndarray:
            return np.concatenate([fields[v].values for v in ("psi", "q")], axis=-3)

        members = channels(loaded[["psi", "q"]].isel({**point, "member": [0, 1]}))
        truth = channels(
            loaded[["psi_truth", "q_truth"]].isel(point).rename(psi_truth="psi", q_truth="q")
        )
        spread = channels(loaded[["psi", "q"]].isel(point).std("member", ddof=1))
        # float32 samples against float64 references: eps32 relative to the largest value
        eps = (
            4 * np.finfo(np.float32).eps * (np.abs(members).max() + np.abs(mean).max()) / std.min()
        )
        np.testing.assert_allclose(sample["members"], (members - mean) / std, atol=eps)
        np.testing.assert_allclose(sample["truth"], (truth - mean) / std, atol=eps)
        np.testing.assert_allclose(sample["spread"], spread / std, rtol=1e-6)
        assert int(sample["index"]) == index
    topo = loaded["topography"].values
    np.testing.assert_allclose(
        data[0]["static"][0], (topo - topo.mean()) / topo.std(), rtol=1e-5, atol=1e-6
    )
    batch = next(iter(DataLoader(data, batch_size=4)))
    assert batch["members"].shape == (4, 2, 4, 5, 6) and batch["static"].shape == (4, 1, 5, 6)


def test_samples_carry_their_lead_time_in_days() -> None:
    ds = _ensemble(np.random.default_rng(3))
    ds = ds.assign_coords(lead_time=np.array([0, 36], dtype="timedelta64[h]"))
    data = EnsembleDataset(ds, ["psi"], members=2)
    # time major, then lead_time: samples 0..5 are leads 0, 1.5, 0, 1.5, 0, 1.5 days
    leads = [float(data[i]["lead_time"]) for i in range(len(data))]
    assert leads == [0.0, 1.5] * 3
    assert data.__getitems__([5, 2])[0]["lead_time"].dtype == torch.float32
    # sample dims in another order: lead_time major
    flipped = EnsembleDataset(ds, ["psi"], members=2, sample_dims=("lead_time", "time"))
    assert [float(flipped[i]["lead_time"]) for i in (0, 2, 3)] == [0.0, 0.0, 1.5]
    # a lead time that is not a timedelta is not guessed at: no lead_time in the sample
    numeric = EnsembleDataset(ds.assign_coords(lead_time=[0, 24]), ["psi"], members=2)
    assert "lead_time" not in numeric[0]
    # a missing lead time is refused where it is read, not passed on as NaN days
    missing = ds.assign_coords(lead_time=np.array([0, "NaT"], dtype="timedelta64[h]"))
    with pytest.raises(ValueError, match=r"must hold lead times, got NaT at position\(s\) \[1\]"):
        EnsembleDataset(missing, ["psi"], members=2)


def test_random_members_are_distinct_and_redrawn() -> None:
    ds = _ensemble(np.random.default_rng(1))
    data = EnsembleDataset(ds, ["psi"], members=3, choice="random")
    full = torch.from_numpy(ds["psi"].isel(time=0, lead_time=0).values)  # (member, level, ...)
    full = (full - torch.tensor(data.stats.mean)[:, None, None]) / torch.tensor(data.stats.std)[
        :, None, None
    ]
    torch.manual_seed(0)
    seen = set()
    for _ in range(10):
        picked = data[0]["members"].double()
        which = [int((full - m).abs().amax(dim=(1, 2, 3)).argmin()) for m in picked]
        assert len(set(which)) == 3
        seen.add(tuple(which))
    assert len(seen) > 1
    torch.manual_seed(0)
    first = data[0]["members"]
    torch.manual_seed(0)
    assert torch.equal(first, data[0]["members"])


def test_bad_options_are_rejected() -> None:
    ds = _ensemble(np.random.default_rng(2))
    with pytest.raises(ValueError, match=r"members must be an integer in \[1, 4\], got 5"):
        EnsembleDataset(ds, ["psi"], members=5)
    with pytest.raises(ValueError, match="members must be an integer"):
        EnsembleDataset(ds, ["psi"], members=0)
    with pytest.raises(ValueError, match="choice must be 'first' or 'random'"):
        EnsembleDataset(ds, ["psi"], members=2, choice="last")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=r"no verifying values \['psi_truth'\]"):
        EnsembleDataset(ds.drop_vars("psi_truth"), ["psi"], members=2)
    with pytest.raises(ValueError, match="static field 'psi_truth' varies along"):
        EnsembleDataset(ds, ["psi"], members=2, static=["psi_truth"])
    with pytest.raises(KeyError, match=r"static fields \['orography'\]"):
        EnsembleDataset(ds, ["psi"], members=2, static=["orography"])
    other = compute_stats(ds, ["q"], channel_dims=LEVEL)
    with pytest.raises(ValueError, match="statistics are for channels"):
        EnsembleDataset(ds, ["psi"], members=2, stats=other)
    with pytest.raises(ValueError, match="no member dimension 'number'"):
        EnsembleDataset(ds, ["psi"], members=2, member_dim="number")
    with pytest.raises(IndexError, match="out of range"):
        EnsembleDataset(ds, ["psi"], members=2)[6]
