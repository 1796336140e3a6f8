"""The batch scripts under slurm/ and the user guide's Dask workers as Slurm jobs, on a real
one-node Slurm started for the tests.

Needs Debian's slurmctld, slurmd, slurm-client and munge and root (``.ci/run``
installs them on CI); skipped, with the reason, where they are missing.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[1]
CLUSTER = ROOT / "slurm" / "local-cluster.sh"
SBATCH = ROOT / "slurm" / "train.sbatch"

pytestmark = [
    pytest.mark.system,
    pytest.mark.slurm,
    pytest.mark.xdist_group("slurm"),
    pytest.mark.skipif(
        shutil.which("slurmctld") is None or os.geteuid() != 0,
        reason="needs root and Slurm (apt-get install slurmctld slurmd slurm-client munge)",
    ),
]


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    state = tmp_path_factory.mktemp("slurm")
    subprocess.run(["bash", str(CLUSTER), "start", str(state)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYTEST_"))}
    env |= {"SLURM_CONF": str(state / "slurm.conf"), "SCIML_VENV": str(Path(sys.prefix))}
    yield env
    subprocess.run(["bash", str(CLUSTER), "stop", str(state)], check=False, timeout=60)


def _sbatch(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", *args],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip().split(";")[0]


def _state(env: dict[str, str], job: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True, timeout=30
    )
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        return "UNKNOWN"  # slurmctld busy: not the same as gone
    return out.stdout.strip()


def _wait_gone(env: dict[str, str], job: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while _state(env, job) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _state(env, job), f"job {job} still queued after {seconds} s"


def _run_job(env: dict[str, str], *args: str) -> str:
    """Submit a batch job, wait until it has left the queue, and check that it completed.

    Polls the queue twice a second: ``sbatch --wait`` polls 2 s, 10 s, then every
    32 s after the submission, up to half a minute after a job of 10 to 40 s ends.
    """
    job = _sbatch(env, *args)
    _wait_gone(env, job)
    record = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    outcome = [re.search(rf"\b{key}=(\S+)", record) for key in ("JobState", "ExitCode")]
    assert [m and m[1] for m in outcome] == ["COMPLETED", "0:0"], (
        f"job {job}: expected JobState=COMPLETED ExitCode=0:0, got {record}"
    )
    return job


def signal_and_release_requeued(env: dict[str, str], job: str, log: Path) -> None:
    """SIGUSR1 to a running job (what Slurm sends with --signal=USR1@120 before the limit),
    wait until the batch script has requeued it, then let it start again."""
    subprocess.run(["scancel", "--signal=USR1", job], env=env, check=True, timeout=30)
    deadline = time.monotonic() + 120
    while "requeueing" not in (log.read_text() if log.exists() else "") or (
        _state(env, job) != "PENDING"
    ):
        assert time.monotonic() < deadline, f"the job never requeued itself:\n{log.read_text()}"
        time.sleep(0.2)
    # A requeued job waits for its begin time (minutes); let it start sooner, but not
    # in the same second: slurmd rejects a credential issued when the old one was
    # revoked ("Job credential revoked"), and Slurm's own delay exists for that.
    time.sleep(3)
    subprocess.run(
        ["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, check=True, timeout=30
    )


def test_srun_two_tasks_initialise_from_slurm(slurm_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "ranks"
    job = _run_job(
        slurm_env,
        "--ntasks=2",
        f"--output={tmp_path}/job.out",
        str(SBATCH),
        sys.executable,
        "tests/scripts/dist_job.py",
        str(out),
    )
    ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(2)]
    assert all(r["source"] == "slurm" and r["world_size"] == 2 for r in ranks), ranks
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["sum"] == 3.0 for r in ranks)
    assert f"job {job} (restart 0)" in (tmp_path / "job.out").read_text()


def test_signal_checkpoints_requeues_and_resumes(slurm_env: dict[str, str], tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    subprocess.run(
        [sys.executable, "tests/scripts/train_job.py", str(straight)],
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    run = tmp_path / "run"
    log = tmp_path / "job.out"
    job = _sbatch(
        slurm_env,
        f"--output={log}",
        str(SBATCH),
        sys.executable,
        "tests/scripts/train_job.py",
        str(run),
        "--slow",
        "0.05",
    )
    metrics = run / "metrics.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) > 8:
            break
        time.sleep(0.1)
    signal_and_release_requeued(slurm_env, job, log)
    deadline = time.monotonic() + 180
    while not (run / "final.pt").exists():  # written by the resumed run when it completes
        assert time.monotonic() < deadline, f"the requeued job did not finish:\n{log.read_text()}"
        time.sleep(0.2)
    _wait_gone(slurm_env, job)
    text = log.read_text()
    assert "interrupted at step" in text and f"job {job} (restart 1)" in text, text
    a = torch.load(straight / "final.pt", weights_only=True)
    b = torch.load(run / "final.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_readme_dask_section_evaluates_on_slurm(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """The guide's Dask section (docs/guide/gpu_cluster.md, once the README's) as pasted on
    the cluster, its SLURMCluster block included (which test_readme leaves out): the Dask
    workers are jobs of the local Slurm, and the scores are the threaded ones."""
    from tests.test_readme import BLOCKS, _command

    blocks = [block for block in BLOCKS if block.section == "Dask"]
    assert any("SLURMCluster(" in block.code for block in blocks)
    venv_bin = str(Path(sys.executable).parent)
    env = slurm_env | {"PATH": venv_bin + os.pathsep + slurm_env.get("PATH", "")}
    for block in blocks:
        run = subprocess.run(
            _command(block, tmp_path),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, (
            f"{block.page} line {block.line} (Dask, {block.language}) exited with "
            f"{run.returncode}:\n{run.stdout[-4000:]}"
        )
    assert "the same scores on 36 rows" in run.stdout, run.stdout[-4000:]
    # Slurm wrote each worker job's log (dask-logs/dask-worker-<job id>.err: a worker
    # logs on stderr); the cluster cancelled the jobs when it closed
    logs = sorted((tmp_path / "dask-logs").glob("dask-worker-*.err"))
    assert len(logs) == 2, logs
    for log in logs:
        assert "Registered to:" in log.read_text(), log.read_text()
        _wait_gone(slurm_env, log.stem.rpartition("-")[2], seconds=60)
