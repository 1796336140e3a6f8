"""``sciml cosmoflow|unet3d train --epochs N`` in a finished run's folder trains it on."""

from pathlib import Path

import pytest

from sciml.cli import main
from sciml.volumes.data import write_cosmology, write_segmentation
from tests.training.more_epochs import assert_trains_on

pytestmark = pytest.mark.xdist_group("volumes_cli")

TINY = ["--batch-size", "2", "--width", "2", "--levels", "1", "--workers", "0", "--no-progress"]


@pytest.mark.parametrize("model", ["cosmoflow", "unet3d"])
def test_volumes_train_continues_a_finished_run(tmp_path: Path, model: str) -> None:
    write = write_cosmology if model == "cosmoflow" else write_segmentation
    data = write(tmp_path / "data.zarr", samples=4, size=8, seed=1)
    run = tmp_path / "run"
    command = [model, "train", str(data), "--run-dir", str(run), *TINY]
    assert_trains_on(lambda more: main([*command, *more]), run)
