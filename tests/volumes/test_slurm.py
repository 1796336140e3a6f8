"""slurm/cosmoflow.sbatch on the real local Slurm: 2 tasks, SIGUSR1 mid-run, requeue, resume.

Uses the one-node cluster of tests/test_slurm.py (skipped where Slurm or root is missing).
"""

import csv
import time
from pathlib import Path

import torch

from sciml.training.checkpoint import read_checkpoint
from sciml.volumes.data import write_cosmology
from tests.test_slurm import (  # noqa: F401, F811
    ROOT,
    _run_job,
    _sbatch,
    _wait_gone,
    pytestmark,
    signal_and_release_requeued,
    slurm_env,
)

SBATCH = ROOT / "slurm" / "cosmoflow.sbatch"
ARGS = ["--mesh", "depth=2", "--epochs", "4", "--batch-size", "2", "--width", "4", "--levels", "2"]
ARGS += ["--workers", "0", "--dtype", "float64", "--lr", "0.005"]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return read_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]


def test_two_tasks_interrupted_requeued_and_resumed_equal_one_straight_run(
    slurm_env: dict[str, str],  # noqa: F811 - the fixture of tests/test_slurm.py
    tmp_path: Path,
) -> None:
    data = write_cosmology(tmp_path / "c.zarr", samples=16, size=16, seed=1)
    straight, run, log = tmp_path / "straight", tmp_path / "run", tmp_path / "job.out"
    _run_job(
        slurm_env,
        f"--output={tmp_path}/straight.out",
        str(SBATCH),
        str(data),
        "--run-dir",
        str(straight),
        *ARGS,
    )
    assert len([r for r in _rows(straight) if r["split"] == "train_step"]) == 2 * 32
    job = _sbatch(
        slurm_env, f"--output={log}", str(SBATCH), str(data), "--run-dir", str(run), *ARGS
    )
    deadline = time.monotonic() + 120
    while not (run / "metrics.csv").exists() or len(_rows(run)) < 8:
        assert time.monotonic() < deadline, "the job did not start training"
        time.sleep(0.05)
    signal_and_release_requeued(slurm_env, job, log)
    _wait_gone(slurm_env, job)
    text = log.read_text()
    assert "interrupted after" in text and "completed after 32 steps" in text, text
    assert f"job {job} (restart 1)" in text
    assert _rows(run) == _rows(straight)  # every logged value, bit for bit
    reference = _weights(straight)
    assert all(torch.equal(value, reference[name]) for name, value in _weights(run).items())
