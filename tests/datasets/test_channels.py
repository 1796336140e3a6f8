"""sciml.datasets.channels: channels, their statistics and lazy normalisation of xarray datasets."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.datasets.channels import NormStats, channel_arrays, compute_stats, denormalise, normalise

LEVEL = ("level",)


def _fields() -> xr.Dataset:
    """Two variables, one on two levels, with distinct per-level means and spreads."""
    rng = np.random.default_rng(0)
    levels = [500, 850]
    t = (
        rng.normal(size=(4, 2, 3, 5)) * np.array([2.0, 5.0])[:, None, None]
        + np.array([250.0, 280.0])[:, None, None]
    )
    coords = {"time": np.arange(4), "level": levels}
    return xr.Dataset(
        {
            "t": (("time", "level", "y", "x"), t, {"units": "K"}),
            "z": (("time", "y", "x"), rng.normal(size=(4, 3, 5)) * 3.0 + 10.0),
        },
        coords=coords,
    )


def test_normalise_is_lazy_by_channel_and_inverted_by_denormalise() -> None:
    ds = _fields()
    stats = compute_stats(ds, ["t", "z"], channel_dims=LEVEL)
    assert stats.channels == ("t[level=500]", "t[level=850]", "z")
    lazy = normalise(ds.chunk({"time": 2}), stats, channel_dims=LEVEL)
    assert lazy["t"].chunks is not None and lazy["t"].dims == ds["t"].dims
    scaled = lazy.compute()
    for k, level in enumerate((500, 850)):
        # float64 both sides: the same two operations, so equal to rounding
        expected = (ds["t"].sel(level=level) - stats.mean[k]) / stats.std[k]
        np.testing.assert_allclose(scaled["t"].sel(level=level), expected, rtol=1e-15)
    np.testing.assert_allclose(scaled["z"], (ds["z"] - stats.mean[2]) / stats.std[2], rtol=1e-15)
    assert scaled["t"].attrs == {"units": "1", "normalised_from_units": "K"}
    # applied by label: the levels in another order get their own statistics
    flipped = normalise(ds.isel(level=[1, 0]), stats, channel_dims=LEVEL)
    xr.testing.assert_allclose(flipped.sel(level=[500, 850]), scaled)
    back = denormalise(scaled, stats, channel_dims=LEVEL)
    xr.testing.assert_allclose(back, ds, rtol=1e-14)
    assert back["t"].attrs == {"units": "K"}


def test_normalise_keeps_float32_data_float32() -> None:
    ds = _fields().astype(np.float32)
    stats = compute_stats(ds, ["t", "z"], channel_dims=LEVEL)
    scaled = normalise(ds, stats, channel_dims=LEVEL)
    assert scaled["t"].dtype == np.float32
    reference = (ds["t"].astype(np.float64).sel(level=500) - stats.mean[0]) / stats.std[0]
    # float32: x - mean is exact to eps * |x|; relative to the spread that is eps * |x| / std
    eps = np.finfo(np.float32).eps
    bound = 4 * eps * float(abs(ds["t"]).max()) / stats.std[0]
    assert float(abs(scaled["t"].sel(level=500) - reference).max()) <= bound


def test_normalise_rejects_statistics_of_other_channels() -> None:
    ds = _fields()
    stats = compute_stats(ds, ["t", "z"], channel_dims=LEVEL)
    with pytest.raises(ValueError, match=r"channels the dataset lacks \['t\[level=850\]'\]"):
        normalise(ds.sel(level=[500]), stats, channel_dims=LEVEL)
    with pytest.raises(ValueError, match=r"no statistics for \['q'\]"):
        normalise(ds.assign(q=ds["z"]), stats, channel_dims=LEVEL)
    with pytest.raises(ValueError, match=r"no statistics for \['t'\]"):  # levels pooled
        normalise(ds, stats)
    other = ds.assign_coords(level=[300, 850])
    with pytest.raises(ValueError, match=r"no statistics for \['t\[level=300\]'\]"):
        normalise(other, stats, channel_dims=LEVEL)
    with pytest.raises(TypeError, match="stats must be NormStats, got tuple"):
        normalise(ds, (0.0, 1.0), channel_dims=LEVEL)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"channel_dims \['lev'\] are not dims"):
        denormalise(ds, stats, channel_dims=("lev",))


def test_constant_channel_is_rejected_by_name() -> None:
    ds = _fields()
    ds["t"][:, 1] = 7.0
    with pytest.raises(ValueError, match=r"channel 't\[level=850\]' has standard deviation 0.0"):
        compute_stats(ds, ["t", "z"], channel_dims=LEVEL)


def test_channel_names_follow_the_labels() -> None:
    names = [name for name, _ in channel_arrays(_fields(), ["z", "t"], LEVEL)]
    assert names == ["z", "t[level=500]", "t[level=850]"]


@pytest.mark.parametrize(
    ("channels", "mean", "std", "message"),
    [
        (("a", "b"), (0.0,), (1.0, 1.0), "2 channels, 1 means and 2 stds"),
        ((), (), (), "0 channels"),
        (("a", "a"), (0.0, 0.0), (1.0, 1.0), "repeat a name"),
        (("a",), (0.0,), (0.0,), "std that is not > 0"),
        (("a",), (float("nan"),), (1.0,), "non-finite mean"),
    ],
)
def test_norm_stats_reject_inconsistent_values(
    channels: tuple[str, ...], mean: tuple[float, ...], std: tuple[float, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        NormStats(channels, mean, std)


def test_norm_stats_file_must_hold_statistics(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    path.write_text('{"channels": ["a"]}')
    with pytest.raises(ValueError, match=r"not a NormStats record \(missing \['mean', 'std'\]\)"):
        NormStats.from_json(path)
