"""sciml.volumes.dataset: each rank reads its block of each sample, and only that."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import torch
import xarray as xr
from torch.utils.data import DataLoader

from sciml.datasets.channels import NormStats
from sciml.spatial_parallel import block_bounds
from sciml.volumes.data import write_cosmology, write_segmentation
from sciml.volumes.dataset import ShardedVolumes
from sciml.volumes.layout import block_slices
from sciml.volumes.stats import block_stats, run_stats
from sciml.volumes.volume_record import record_volumes

SIZE = 16


@pytest.fixture(scope="module")
def cosmo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cosmology(tmp_path_factory.mktemp("v") / "c.zarr", samples=3, size=SIZE, seed=4)


@pytest.fixture(scope="module")
def seg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_segmentation(tmp_path_factory.mktemp("v") / "s.zarr", samples=2, size=SIZE)


def _mesh(grid: tuple[int, int, int], coords: tuple[int, int, int]) -> Any:
    """What the dataset takes from a SpatialMesh (no process group needed)."""
    return SimpleNamespace(grid=grid, spatial_coords=coords)


def _meshes(grid: tuple[int, int, int]) -> list[Any]:
    return [
        _mesh(grid, (d, h, w))
        for d in range(grid[0])
        for h in range(grid[1])
        for w in range(grid[2])
    ]


def _whole(path: Path, variable: str = "volume") -> np.ndarray:
    return xr.open_zarr(path)[variable].values


def test_blocks_are_the_shards_of_the_whole_sample(cosmo: Path) -> None:
    whole = np.log1p(_whole(cosmo).astype(np.float64))
    params = xr.open_zarr(cosmo)["params"].values
    for mesh in _meshes((2, 2, 1)):
        data = ShardedVolumes(cosmo, mesh=mesh, dtype=torch.float64)
        x, y = data[1]
        lo = [
            block_bounds(SIZE, p)[c][0] for p, c in zip(mesh.grid, mesh.spatial_coords, strict=True)
        ]
        hi = [
            block_bounds(SIZE, p)[c][1] for p, c in zip(mesh.grid, mesh.spatial_coords, strict=True)
        ]
        expected = whole[1, :, lo[0] : hi[0], lo[1] : hi[1], lo[2] : hi[2]]
        assert torch.equal(x, torch.from_numpy(expected))
        assert torch.equal(y, torch.from_numpy(params[1]).double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_block_in_a_narrower_dtype_is_the_float64_block_rounded(
    cosmo: Path, dtype: torch.dtype
) -> None:
    wide, _ = ShardedVolumes(cosmo, dtype=torch.float64)[2]
    narrow, params = ShardedVolumes(cosmo, dtype=dtype)[2]
    assert narrow.dtype == params.dtype == dtype
    assert torch.equal(narrow, wide.to(dtype))


def test_each_rank_reads_at_most_its_share_plus_5_percent(cosmo: Path) -> None:
    sample = 4 * SIZE**3 * 2  # int16 counts of one sample; chunks of 4**3 voxels
    for grid in ((2, 2, 1), (1, 2, 4), (1, 1, 1)):
        for mesh in _meshes(grid):
            data = ShardedVolumes(cosmo, mesh=mesh)
            opened = data.bytes_read  # the metadata, read once per process
            for i in range(len(data)):
                data[i]
            read = (data.bytes_read - opened) / len(data)
            share = sample / np.prod(grid)
            assert share <= read <= 1.05 * share, (grid, mesh.spatial_coords, read, share)


def test_a_halo_reads_the_chunks_it_touches(cosmo: Path) -> None:
    data = ShardedVolumes(cosmo, mesh=_mesh((2, 1, 1), (0, 0, 0)), halo=1)
    opened = data.bytes_read
    x, _ = data[0]
    assert x.shape == (4, SIZE // 2 + 1, SIZE, SIZE)
    chunks = (SIZE // 2 + 4) * SIZE * SIZE * 4 * 2  # one more layer of 4-voxel chunks
    assert data.bytes_read - opened <= 1.05 * chunks


def test_halo_widens_the_block_and_is_clipped_at_the_edges() -> None:
    assert block_slices((16, 10, 10), (2, 1, 1), (0, 0, 0), halo=2) == (
        slice(0, 10),
        slice(0, 10),
        slice(0, 10),
    )
    assert block_slices((16, 10, 10), (2, 1, 1), (1, 0, 0), halo=2)[0] == slice(6, 16)


def test_label_targets_are_blocks_too(seg: Path) -> None:
    labels = _whole(seg, "label")
    mesh = _mesh((1, 2, 2), (0, 1, 0))
    data = ShardedVolumes(seg, mesh=mesh, target="label", halo=1)
    x, y = data[0]
    assert x.shape == (1, SIZE, SIZE // 2 + 1, SIZE // 2 + 1)  # halo on the inner sides only
    assert y.dtype == torch.int64
    assert torch.equal(y, torch.from_numpy(labels[0, :, 8:, :8].astype(np.int64)))


def test_loader_workers_after_the_parent_used_dask(cosmo: Path) -> None:
    # the parent computes on Dask's thread pool, then forks loader workers
    assert float(dask.compute(da.ones((64, 64), chunks=8).sum())[0]) == 64 * 64
    data = ShardedVolumes(cosmo, mesh=_mesh((2, 1, 1), (1, 0, 0)))
    opened = data.bytes_read
    loader = DataLoader(data, batch_size=2, num_workers=2, timeout=60)
    batches = list(loader)
    assert [tuple(b[0].shape) for b in batches] == [(2, 4, 8, 16, 16), (1, 4, 8, 16, 16)]
    # the workers' reads are counted (shared counter): 3 half volumes, 2 openings
    assert data.bytes_read - opened >= 3 * 4 * SIZE**3


def test_reads_are_counted_in_spawned_loader_workers_too(cosmo: Path) -> None:
    # Before: a fork-context counter could not be passed to spawned workers at all.
    data = ShardedVolumes(cosmo)
    opened = data.bytes_read
    loader = DataLoader(data, batch_size=3, num_workers=1, multiprocessing_context="spawn")
    assert [tuple(b[0].shape) for b in loader] == [(3, 4, SIZE, SIZE, SIZE)]
    assert data.bytes_read - opened >= 3 * 4 * SIZE**3 * 2


def test_block_sums_of_all_blocks_are_the_whole_statistics(cosmo: Path) -> None:
    whole = np.log1p(_whole(cosmo).astype(np.float64))
    sums = sum(
        ShardedVolumes(cosmo, mesh=m, halo=2).block_sums(range(3)) for m in _meshes((2, 2, 1))
    )
    np.testing.assert_array_equal(sums[0], whole[:, 0].size)
    np.testing.assert_allclose(sums[1], whole.sum((0, 2, 3, 4)), rtol=1e-12)
    one = ShardedVolumes(cosmo)
    stats = block_stats(one)
    np.testing.assert_allclose(stats.mean, whole.mean((0, 2, 3, 4)), rtol=1e-12)
    np.testing.assert_allclose(stats.std, whole.std((0, 2, 3, 4)), rtol=1e-9)
    with pytest.raises(ValueError, match="blocks cover 6144 voxels per channel, expected 12288"):
        block_stats(ShardedVolumes(cosmo, mesh=_mesh((2, 1, 1), (0, 0, 0))))


def test_run_stats_are_computed_once_and_read_from_the_record(
    cosmo: Path, seg: Path, tmp_path: Path
) -> None:
    data = ShardedVolumes(cosmo)
    stats = run_stats(data, tmp_path)
    np.testing.assert_array_equal(stats.mean, block_stats(data).mean)
    assert not any(tmp_path.iterdir())  # the run records them, with the rest of its record
    recorded = stats.record() | {"mean": [0.5] * 4}
    record_volumes(tmp_path, {"norm_stats": recorded})
    assert run_stats(data, tmp_path).mean == (0.5,) * 4  # read back, not recomputed
    assert run_stats(data, tmp_path, cached=False).mean == stats.mean
    with pytest.raises(ValueError, match="holds statistics for channels .*redshift0"):
        run_stats(ShardedVolumes(seg, target="label"), tmp_path)
    data.set_stats(stats)
    x, _ = data[0]
    assert abs(float(x.double().mean())) < 1  # normalised


def test_bad_inputs_name_what_is_wrong(cosmo: Path, seg: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no variable 'density'"):
        ShardedVolumes(cosmo, variable="density")
    with pytest.raises(
        ValueError,
        match="'params' .* has dims \\('sample', 'param'\\), expected \\(sample, channel, z, y, x",
    ):
        ShardedVolumes(cosmo, variable="params")
    with pytest.raises(ValueError, match="one of them must be the 3 samples of 'sample'"):
        ShardedVolumes(cosmo, target="channel")
    with pytest.raises(ValueError, match="halo must be an integer >= 0"):
        ShardedVolumes(cosmo, halo=-1)
    with pytest.raises(
        ValueError, match="fewer than the blocks of the mesh's .* grid \\(32, 1, 1\\) along"
    ):
        ShardedVolumes(cosmo, mesh=_mesh((32, 1, 1), (0, 0, 0)))
    with pytest.raises(ValueError, match="statistics are for channels \\('a',\\)"):
        ShardedVolumes(cosmo, stats=NormStats(("a",), (0.0,), (1.0,)))
    with pytest.raises(TypeError, match="mesh must be a SpatialMesh or None, got str"):
        ShardedVolumes(cosmo, mesh="depth=2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype must be a floating-point"):
        ShardedVolumes(cosmo, dtype=torch.int16)
    with pytest.raises(FileNotFoundError, match="no such file"):
        ShardedVolumes(tmp_path / "missing.nc")
    odd = tmp_path / "odd.zarr"
    ds = xr.open_zarr(seg).load()
    ds["volume"].attrs["transform"] = "sqrt"
    ds.to_zarr(odd, consolidated=True, zarr_format=2)
    with pytest.raises(ValueError, match="transform 'sqrt'; known: \\('log1p',\\)"):
        ShardedVolumes(odd, target="label")
    data = ShardedVolumes(cosmo)
    with pytest.raises(IndexError, match="sample 3 out of range for 3 samples"):
        data[3]
    with pytest.raises(TypeError, match="sample index must be an integer"):
        data[1.0]  # type: ignore[index]


# Layouts of other data sets, as their own tools write them: (volume dims, label dims).
LAYOUTS = {
    "channels last": (("sample", "z", "y", "x", "channel"), ("sample", "z", "y", "x")),
    "n c x y z": (("n", "c", "x", "y", "z"), ("n", "x", "y", "z")),
    "batch x y z channels": (("batch", "x", "y", "z", "channels"), ("batch", "z", "x", "y")),
}
_RENAMES = {
    "n": {"sample": "n", "channel": "c"},
    "batch": {"sample": "batch", "channel": "channels"},
}


def _relaid(
    store: Path, path: Path, volume_dims: tuple[str, ...], label_dims: tuple[str, ...]
) -> Path:
    """``store`` written by plain xarray with its dims renamed and reordered (4-voxel chunks)."""
    ds = xr.open_zarr(store).load().drop_encoding().rename(_RENAMES.get(volume_dims[0], {}))
    ds["volume"] = ds["volume"].transpose(*volume_dims)
    split = [name for name in ("volume", "label") if name in ds]
    if "label" in ds:
        ds["label"] = ds["label"].transpose(*label_dims)
    chunks = {volume_dims[0]: 1, "z": 4, "y": 4, "x": 4}
    encoding = {
        name: {
            "chunks": tuple(chunks.get(d, ds.sizes[d]) for d in ds[name].dims),
            "compressors": None,
        }
        for name in split
    }
    ds.to_zarr(path, encoding=encoding, write_empty_chunks=True)
    return path


@pytest.mark.parametrize(
    ("store", "layout"), [*(("seg", layout) for layout in LAYOUTS), ("cosmo", "channels last")]
)
def test_a_store_laid_out_another_way_is_read_by_dim_name(
    store: str, layout: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Before: the dims were taken by position, so channels last trained on (x, channel) as
    # (z, y, x) and x, y, z order on transposed volumes, without a word.
    path = request.getfixturevalue(store)
    other = _relaid(path, tmp_path / "other.zarr", *LAYOUTS[layout])
    target = "label" if store == "seg" else "params"
    for mesh in _meshes((2, 1, 2)):
        canonical = ShardedVolumes(path, mesh=mesh, target=target, halo=1)
        relaid = ShardedVolumes(other, mesh=mesh, target=target, halo=1)
        assert relaid.shape == canonical.shape and relaid.channels() == canonical.channels()
        for i in range(len(canonical)):
            for got, want in zip(relaid[i], canonical[i], strict=True):
                assert torch.equal(got, want), (layout, mesh.spatial_coords, i)
        # each rank reads its block only: the same chunks' bytes as in the canonical layout
        before = canonical.bytes_read, relaid.bytes_read
        canonical.read_volume(1), relaid.read_volume(1)
        assert relaid.bytes_read - before[1] == canonical.bytes_read - before[0]


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        (
            ("sample", "channel", "dim_2", "dim_3", "dim_4"),
            "'volume' in .* has dims \\('sample', 'channel', 'dim_2', 'dim_3', 'dim_4'\\), "
            "expected \\(sample, channel, z, y, x\\) in any order",
        ),
        (
            ("sample", "c", "channel", "y", "x"),
            "has dims \\('sample', 'c', 'channel', 'y', 'x'\\), expected \\(sample, channel, "
            "z, y, x\\) in any order, each under one of its names \\(sample: sample, samples",
        ),
    ],
)
def test_a_store_whose_dims_are_not_known_by_name_is_refused(
    tmp_path: Path, dims: tuple[str, ...], message: str
) -> None:
    # Before: any 5-D variable was read by position.
    values = np.zeros((2, 1, 4, 4, 4), dtype=np.float32)
    ds = xr.Dataset({"volume": (dims, values), "params": (("sample", "k"), np.zeros((2, 3)))})
    ds.to_zarr(tmp_path / "unnamed.zarr")
    with pytest.raises(ValueError, match=message):
        ShardedVolumes(tmp_path / "unnamed.zarr")
