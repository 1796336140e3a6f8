"""shard/unshard, the loss helpers, the ``sciml spatial`` commands and the demo section."""

from __future__ import annotations

from pathlib import Path

import pytest

from sciml.cli import main
from sciml.distributed import spawn
from tests.spatial_parallel.workers import sharded_read, sharding_and_losses


@pytest.mark.parametrize("mesh", [{"data": 2, "depth": 2}, {"data": 2}], ids=["2x2x1x1", "2x1"])
def test_sharding_and_losses(mesh: dict[str, int]) -> None:
    nprocs = 4 if "depth" in mesh else 2
    for errors in spawn(sharding_and_losses, nprocs, mesh):
        assert max(errors.values()) <= 1e-12, errors


def test_cli_plan_prints_halos(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spatial", "plan", "--mesh", "depth=2", "--shape", "1x1x9x4x4"]) == 0
    out = capsys.readouterr().out
    assert "rank 1: block [5, 9) output (5, 9) reads [4, 10): halo 1 before, 1 after" in out


def test_cli_rejects_bad_mesh(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["spatial", "check", "--mesh", "depth=two"])
    assert "--mesh expects" in capsys.readouterr().err


def test_cli_check_two_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spatial", "check", "--mesh", "width=2", "--shape", "1x2x8x8x12"]) == 0
    assert "match" in capsys.readouterr().out


def test_demo_section(tmp_path: Path) -> None:
    from sciml.spatial_parallel.demo import demo

    markdown = demo(tmp_path, quick=True)
    assert "**match**" in markdown
    assert (tmp_path / "spatial_decomposition.png").stat().st_size > 0


def test_read_block_from_netcdf(tmp_path: Path) -> None:
    import numpy as np
    import xarray as xr

    values = np.random.default_rng(0).standard_normal((3, 2, 7, 5, 4)).astype("float32")
    dims = ("n", "c", "d", "h", "w")
    xr.Dataset({"density": (dims, values)}).to_netcdf(tmp_path / "cube.nc")
    errors = spawn(sharded_read, 4, {"data": 2, "depth": 2}, str(tmp_path / "cube.nc"))
    assert max(errors) == 0.0


def test_read_block_rejects_wrong_rank() -> None:
    import numpy as np

    from sciml.spatial_parallel.io import read_block

    with pytest.raises(ValueError, match=r"\(N, C, D, H, W\) array, got shape \(4, 4\)"):
        read_block(np.zeros((4, 4)), None)  # type: ignore[arg-type]
