"""SIGUSR1/SIGTERM to the geo demo section and the experiment script: checkpoint, exit 3, resume.

The demo section's resumed run is checked as a whole (scores, figures, the
probability map): it is the test of ``sciml demo --only geo`` at quick sizes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sciml.training import EXIT_REQUEUE

ROOT = Path(__file__).parents[2]


def _steps(run: Path) -> list[int]:
    metrics = run / "metrics.csv"
    rows = metrics.read_text().splitlines() if metrics.exists() else []
    return [int(row.split(",")[1]) for row in rows if ",train_step,loss," in row]


def _interrupt(command: list[str], run: Path, signum: int) -> subprocess.CompletedProcess:
    """Start ``command``, signal it once ``run`` logged a training step, wait for it."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not _steps(run) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, process.communicate()
    process.send_signal(signum)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


@pytest.mark.system
def test_geo_demo_section_checkpoints_exits_3_and_resumes(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "sciml.cli", "demo", "--quick", "--only", "geo"]
    command += ["--out", str(tmp_path)]
    tmp_path = tmp_path / "only-geo"  # a partial demo writes to a folder of its own
    run = tmp_path / "geo" / "runs-quick" / "masked"
    stopped = _interrupt(command, run, signal.SIGUSR1)
    assert stopped.returncode == EXIT_REQUEUE, stopped.stderr
    assert "interrupted by a signal" in stopped.stderr and "Traceback" not in stopped.stderr
    report = (tmp_path / "report.md").read_text()
    assert "**Interrupted**" in report and "## OSM road masks" not in report
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["state"]
    assert state["global_step"] >= 1
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    report = (tmp_path / "report.md").read_text()
    assert "## OSM road masks" in report and "Interrupted" not in report
    steps = _steps(run)
    assert steps == list(range(1, len(steps) + 1))  # resumed: every step once
    # the resumed section is the whole one: both models' scores, figures and the map
    section = report[report.index("## OSM road masks for tree segmentation") :]
    assert "| masked |" in section and "| unmasked |" in section and "0.784" in section
    for figure in ("geo/experiment.png", "geo/osbs.png"):
        assert f"({figure})" in section
        assert (tmp_path / figure).stat().st_size > 10_000
    assert (tmp_path / "geo" / "osbs_probability.tif").exists()


@pytest.mark.system
def test_experiment_script_checkpoints_exits_3_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "geo.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "geo_experiment.py"), "--quick"]
    command += ["--run-dir", str(tmp_path / "runs"), "--out", str(out)]
    run = tmp_path / "runs" / "quick-seed0" / "masked"
    stopped = _interrupt(command, run, signal.SIGTERM)
    assert stopped.returncode == EXIT_REQUEUE, stopped.stderr
    assert "interrupted by a signal" in stopped.stderr and not out.exists()
    assert (run / "checkpoints" / "last.pt").exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert out.exists() and "| masked |" in again.stdout
    steps = _steps(run)
    assert steps == list(range(1, len(steps) + 1))
