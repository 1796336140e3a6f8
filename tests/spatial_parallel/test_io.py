"""sciml.spatial_parallel.io.read_block: the batch split, and reads inside loader workers."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from sciml.spatial_parallel import SpatialMesh, read_block, shard
from sciml.spatial_parallel.shapes import marked_global

pytestmark = pytest.mark.xdist_group("spatial_io")

WORKERS_AFTER_DASK = textwrap.dedent(
    """
    import dask.array as da, xarray as xr
    from torch.utils.data import DataLoader, Dataset
    from sciml.distributed import init_distributed
    from sciml.spatial_parallel import SpatialMesh, read_block
    init_distributed(backend="gloo")
    mesh = SpatialMesh()
    array = xr.DataArray(da.random.random((4, 1, 8, 8, 8), chunks=(1, 1, 4, 4, 4)))
    array.sum().compute()  # the parent uses Dask's thread pool, then forks workers

    class Blocks(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return read_block(array[i : i + 1], mesh, batch="replica")

    print([tuple(b.shape) for b in DataLoader(Blocks(), batch_size=2, num_workers=2)])
    """
)


def test_read_block_in_loader_workers_after_the_parent_used_dask(tmp_path: Path) -> None:
    # Before: the forked worker waited forever on the parent's dead thread pool.
    script = tmp_path / "workers.py"
    script.write_text(WORKERS_AFTER_DASK)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[(2, 1, 1, 8, 8, 8), (2, 1, 1, 8, 8, 8)]"


def _mesh_at(shape: tuple[int, int, int, int], coords: tuple[int, int, int, int]) -> SpatialMesh:
    """A mesh for its block arithmetic only (no process group)."""
    mesh = SpatialMesh.__new__(SpatialMesh)
    mesh.shape, mesh.coords = shape, coords
    return mesh


@pytest.mark.parametrize("replica", [0, 1])
def test_replica_batches_are_not_split_again(replica: int) -> None:
    # Before: a replica's own batch was split over the replicas again (half batches).
    mesh = _mesh_at((2, 2, 1, 1), (replica, 1, 0, 0))
    array = np.arange(4 * 2 * 4 * 2 * 2, dtype=np.float64).reshape(4, 2, 4, 2, 2)
    global_block = read_block(array, mesh)
    assert torch.equal(global_block, shard(torch.from_numpy(array), mesh))
    assert len(global_block) == 2
    mine = array[replica::2]  # the samples a sampler gave this replica
    block = read_block(mine, mesh, batch="replica")
    assert torch.equal(block, torch.from_numpy(mine[:, :, 2:]))
    # The global shape travels with a block of the global batch (the parallel model
    # then needs no collective to learn it); a replica's own batch has none.
    assert marked_global(global_block) == array.shape
    assert marked_global(block) is None


def test_a_single_replica_block_carries_its_global_shape() -> None:
    mesh = _mesh_at((1, 2, 1, 1), (0, 1, 0, 0))
    array = np.zeros((3, 2, 5, 2, 2))
    for batch in ("global", "replica"):
        assert marked_global(read_block(array, mesh, batch=batch)) == array.shape


def test_read_block_rejects_bad_inputs() -> None:
    with pytest.raises(TypeError, match="expects an array with a shape"):
        read_block([1, 2], None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="global \\(N, C, D, H, W\\) array, got shape \\(2, 2\\)"):
        read_block(np.zeros((2, 2)), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expects a SpatialMesh, got NoneType"):
        read_block(np.zeros((1, 1, 2, 2, 2)), None)  # type: ignore[arg-type]
    mesh = _mesh_at((1, 1, 1, 1), (0, 0, 0, 0))
    with pytest.raises(ValueError, match="batch must be 'global' or 'replica', got 'local'"):
        read_block(np.zeros((1, 1, 2, 2, 2)), mesh, batch="local")  # type: ignore[arg-type]
