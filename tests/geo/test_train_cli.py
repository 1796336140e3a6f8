"""``sciml geo train|predict``: run folders, checkpoints, signals and option checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
from affine import Affine

from sciml.cli import main
from sciml.geo import RasterGrid
from sciml.geo.rasters import write_geotiff
from sciml.training import EXIT_REQUEUE
from tests.weather.test_grid import _hashes

GRID = RasterGrid.from_bounds((385700.0, 6671900.0, 385732.0, 6671932.0), 0.5, "EPSG:32635")
EPOCHS = 20  # long enough to be signalled mid-run, short enough to finish on a rerun
SMALL = ["--tile", "32", "--overlap", "8", "--base-channels", "4", "--depth", "2"]


@pytest.fixture
def rasters(tmp_path: Path) -> dict[str, Path]:
    """A 64 x 64 image, a left-half mask and labels (255 off the mask) on one UTM grid."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (3, *GRID.shape), dtype=np.uint8)
    mask = np.zeros(GRID.shape, np.uint8)
    mask[:, :40] = 1
    labels = np.where(mask == 1, image[1] > 128, 255).astype(np.uint8)
    paths = {name: tmp_path / f"{name}.tif" for name in ("image", "mask", "labels")}
    for name, values in (("image", image), ("mask", mask), ("labels", labels)):
        write_geotiff(values, paths[name], like=GRID)
    return paths


def _train(rasters: dict[str, Path], run: Path, *extra: str) -> int:
    args = [str(rasters[k]) for k in ("image", "mask", "labels")]
    return main(["geo", "train", *args, "--run-dir", str(run), *SMALL, *extra])


def _predict(rasters: dict[str, Path], run: Path, out: Path, *extra: str) -> int:
    return main(["geo", "predict", str(rasters["image"]), str(out), "--run-dir", str(run), *extra])


@pytest.mark.parametrize(
    "change",
    [
        ["--base-channels", "8"],
        ["--unmasked", "--loss", "dice"],
        ["--lr", "0.01"],
        ["--tile", "64", "--overlap", "8"],
    ],
    ids=["base-channels", "unmasked-dice", "lr", "tile"],
)
def test_other_configuration_is_refused_and_run_stays_usable(
    rasters: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], change: list[str]
) -> None:
    run = tmp_path / "run"
    assert _train(rasters, run, "--epochs", "1") == 0
    before = _hashes(run)
    capsys.readouterr()
    assert _train(rasters, run, "--epochs", "2", *change) == 1
    captured = capsys.readouterr()
    assert "trained" not in captured.out
    assert "another configuration" in captured.err and "new --run-dir" in captured.err
    assert _hashes(run) == before
    out = tmp_path / "prob.tif"
    assert _predict(rasters, run, out, "--tile", "64", "--overlap", "16") == 0


@pytest.mark.parametrize("left_out", ["*.lock", "checkpoints/*.pt"], ids=["locks", "checkpoints"])
def test_a_refused_run_changes_nothing_in_a_folder_left_without(
    rasters: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], left_out: str
) -> None:
    run = tmp_path / "run"
    assert _train(rasters, run, "--epochs", "1") == 0
    # a copy of the folder that left its lock files out, or a run stopped before its first
    # checkpoint: either way model.json says which run the folder holds
    for path in run.glob(left_out):
        path.unlink()
    before = _hashes(run)
    capsys.readouterr()
    assert _train(rasters, run, "--epochs", "2", "--lr", "0.01") == 1
    err = capsys.readouterr().err
    assert f"--run-dir {run} holds a segmenter run with another configuration (lr: 0.001" in err
    assert "nothing was written: pass a new --run-dir (run_dir=) to start a new run" in err
    assert _hashes(run) == before


