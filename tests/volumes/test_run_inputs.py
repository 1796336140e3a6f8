"""cosmoflow|unet3d train: stores checked before the run folder is written; a run that
failed before its first checkpoint reruns in the same folder with corrected inputs."""

from pathlib import Path
from typing import Any

import pytest
import xarray as xr

from sciml.cli import main
from sciml.volumes.data import write_cosmology
from sciml.volumes.volume_record import recorded_stats
from tests.file_digests import digests

pytestmark = pytest.mark.xdist_group("volumes_cli")

TINY = ["--epochs", "1", "--batch-size", "2", "--width", "2", "--levels", "1", "--workers", "0"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A training store, another one (other values) and one of 0 samples."""
    folder = tmp_path_factory.mktemp("stores")
    good = write_cosmology(folder / "good.zarr", samples=2, size=4)
    other = write_cosmology(folder / "other.zarr", samples=2, size=4, seed=7)
    empty = folder / "empty.zarr"
    xr.open_zarr(good).load().isel(sample=slice(0, 0)).drop_encoding().to_zarr(empty, zarr_format=2)
    return {"good": good, "other": other, "empty": empty}


def _train(data: Path, run: Path, *extra: str) -> int:
    return main(
        ["cosmoflow", "train", str(data), "--run-dir", str(run), "--no-progress", *TINY, *extra]
    )


@pytest.mark.parametrize("option", ["DATA", "--val"])
def test_a_store_of_no_samples_is_refused_before_anything_is_written(
    option: str, stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: --val: "val_dataset is empty" after mesh.json, norm_stats.json and volumes.json
    # were written; DATA: "NormStats ... non-finite mean or a std that is not > 0".
    run, empty = tmp_path / "run", stores["empty"]
    before = digests(*stores.values(), run)
    if option == "DATA":
        assert _train(empty, run) == 1
    else:
        assert _train(stores["good"], run, "--val", str(empty)) == 1
    err = capsys.readouterr().err
    assert f"{option}: {empty} has no samples: 'volume' has 0 along its sample dim" in err
    assert digests(*stores.values(), run) == before  # the run folder not even created


def test_a_run_that_failed_before_its_first_checkpoint_reruns_with_corrected_inputs(
    stores: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: the rerun was refused as "another configuration (val.store: ...)": the failed
    # run's records locked the user out of their own --run-dir.
    run = tmp_path / "run"

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the first epoch crashed")

    with monkeypatch.context() as patch:
        patch.setattr("sciml.volumes.train.fit", crash)
        assert _train(stores["other"], run, "--val", str(stores["other"]), "--mesh", "depth=1") == 1
    assert "the first epoch crashed" in capsys.readouterr().err
    assert "volumes.json" in {p.name for p in run.iterdir()}
    stale = recorded_stats(run)
    # corrected: another training store and --val; the statistics are those of the new data
    assert _train(stores["good"], run, "--val", str(stores["good"])) == 0
    assert "completed after 1 steps" in capsys.readouterr().out
    fresh = recorded_stats(run)
    assert fresh != stale
    assert _train(stores["good"], tmp_path / "alone") == 0
    assert recorded_stats(tmp_path / "alone") == fresh
    # from its first checkpoint on, the run's records bind: another --val is refused, untouched
    before = digests(run)
    assert _train(stores["good"], run, "--val", str(stores["other"]), "--epochs", "2") == 1
    assert "another configuration (val.store:" in capsys.readouterr().err
    assert digests(run) == before
