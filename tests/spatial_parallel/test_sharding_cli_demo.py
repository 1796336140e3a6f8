"""shard/unshard, the loss helpers, the ``sciml spatial`` commands and the demo section."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sciml.cli import main
from sciml.distributed import spawn
from sciml.spatial_parallel.testing import error_bound
from tests.spatial_parallel.workers import sharded_read, sharding_and_losses


@pytest.mark.parametrize("mesh", [{"data": 2, "depth": 2}, {"data": 2}], ids=["2x2x1x1", "2x1"])
def test_sharding_and_losses(mesh: dict[str, int]) -> None:
    nprocs = 4 if "depth" in mesh else 2
    # float64 sums of the 3 x 2 x 7 x 5 x 4 standard normal values, in another order
    bound = error_bound(0.0, dtype=torch.float64, size=3 * 2 * 7 * 5 * 4)
    for errors in spawn(sharding_and_losses, nprocs, mesh):
        assert max(errors.values()) <= bound, errors


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


@pytest.mark.parametrize(
    "options",
    [
        ["--mesh", "data=2,width=2"],  # the batch of 1 leaves one replica empty
        ["--mesh", "data=2", "--shape", "2x2x16x16x16"],  # replica-averaged gradients
        ["--mesh", "height=2", "--shape", "1x3x8x8x4", "--dtype", "float32"],
    ],
    ids=["data2-width2", "data2", "float32"],
)
def test_cli_check_help_examples(options: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spatial", "check", *options]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("match") and "MISMATCH" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "--stride", "0"], "--stride: expected an integer >= 1, got '0'"),
        (["plan", "--kernel", "0"], "--kernel: expected an integer >= 1, got '0'"),
        (["plan", "--dilation", "-1"], "--dilation: expected an integer >= 1, got '-1'"),
        (["plan", "--padding", "-1"], "--padding: expected an integer >= 0, got '-1'"),
        (["plan", "--shape", "1x0x4x4x4"], "--shape expects 5 positive sizes"),
        (["plan", "--shape", "1x2x4"], "--shape expects 5 sizes NxCxDxHxW"),
        (["plan", "--shape", "1x2x4x4xa"], "--shape expects 5 positive sizes"),
        (["check", "--mesh", "depth=0"], "depth='0': expected an integer >= 1, got '0'"),
        (["check", "--mesh", "time=2"], "unknown axis 'time'; the axes are data, depth"),
        (["check", "--mesh", "depth=2,depth=2"], "axis 'depth' given twice"),
        (["check", "--mesh", "depth"], "--mesh expects e.g. depth=2,height=2"),
        (["check", "--mesh", ""], "--mesh expects e.g. depth=2,height=2"),
        (["check", "--dtype", "float16"], "invalid choice: 'float16'"),
        (["check", "--seed", "-1"], "--seed: expected an integer >= 0, got '-1'"),
    ],
)
def test_cli_rejects_bad_options(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["spatial", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "--kernel", "9", "--padding", "0", "--shape", "1x1x8x8x8"], "smaller than"),
        (
            ["plan", "--mesh", "depth=4", "--kernel", "7", "--shape", "1x1x8x8x8"],
            "not its neighbour",
        ),
        (["check", "--shape", "1x2x16x16x10"], "divisible by 4, got width = 10"),
        (["check", "--mesh", "depth=4", "--shape", "1x2x8x8x8"], "depth = 8 is too small for 4"),
    ],
)
def test_cli_library_errors_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["spatial", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sciml: error: ") and message in err.splitlines()[0]


def test_demo_section(tmp_path: Path) -> None:
    from sciml.demos.spatial import demo

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