def test_same_configuration_resumes_and_best_checkpoint_predicts(
    rasters: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert _train(rasters, run, "--epochs", "1") == 0
    assert _train(rasters, run, "--epochs", "2") == 0
    assert "trained 2 epoch(s)" in capsys.readouterr().out
    assert (run / "checkpoints" / "best.pt").exists()
    out = tmp_path / "best.tif"
    assert (
        _predict(rasters, run, out, "--checkpoint", "best", "--tile", "64", "--overlap", "16") == 0
    )
    assert out.exists()


def test_predict_names_a_missing_checkpoint(
    rasters: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert _train(rasters, run, "--epochs", "1") == 0
    (run / "checkpoints" / "best.pt").unlink()
    assert _predict(rasters, run, tmp_path / "p.tif", "--checkpoint", "best") == 1
    err = capsys.readouterr().err
    assert "no 'best' checkpoint" in err and "last.pt" in err
    assert not (tmp_path / "p.tif").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tile", "32", "--overlap", "32"], "--overlap (32) must be smaller than --tile (32)"),
        (["--tile", "36", "--overlap", "8", "--depth", "3"], "divisible by 2**depth = 8"),
    ],
)
def test_train_checks_tiles_before_any_work(
    rasters: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    run = tmp_path / "run"
    args = [str(rasters[k]) for k in ("image", "mask", "labels")]
    assert main(["geo", "train", *args, "--run-dir", str(run), *extra]) == 1
    assert message in capsys.readouterr().err
    assert not run.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "i", "m", "l", "--run-dir", "r", "--epochs", "0"],
        ["train", "i", "m", "l", "--run-dir", "r", "--lr", "0"],
        ["train", "i", "m", "l", "--run-dir", "r", "--lr", "nan"],
        ["train", "i", "m", "l", "--run-dir", "r", "--batch-size", "-1"],
        ["train", "i", "m", "l", "--run-dir", "r", "--overlap", "-1"],
        ["predict", "i", "o", "--run-dir", "r", "--tile", "0"],
        ["mask", "a.osm", "b.tif", "c.tif", "--margin", "-1"],
        ["mask", "a.osm", "b.tif", "c.tif", "--width", "-3"],
        ["mask", "a.osm", "b.tif", "c.tif", "--width", "nan"],
        ["mask", "a.osm", "b.tif", "c.tif", "--workers", "0"],
        ["mask", "a.osm", "b.tif", "c.tif", "--classes", ","],
        ["scene", "out", "--resolution", "-0.5"],
        ["scene", "out", "--bounds", "0", "0", "inf", "1"],
    ],
)
def test_bad_numbers_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["geo", *argv])
    assert exit_info.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_scene_rejects_inverted_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scene"
    assert (
        main(["geo", "scene", str(out), "--bounds", "386000", "6672300", "385840", "6672460"]) == 1
    )
    assert "L < R" in capsys.readouterr().err
    assert not out.exists()


def test_train_rejects_labels_on_another_grid(
    rasters: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shifted = RasterGrid(GRID.crs, GRID.transform @ Affine.translation(1, 0), *GRID.shape)
    write_geotiff(np.zeros(GRID.shape, np.uint8), rasters["labels"], like=shifted)
    assert _train(rasters, tmp_path / "run") == 1
    assert "on another grid than the image" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_train_rejects_label_values(
    rasters: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_geotiff(np.full(GRID.shape, 7, np.uint8), rasters["labels"], like=GRID)
    assert _train(rasters, tmp_path / "run") == 1
    assert "found [7]" in capsys.readouterr().err


def _metric_rows(run: Path) -> int:
    path = run / "metrics.csv"
    return len(path.read_text().splitlines()) - 1 if path.exists() else 0


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGUSR1, id="USR1"),
        # the same handler (PreemptionFlag) and exit, and 15-25 s more
        pytest.param(signal.SIGTERM, id="TERM", marks=pytest.mark.slow),
    ],
)
def test_signal_checkpoints_exits_3_and_rerun_resumes(
    rasters: dict[str, Path], tmp_path: Path, signum: signal.Signals
) -> None:
    run = tmp_path / "run"
    args = [str(rasters[k]) for k in ("image", "mask", "labels")]
    command = [
        sys.executable,
        "-m",
        "sciml.cli",
        "geo",
        "train",
        *args,
        "--run-dir",
        str(run),
        *SMALL,
        "--epochs",
        str(EPOCHS),
        "--batch-size",
        "2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _metric_rows(run) == 0 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    assert process.returncode == EXIT_REQUEUE, err.decode()
    assert b"run the same command again to resume" in out
    assert (run / "checkpoints" / "last.pt").exists()
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["state"]
    assert 1 <= state["global_step"] < EPOCHS * 5  # 9 tiles in batches of 2: 5 steps an epoch
    rerun = subprocess.run(command, env=env, capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert f"trained {EPOCHS} epoch(s)".encode() in rerun.stdout
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["state"]
    assert state["global_step"] == EPOCHS * 5


def test_a_second_process_is_refused_before_writing(
    rasters: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import fcntl

    run = tmp_path / "run"
    assert _train(rasters, run, "--epochs", "1") == 0
    before = _hashes(run)
    with open(run / "run.lock", "a") as held:  # as a process still training holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert _train(rasters, run, "--epochs", "2") == 1  # the same run, resumed
    assert "in use by another training run" in capsys.readouterr().err
    assert _hashes(run) == before


def test_signal_while_loading_data_stops_after_one_checkpointed_step(
    rasters: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sciml.geo import rasters as rasters_module

    read = rasters_module.read_image

    def read_then_signal(path: str | Path) -> xr.DataArray:
        os.kill(os.getpid(), signal.SIGUSR1)  # as Slurm would, before training starts
        return read(path)

    monkeypatch.setattr(rasters_module, "read_image", read_then_signal)
    run = tmp_path / "run"
    assert _train(rasters, run, "--epochs", "3") == EXIT_REQUEUE
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["state"]
    assert state["global_step"] == 1
