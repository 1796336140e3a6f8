"""sciml.volumes.volume_record and train's checks: bad inputs refused before anything is written."""

import json
import re
import shutil
from pathlib import Path

import pytest

from sciml.cli import main
from sciml.volumes.data import write_cosmology, write_segmentation
from sciml.volumes.volume_record import RECORD
from tests.weather.test_grid import _hashes

pytestmark = pytest.mark.xdist_group("volumes_cli")

TINY = ["--epochs", "1", "--batch-size", "2", "--width", "2", "--workers", "0", "--no-progress"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Four samples each: CosmoFlow volumes of 8**3 and 16**3, U-Net volumes of 6**3."""
    folder = tmp_path_factory.mktemp("stores")
    return {
        "cosmo8": write_cosmology(folder / "c8.zarr", samples=4, size=8, seed=1),
        "cosmo16": write_cosmology(folder / "c16.zarr", samples=4, size=16, seed=1),
        "seg6": write_segmentation(folder / "s6.zarr", samples=4, size=6, chunks=3),
    }


def _files(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` but the lock, by relative path (what a refusal must leave)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "run.lock"
    }


def _train(model: str, data: Path, run: Path, *more: str) -> list[str]:
    return [model, "train", str(data), "--run-dir", str(run), *TINY, *more]


def test_the_run_records_its_volumes(stores: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    data = stores["cosmo8"]
    assert main(_train("cosmoflow", data, run, "--levels", "1", "--val", str(data))) == 0
    record = json.loads((run / RECORD).read_text())["config"]
    assert record["train"] == record["val"]
    assert record["train"] == {
        "store": str(data),
        "variable": "volume",
        "dims": {"sample": "sample", "channel": "channel", "z": "z", "y": "y", "x": "x"},
        "dtype": "int16",
        "shape": [4, 8, 8, 8],
        "channels": ["redshift0", "redshift1", "redshift2", "redshift3"],
        "transform": "log1p",
        "target": "params",
        "target_shape": [4],
    }


def test_the_record_holds_the_grid_and_statistics_and_reads_the_previous_format(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    run, data = tmp_path / "run", stores["cosmo8"]
    assert main(_train("cosmoflow", data, run, "--levels", "1")) == 0
    written = json.loads((run / RECORD).read_text())
    record = written["config"]
    assert record["mesh"] == {"data": 1, "depth": 1, "height": 1, "width": 1}
    stats = record["norm_stats"]
    assert stats["channels"] == record["train"]["channels"] and len(stats["mean"]) == 4
    assert {p.name for p in run.glob("*.json")} == {RECORD}
    # the folder as the previous format kept it: three files
    (run / "mesh.json").write_text(
        json.dumps({"kind": "volumes-mesh", "version": 2, "config": {"mesh": record["mesh"]}})
    )
    (run / "norm_stats.json").write_text(json.dumps(stats))
    old = {k: v for k, v in record.items() if k not in ("mesh", "norm_stats")}
    (run / RECORD).write_text(json.dumps(written | {"version": 2, "config": old}))
    assert main(_train("cosmoflow", data, run, "--levels", "1", "--epochs", "2")) == 0
    assert {p.name for p in run.glob("*.json")} == {RECORD}
    resumed = json.loads((run / RECORD).read_text())
    assert resumed["version"] == 3 and resumed["config"]["norm_stats"] == stats
    # a previous-format folder that lost a file is refused by name
    (run / RECORD).write_text(json.dumps(written | {"version": 2, "config": old}))
    before = _files(run)
    assert main(_train("cosmoflow", data, run, "--levels", "1", "--epochs", "3")) == 1
    assert _files(run) == before


def test_a_resume_on_volumes_of_another_shape_is_refused_before_writing(
    stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: CosmoFlow's pooled head takes any shape, so the resumed run trained on
    # the 16**3 volumes with the 8**3 run's statistics and weights, without a word.
    run = tmp_path / "run"
    assert main(_train("cosmoflow", stores["cosmo8"], run, "--levels", "1")) == 0
    before = _files(run)
    capsys.readouterr()
    resumed = _train("cosmoflow", stores["cosmo16"], run, "--levels", "1", "--epochs", "2")
    assert main(resumed) == 1
    err = capsys.readouterr().err
    assert f"--run-dir {run} was started on other volumes" in err
    assert "DATA shape: [4, 8, 8, 8] in the run, [4, 16, 16, 16] now" in err
    assert f"(run: {stores['cosmo8']}, now: {stores['cosmo16']})" in err
    assert _files(run) == before


def test_other_options_are_refused_before_anything_is_written(
    stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(_train("cosmoflow", stores["cosmo8"], run, "--levels", "1")) == 0
    for lock in run.glob("*.lock"):  # as a copy of the folder that left its lock files out
        lock.unlink()
    before = _hashes(run)
    capsys.readouterr()
    assert main(_train("cosmoflow", stores["cosmo8"], run, "--levels", "2", "--lr", "0.5")) == 1
    assert _hashes(run) == before
    err = capsys.readouterr().err
    assert f"--run-dir {run} holds a CosmoFlow / U-Net run with another configuration" in err
    assert "(levels: 1 in the run, 2 now; lr: 0.01 in the run, 0.5 now)" in err
    assert "nothing was written: resume with the options it was started with" in err


def test_validation_volumes_of_another_shape_are_refused_at_the_start(
    stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: the first epoch trained, then the validation pass failed in the model.
    run = tmp_path / "run"
    command = _train("cosmoflow", stores["cosmo8"], run, "--levels", "1")
    assert main([*command, "--val", str(stores["cosmo16"])]) == 1
    err = capsys.readouterr().err
    assert f"--val {stores['cosmo16']} does not fit the training data {stores['cosmo8']}" in err
    assert "shape: [4, 8, 8, 8] in the training data, [4, 16, 16, 16] in --val" in err
    assert not run.exists()  # refused before the statistics pass, nothing written


@pytest.mark.parametrize(
    ("model", "store", "levels", "message"),
    [
        (
            "unet3d",
            "seg6",
            "2",
            "--levels 2: the U-Net halves the volume 2 times, so each of its sizes must divide "
            "by 2\\*\\*2 = 4; the volumes of .*s6.zarr are 6x6x6 \\(z, y, x\\) "
            "\\(--levels 1 fits\\)",
        ),
        (
            "cosmoflow",
            "cosmo8",
            "4",
            "--levels 4: CosmoFlow pools the volume 4 times, so each of its sizes must be at "
            "least 2\\*\\*4 = 16; the volumes of .*c8.zarr are 8x8x8 .*\\(--levels 3 fits\\)",
        ),
    ],
)
def test_levels_that_do_not_fit_the_volumes_are_refused_before_the_statistics(
    stores: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    model: str,
    store: str,
    levels: str,
    message: str,
) -> None:
    # Before: a raw torch error in the first forward pass, after the statistics pass.
    run = tmp_path / "run"
    assert main(_train(model, stores[store], run, "--levels", levels)) == 1
    assert re.search(f"sciml: error: ValueError: {message}", capsys.readouterr().err)
    assert not run.exists()  # refused before the statistics pass, nothing written


def test_a_store_with_a_missing_chunk_is_refused_before_the_statistics(
    stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: the chunk read as zeros, entered the statistics and trained.
    data = Path(shutil.copytree(stores["cosmo8"], tmp_path / "copy.zarr"))
    (data / "volume" / "3.0.1.0.0").unlink()
    run = tmp_path / "run"
    assert main(_train("cosmoflow", data, run, "--levels", "1")) == 1
    err = capsys.readouterr().err
    assert f"DATA: {data}: array 'volume', chunk (3, 0, 1, 0, 0) (file volume/3.0.1.0.0)" in err
    assert not run.exists()  # refused before the statistics pass, nothing written
