"""sciml.volumes.data: generated volumes, deterministic from a seed, chunked for block reads."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.volumes.data import PARAMS, gaussian_field, write_cosmology, write_segmentation


def test_cosmology_is_deterministic_chunked_and_labelled(tmp_path: Path) -> None:
    a = write_cosmology(tmp_path / "a.zarr", samples=3, size=8, seed=5, chunks=4)
    b = write_cosmology(tmp_path / "b.zarr", samples=2, size=8, seed=5, chunks=4)
    c = write_cosmology(tmp_path / "c.zarr", samples=2, size=8, seed=6, chunks=4)
    da, db, dc = (xr.open_zarr(p) for p in (a, b, c))
    assert da["volume"].dtype == np.int16 and da["volume"].attrs["transform"] == "log1p"
    assert da["volume"].encoding["chunks"] == (1, 4, 4, 4, 4)
    assert da["volume"].encoding["compressors"] in (None, ())
    # sample i depends only on (seed, i): the first two samples of a and b agree
    assert np.array_equal(da["volume"][:2].values, db["volume"].values)
    assert not np.array_equal(db["volume"].values, dc["volume"].values)
    assert list(da["param"].values) == list(PARAMS)
    scaled = da["params"].values
    assert scaled.shape == (3, 4) and np.all(np.abs(scaled) <= 1)
    # the counts follow the parameters: mean count ~ nbar (log-normal density of mean 1)
    nbar = da["params_physical"].sel(param="nbar").values
    mean = da["volume"].isel(channel=0).mean(("z", "y", "x")).values
    np.testing.assert_allclose(mean, nbar, rtol=0.25)


def test_gaussian_field_has_its_power_law() -> None:
    rng = np.random.default_rng(0)
    steep, flat = gaussian_field(32, -3.0, rng), gaussian_field(32, 0.0, rng)
    assert abs(steep.std() - 1) < 1e-12 and abs(steep.mean()) < 1e-12
    # neighbours correlate strongly in a red field, hardly in a white one
    lag = [np.corrcoef(f[:-1].ravel(), f[1:].ravel())[0, 1] for f in (steep, flat)]
    assert lag[0] > 0.6 and abs(lag[1]) < 0.05


def test_segmentation_labels_come_from_the_field(tmp_path: Path) -> None:
    ds = xr.open_zarr(write_segmentation(tmp_path / "s.zarr", samples=2, size=16, seed=1))
    labels, field = ds["label"].values, ds["volume"].values[:, 0]
    assert set(np.unique(labels)) == {0, 1, 2}
    means = [field[labels == k].mean() for k in range(3)]
    assert means[0] < means[1] < means[2]
    assert ds["label"].encoding["chunks"] == (1, 4, 4, 4)


def test_bad_generator_inputs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="samples must be an integer >= 1, got 0"):
        write_cosmology(tmp_path / "x.zarr", samples=0, size=8)
    with pytest.raises(ValueError, match="size must be an integer >= 1, got 2.5"):
        write_segmentation(tmp_path / "x.zarr", samples=1, size=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunks must be an integer in \\[1, size=8\\], got 9"):
        write_cosmology(tmp_path / "x.zarr", samples=1, size=8, chunks=9)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        write_segmentation(tmp_path / "x.zarr", samples=1, size=4, seed=-1)
    write_cosmology(tmp_path / "x.zarr", samples=1, size=4)
    with pytest.raises(FileExistsError, match="x.zarr exists"):
        write_cosmology(tmp_path / "x.zarr", samples=1, size=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.zarr"]  # no partial store left
