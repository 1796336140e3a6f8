"""The CosmoFlow / U-Net section of ``sciml demo`` (quick mode)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sciml.demos import SECTIONS, volumes

pytestmark = pytest.mark.xdist_group("demo_volumes")


@pytest.mark.system
def test_demo_quick_trains_both_models_on_two_processes_and_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SECTIONS["volumes"] == "sciml.demos.volumes"
    # a smaller plan than the section's 512^3 on 2,048 ranks (tested in the planner's tests)
    monkeypatch.setattr(volumes, "PLAN_SHAPE", (1, 4, 128, 128, 128))
    monkeypatch.setattr(volumes, "PLAN_WORLD", 8)
    markdown = volumes.demo(tmp_path, quick=True)
    assert markdown.startswith("## CosmoFlow and a 3D U-Net from sharded files")
    for model, metric in (("cosmoflow", "mae"), ("unet3d", "accuracy")):
        assert f"| step | loss | {metric} | epoch train_loss |" in markdown
        perf = (tmp_path / "volumes" / model / "perf.csv").read_text()
        assert {line.split(",")[2] for line in perf.splitlines()[1:]} == {"0", "1"}  # ranks
    assert markdown.count("| rank | samples_per_s | step_seconds | stall_fraction |") == 2
    assert "3 steps of 2 samples" in markdown  # 6 samples, one epoch
    assert "![training losses](volumes/losses.png)" in markdown
    assert (tmp_path / "volumes" / "losses.png").stat().st_size > 10_000
    # the plan, its recommendation marked
    assert "(1, 4, 128, 128, 128) on 8 ranks" in markdown
    assert re.search(r"^\*\s+1 x \d+ x \d+ x \d+ ", markdown, flags=re.M)


def test_the_training_ranks_do_not_import_matplotlib() -> None:
    # each spawned rank imports this module to find its function: matplotlib would
    # cost every rank 0.3-0.9 s of CPU at start for tables only the parent writes
    code = "import sys, sciml.demos.volumes; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
