"""slurm/weather.sbatch on the real local Slurm: 2 tasks, SIGUSR1 mid-run, requeue, resume.

Uses the one-node cluster of tests/test_slurm.py (skipped where Slurm or root is missing).
"""

import csv
import time
from pathlib import Path

from sciml.training.checkpoint import read_checkpoint
from tests.test_slurm import (  # noqa: F401, F811
    ROOT,
    _sbatch,
    _wait_gone,
    pytestmark,
    signal_and_release_requeued,
    slurm_env,
)
from tests.weather.postprocess.test_evaluate import _ensemble

SBATCH = ROOT / "slurm" / "weather.sbatch"
# 8 epochs of 3 steps: the signal, sent after the first steps, must reach a job still training
# (2 epochs took 0.9 s, less than a SIGUSR1 through scancel can take on a loaded machine)
EPOCHS = 8
ARGS = ["--model", "mlp", "--members", "2", "--epochs", str(EPOCHS), "--batch-size", "2"]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_interrupted_requeued_and_resumed_where_it_stopped(
    slurm_env: dict[str, str],  # noqa: F811 - the fixture of tests/test_slurm.py
    tmp_path: Path,
) -> None:
    data, run, log = tmp_path / "train.nc", tmp_path / "run", tmp_path / "job.out"
    _ensemble(dates=6, seed=0).to_netcdf(data)
    job = _sbatch(
        slurm_env,
        "--ntasks=2",
        f"--output={log}",
        str(SBATCH),
        str(data),
        "--run-dir",
        str(run),
        *ARGS,
    )
    deadline = time.monotonic() + 120
    while not (run / "metrics.csv").exists() or len(_rows(run)) < 2:
        assert time.monotonic() < deadline, "the job did not start training"
        time.sleep(0.05)
    signal_and_release_requeued(slurm_env, job, log)
    _wait_gone(slurm_env, job)
    text = log.read_text()
    assert "mlp on 2 members: interrupted" in text and "mlp on 2 members: completed" in text, text
    assert f"job {job} (restart 1)" in text
    # resumed, not restarted: every step of the epochs (5 training dates x 2 lead times
    # shared by 2 tasks, batches of 2 per task: 3 steps) logged once, in order (fit's tests
    # show the resumed values are exact)
    steps = [int(r["step"]) for r in _rows(run) if r["split"] == "train_step"]
    assert steps == list(range(1, EPOCHS * 3 + 1))
    assert read_checkpoint(run / "checkpoints" / "last.pt")["state"]["global_step"] == EPOCHS * 3
