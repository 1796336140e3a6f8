"""sciml.datasets.xarray_dataset on the real ERA5 sample and on small synthetic grids."""

from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import torch
import xarray as xr
from torch.utils.data import DataLoader

from sciml.datasets.xarray_dataset import (
    NormStats,
    XarrayDataset,
    XarrayIterableDataset,
    compute_stats,
    open_dataset,
)

ERA5 = Path(__file__).parents[2] / "data" / "era5_ensemble_sample.nc"
SAMPLE = ("number", "time")
pytestmark = pytest.mark.filterwarnings("ignore:The specified chunks separate")
LEVEL = ("isobaricInhPa",)


@pytest.fixture()
def era5() -> xr.Dataset:
    return open_dataset(ERA5, chunks={"number": 3})  # smaller than stored: 4 chunks


class CountingGetter:
    """Counts the chunk reads that a dask computation performs."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, dsk: Mapping[Hashable, Any], keys: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return dask.get(dsk, keys, **kwargs)


def test_open_dataset_is_lazy(era5: xr.Dataset) -> None:
    assert isinstance(era5["z"].data, dask.array.Array)
    assert era5["z"].chunks[0] == (3, 3, 3, 1)


def test_samples_equal_direct_indexing(era5: xr.Dataset) -> None:
    data = XarrayDataset(era5, ["z", "t"], sample_dims=SAMPLE, channel_dims=LEVEL)
    assert len(data) == 40
    assert data.channels == (
        "z[isobaricInhPa=850.0]",
        "z[isobaricInhPa=500.0]",
        "t[isobaricInhPa=850.0]",
        "t[isobaricInhPa=500.0]",
    )
    raw = xr.open_dataset(ERA5)  # eager, independent of the dataset's code path
    for index in (0, 7, 39, -1):
        member, time = np.unravel_index(index % 40, (10, 4))
        expected = np.stack(
            [raw[v].values[member, time, level] for v in ("z", "t") for level in (0, 1)]
        )
        assert torch.equal(data[index], torch.from_numpy(expected))
    with pytest.raises(IndexError, match="out of range for 40 samples"):
        data[40]


def test_loader_batches_equal_direct_indexing_and_read_once(era5: xr.Dataset) -> None:
    data = XarrayDataset(era5, ["t"], sample_dims=SAMPLE, channel_dims=LEVEL)
    loader = DataLoader(data, batch_size=8, shuffle=False)
    raw = xr.open_dataset(ERA5)["t"].values.reshape(40, 2, 61, 120)
    counter = CountingGetter()
    with dask.config.set(scheduler=counter):
        batches = list(loader)
    assert counter.calls == len(batches) == 5  # one compute per batch, not per sample
    assert torch.equal(torch.cat(batches), torch.from_numpy(raw))


def test_loader_with_workers_matches(era5: xr.Dataset) -> None:
    data = XarrayDataset(era5, ["z"], sample_dims=SAMPLE, channel_dims=LEVEL)
    serial = torch.cat(list(DataLoader(data, batch_size=6)))
    parallel = torch.cat(list(DataLoader(data, batch_size=6, num_workers=2)))
    assert torch.equal(serial, parallel)


def test_normalisation_statistics(era5: xr.Dataset, tmp_path: Path) -> None:
    stats = compute_stats(era5, ["z", "t"], channel_dims=LEVEL)
    raw = xr.open_dataset(ERA5)
    np.testing.assert_allclose(
        stats.mean[0], raw["z"].values[:, :, 0].astype(np.float64).mean(), rtol=1e-6
    )
    np.testing.assert_allclose(
        stats.std[3], raw["t"].values[:, :, 1].astype(np.float64).std(), rtol=1e-5
    )
    data = XarrayDataset(era5, ["z", "t"], sample_dims=SAMPLE, channel_dims=LEVEL, stats=stats)
    batch = torch.stack([data[i] for i in range(len(data))]).double()
    np.testing.assert_allclose(batch.mean(dim=(0, 2, 3)), 0.0, atol=1e-5)
    np.testing.assert_allclose(batch.std(dim=(0, 2, 3), unbiased=False), 1.0, rtol=1e-5)
    stats.to_json(tmp_path / "stats.json")
    assert NormStats.from_json(tmp_path / "stats.json") == stats
    with pytest.raises(ValueError, match="statistics are for channels"):
        XarrayDataset(era5, ["t"], sample_dims=SAMPLE, channel_dims=LEVEL, stats=stats)


def test_iterable_dataset_streams_whole_chunks(era5: xr.Dataset) -> None:
    stream = XarrayIterableDataset(era5, ["t"], sample_dims=SAMPLE, channel_dims=LEVEL)
    assert stream.blocks == [(0, 3), (3, 6), (6, 9), (9, 10)]
    mapped = XarrayDataset(era5, ["t"], sample_dims=SAMPLE, channel_dims=LEVEL)
    assert torch.equal(torch.stack(list(stream)), torch.stack([mapped[i] for i in range(40)]))
    shuffled = XarrayIterableDataset(
        era5, ["t"], sample_dims=SAMPLE, channel_dims=LEVEL, shuffle=True, seed=1
    )
    loader = DataLoader(shuffled, batch_size=4, num_workers=2)
    seen = torch.cat(list(loader))
    assert seen.shape == (40, 2, 61, 120)
    assert not torch.equal(seen, torch.stack(list(stream)))
    key = lambda t: t.double().sum().item()  # noqa: E731
    assert sorted(map(key, seen)) == sorted(map(key, stream))
    halves = [
        list(
            XarrayIterableDataset(
                era5, ["t"], sample_dims=SAMPLE, channel_dims=LEVEL, replica=(r, 2)
            )
        )
        for r in range(2)
    ]
    assert len(halves[0]) + len(halves[1]) == 40


def _synthetic(with_nan: bool = False) -> xr.Dataset:
    values = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    if with_nan:
        values[1, 2, 3] = np.nan
    return xr.Dataset({"a": (("time", "y", "x"), values), "b": (("time", "x"), values[:, 0])})


def test_clear_errors(tmp_path: Path) -> None:
    ds = _synthetic()
    with pytest.raises(KeyError, match=r"variables \['c'\] not in the dataset"):
        XarrayDataset(ds, ["a", "c"])
    with pytest.raises(ValueError, match="missing \\['member'\\]"):
        XarrayDataset(ds, ["a"], sample_dims="member")
    with pytest.raises(ValueError, match="spatial dims"):
        XarrayDataset(ds, ["a", "b"])
    nan = XarrayDataset(_synthetic(with_nan=True), ["a"])
    nan[0]
    with pytest.raises(ValueError, match=r"NaN in channel 'a' at sample \{'time': 1\}"):
        nan[1]
    assert torch.isnan(XarrayDataset(_synthetic(True), ["a"], allow_nan=True)[1]).any()
    flat = xr.Dataset({"a": (("time", "x"), np.ones((3, 4)))})
    with pytest.raises(ValueError, match="standard deviation 0.0"):
        compute_stats(flat, ["a"])

    fake = tmp_path / "fake.nc"
    fake.write_text("hello, I am not netCDF")
    with pytest.raises(ValueError, match="fake.nc is not a netCDF file"):
        open_dataset(fake)
    with pytest.raises(FileNotFoundError):
        open_dataset(tmp_path / "missing.nc")
    (tmp_path / "folder").mkdir()
    with pytest.raises(ValueError, match="not a Zarr store"):
        open_dataset(tmp_path / "folder")


def test_zarr_round_trip(tmp_path: Path) -> None:
    ds = _synthetic()
    ds.to_zarr(tmp_path / "s.zarr", consolidated=False)
    data = XarrayDataset(open_dataset(tmp_path / "s.zarr"), ["a"])
    assert torch.equal(data[1][0], torch.from_numpy(ds["a"].values[1]))


def test_runs_on_the_users_dask_client(era5: xr.Dataset) -> None:
    from dask.distributed import Client, get_task_stream

    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as c:
        with get_task_stream(c) as stream:
            stats = compute_stats(era5, ["t"], channel_dims=LEVEL)
            XarrayDataset(era5, ["t"], sample_dims=SAMPLE, channel_dims=LEVEL, stats=stats)[0]
        assert len(stream.data) > 0  # the work ran on the client's workers


def test_names_the_caller_gives_must_exist(era5: xr.Dataset) -> None:
    # a channel dim under another name used to be ignored: both levels pooled into one channel
    with pytest.raises(ValueError, match=r"channel_dims \['level'\] are not dims of any"):
        compute_stats(era5, ["t"], channel_dims=("level",))
    with pytest.raises(ValueError, match=r"channel_dims \['level'\] are not dims of any"):
        XarrayDataset(era5, ["t"], sample_dims=SAMPLE, channel_dims=("level",))
    with pytest.raises(ValueError, match="channel_dims must be a sequence of names"):
        XarrayDataset(era5, ["t"], sample_dims=SAMPLE, channel_dims="isobaricInhPa")
    # a string is not a list of variables ("zt" used to mean ["z", "t"])
    with pytest.raises(ValueError, match="variables must be a non-empty list of names, got 'zt'"):
        XarrayDataset(era5, "zt", sample_dims=SAMPLE)
    with pytest.raises(ValueError, match="variables must be a non-empty list"):
        compute_stats(era5, [])
    with pytest.raises(ValueError, match=r"variables repeat a name: \['t', 't'\]"):
        XarrayDataset(era5, ["t", "t"], sample_dims=SAMPLE)
    with pytest.raises(ValueError, match="sample_dims must name distinct dims"):
        XarrayDataset(era5, ["t"], sample_dims=("time", "time"))
    with pytest.raises(ValueError, match="sample_dims must name distinct dims"):
        XarrayDataset(era5, ["t"], sample_dims=())
    with pytest.raises(ValueError, match=r"\['isobaricInhPa'\] are given both as sample_dims"):
        XarrayDataset(era5, ["t"], sample_dims=("time", "isobaricInhPa"), channel_dims=LEVEL)


def test_statistics_must_match_the_channels(era5: xr.Dataset) -> None:
    stats = compute_stats(era5, ["z", "t"], channel_dims=LEVEL)
    with pytest.raises(ValueError, match="same channels in another order"):
        XarrayDataset(era5, ["t", "z"], sample_dims=SAMPLE, channel_dims=LEVEL, stats=stats)
    with pytest.raises(ValueError, match="statistics are for channels"):
        XarrayDataset(
            era5.sel(isobaricInhPa=[500.0]),
            ["z", "t"],
            sample_dims=SAMPLE,
            channel_dims=LEVEL,
            stats=stats,
        )
    with pytest.raises(TypeError, match="stats must be NormStats or None, got dict"):
        XarrayDataset(era5, ["t"], sample_dims=SAMPLE, stats={"t": (0.0, 1.0)})


def test_empty_dataset_integer_dtype_and_bad_indices() -> None:
    ds = _synthetic()
    with pytest.raises(ValueError, match=r"empty along \['time'\]"):
        XarrayDataset(ds.isel(time=slice(0, 0)), ["a"])
    with pytest.raises(ValueError, match=r"empty along \['x'\]"):
        XarrayDataset(ds.isel(x=slice(0, 0)), ["a"])
    with pytest.raises(ValueError, match="floating-point torch dtype, got torch.int64"):
        XarrayDataset(ds, ["a"], dtype=torch.int64)
    data = XarrayDataset(ds, ["a"])
    with pytest.raises(TypeError, match="sample indices must be integers"):
        data[1.5]
    assert torch.equal(data[np.int64(1)], data[1])


def test_infinity_is_reported_like_nan() -> None:
    ds = _synthetic()
    ds["a"][1, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"infinity in channel 'a' at sample \{'time': 1\}"):
        XarrayDataset(ds, ["a"])[1]
    assert torch.isinf(XarrayDataset(ds, ["a"], allow_nan=True)[1]).any()


def test_iterable_dataset_rejects_a_replica_out_of_range(era5: xr.Dataset) -> None:
    for bad in ((2, 2), (0, 0), (-1, 2)):
        with pytest.raises(ValueError, match="replica must be \\(index, count\\)"):
            XarrayIterableDataset(era5, ["t"], sample_dims=SAMPLE, replica=bad)


def test_both_datasets_take_the_same_options_and_show_channels_and_stats(
    era5: xr.Dataset,
) -> None:
    options = {"sample_dims": SAMPLE, "channel_dims": LEVEL, "stats": "compute"}
    mapped = XarrayDataset(era5, ["t"], **options)
    stream = XarrayIterableDataset(era5, ["t"], **options)
    assert (
        stream.channels == mapped.channels == ("t[isobaricInhPa=850.0]", "t[isobaricInhPa=500.0]")
    )
    assert stream.stats == mapped.stats is not None
    assert torch.equal(next(iter(stream)), mapped[0])
    with pytest.raises(ValueError, match="stats must be NormStats, 'compute' or None"):
        XarrayIterableDataset(era5, ["t"], sample_dims=SAMPLE, stats="mean")
