"""The weather section of ``sciml demo`` (quick mode)."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciml.demos.weather import _train_runs, demo
from sciml.distributed import torch_threads
from sciml.weather.postprocess.config import PostprocessConfig


@pytest.mark.system
def test_demo_quick_writes_linked_figures(tmp_path: Path) -> None:
    markdown = demo(tmp_path, quick=True)
    assert markdown.startswith("## Ensemble weather")
    links = re.findall(r"\]\(([^)]+)\)", markdown)
    assert len(links) == 8
    for link in links:
        assert (tmp_path / link).stat().st_size > 1000
    assert (tmp_path / "weather" / "toy_ensemble.nc").exists()
    assert "| lead | crps | crps_fair |" in markdown
    # post-processing: EMOS on 2 and 4 members, the MLP on 2, the raw 4 and 2
    assert "| model | crps | crps_skill | crps_efi | crps_efi_skill | crps_extreme |" in markdown
    for model in ("raw_4", "raw_2", "emos_2", "emos_4", "mlp_2"):
        assert f"\n| {model} |" in markdown
    assert "the climate data's start dates" in markdown


def test_the_post_processors_train_on_one_torch_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: on one thread per core; the MLP's threads waited on each other (on 2 busy
    # cores its training took 30 s of CPU instead of 8.5 s)
    threads: dict[str, int] = {}

    def record(train: xr.Dataset, config: PostprocessConfig, run_dir: Path) -> str:
        threads[f"{config.model}_{config.members}"] = torch.get_num_threads()
        return "completed"

    monkeypatch.setattr("sciml.weather.postprocess.train.train_postprocessor", record)
    ensemble = xr.Dataset({"psi": (("member",), np.zeros(4))})
    with torch_threads(2):
        runs = _train_runs(ensemble, tmp_path, k=2, epochs=1)
        assert torch.get_num_threads() == 2  # restored
    assert [run.name for run in runs] == ["emos_2", "emos_4", "mlp_2"]
    assert threads == {"emos_2": 1, "emos_4": 1, "mlp_2": 1}
