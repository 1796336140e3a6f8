"""Process groups and spawned ranks: torchrun, Slurm, dead ranks, signals."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from sciml.distributed import (
    DEVICE_AWARE,
    DistributedError,
    PreemptionFlag,
    backend_name,
    detect_launch,
    init_distributed,
    spawn,
    torch_threads,
)

JOB = Path(__file__).parents[1] / "scripts" / "dist_job.py"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_"))}
    for key in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(extra)
    return env


def _read(out: Path, world: int) -> list[dict]:
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(world)]


def test_single_process_group() -> None:
    with init_distributed(backend="gloo", env={}) as ctx:
        assert (ctx.source, ctx.rank, ctx.world_size, ctx.backend) == ("single", 0, 1, "gloo")
        assert dist.is_initialized() and dist.get_world_size() == 1
    assert not dist.is_initialized()


def test_torchrun_two_gloo_processes(tmp_path: Path) -> None:
    out = tmp_path / "torchrun"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--standalone",
        str(JOB),
        str(out),
    ]
    subprocess.run(cmd, env=_clean_env(), check=True, timeout=240, capture_output=True)
    ranks = _read(out, 2)
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["source"] == "torchrun" and r["world_size"] == 2 for r in ranks)
    assert all(r["sum"] == 3.0 and r["backend"] == "gloo" for r in ranks)
    assert [r["local_rank"] for r in ranks] == [0, 1]


def _slurm_env(rank: int, world: int, job_id: int) -> dict[str, str]:
    return _clean_env(
        SLURM_PROCID=str(rank),
        SLURM_NTASKS=str(world),
        SLURM_LOCALID=str(rank),
        SLURM_TASKS_PER_NODE=str(world),
        SLURM_JOB_NODELIST="localhost",
        SLURM_JOB_ID=str(job_id),
    )


def test_slurm_variables_three_processes(tmp_path: Path) -> None:
    out = tmp_path / "slurm"
    job_id = 40000 + os.getpid() % 10000
    procs = [
        subprocess.Popen(
            [sys.executable, str(JOB), str(out)],
            env=_slurm_env(r, 3, job_id),
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    ranks = _read(out, 3)
    assert all(r["source"] == "slurm" and r["world_size"] == 3 for r in ranks)
    assert all(r["sum"] == 6.0 for r in ranks)


def test_dead_rank_makes_survivors_fail_within_timeout(tmp_path: Path) -> None:
    out = tmp_path / "dead"
    job_id = 50000 + os.getpid() % 10000
    timeout = 10.0
    procs = [
        subprocess.Popen(
            [sys.executable, str(JOB), str(out), "--die-rank", "1", "--timeout", str(timeout)],
            env=_slurm_env(r, 2, job_id),
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    start = time.monotonic()
    _, err = procs[0].communicate(timeout=120)
    survivor_seconds = time.monotonic() - start
    procs[1].wait(timeout=30)
    assert procs[1].returncode == -9  # the rank that was killed
    assert procs[0].returncode not in (0, None), err
    assert "DistributedError" in err and "rank 0 of 2" in err, err
    # the survivor did not hang: it failed well inside ten of its timeouts
    assert survivor_seconds < 10 * timeout


def _rank_sum(offset: float) -> float:
    import torch

    value = torch.tensor([dist.get_rank() + offset])
    dist.all_reduce(value)
    return value.item()


def _fail_on_rank_one() -> None:
    if dist.get_rank() == 1:
        raise ValueError("rank one is broken")


def test_spawn_returns_results_and_reports_failures() -> None:
    assert spawn(_rank_sum, 2, 0.5) == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="rank 1 of 2 failed(.|\n)*rank one is broken"):
        spawn(_fail_on_rank_one, 2)


def _environment_and_folder(name: str) -> tuple[str | None, str, int]:
    return os.environ.get(name), os.getcwd(), torch.get_num_threads()


def test_ranks_see_the_callers_environment_and_folder_at_each_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fork server started by an earlier call has the environment and folder of that
    # time: a rank must see the caller's of this call
    name = "SCIML_TEST_SPAWN_VALUE"
    monkeypatch.delenv(name, raising=False)
    assert spawn(_environment_and_folder, 1, name) == [(None, os.getcwd(), 1)]
    monkeypatch.setenv(name, "set after the first call")
    monkeypatch.chdir(tmp_path)
    got = spawn(_environment_and_folder, 2, name, threads=2)
    assert got == [("set after the first call", str(tmp_path), 2)] * 2


def test_distributed_error_is_a_runtime_error() -> None:
    assert issubclass(DistributedError, RuntimeError)


def test_bad_launch_values_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="local rank 2 is outside the 2 local processes"):
        detect_launch({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="port 70000 is not a TCP port"):
        detect_launch({"MASTER_PORT": "70000"})
    with pytest.raises(ValueError, match="timeout must be > 0 seconds"):
        init_distributed(backend="gloo", env={}, timeout=0)
    with pytest.raises(ValueError, match="nprocs must be an integer >= 1, got 0"):
        spawn(_rank_sum, 0, 0.5)  # used to return [] without running anything
    with pytest.raises(ValueError, match="timeout must be > 0 and threads >= 1"):
        spawn(_rank_sum, 1, 0.5, threads=0)


def _signalled_rank(rank_to_signal: int) -> bool:
    with PreemptionFlag() as flag:
        if dist.get_rank() == rank_to_signal:
            os.kill(os.getpid(), signal.SIGUSR1)
        return flag.any_rank()


def test_preemption_flag_reaches_every_rank_and_nests() -> None:
    assert spawn(_signalled_rank, 2, 1) == [True, True]
    with PreemptionFlag() as outer:
        os.kill(os.getpid(), signal.SIGTERM)
        with PreemptionFlag() as inner:
            assert inner.received == signal.SIGTERM  # a signal before it is not lost
        assert outer.received == signal.SIGTERM
    before = signal.getsignal(signal.SIGUSR1)
    with PreemptionFlag() as outer:
        with PreemptionFlag() as inner:
            os.kill(os.getpid(), signal.SIGUSR1)
        assert inner.received == outer.received == signal.SIGUSR1  # passed on outwards
    assert signal.getsignal(signal.SIGUSR1) == before
    with PreemptionFlag(enabled=False) as off:
        assert not off.any_rank()


def _signal_self_then_sum(offset: float) -> float:
    os.kill(os.getpid(), signal.SIGUSR1)  # Slurm signals every process of the job
    return _rank_sum(offset)


def test_spawned_ranks_survive_sigusr1() -> None:
    assert spawn(_signal_self_then_sum, 2, 0.5) == [2.0, 2.0]


def test_nccl_groups_are_device_aware() -> None:
    """NCCL runs get cpu:gloo,cuda:nccl groups, so CPU tensors never reach NCCL."""
    assert DEVICE_AWARE["nccl"] == "cpu:gloo,cuda:nccl"
    assert backend_name("cpu:gloo,cuda:nccl") == "nccl" and backend_name("gloo") == "gloo"


def test_torch_threads_restores_the_count_and_rejects_bad_counts() -> None:
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    with torch_threads(None):
        assert torch.get_num_threads() == before
    assert torch.get_num_threads() == before
    for bad in (0, -1, 1.5, True, "2"):
        with (
            pytest.raises(ValueError, match="threads must be an integer >= 1 or None"),
            torch_threads(bad),  # type: ignore[arg-type]
        ):
            pass
    assert torch.get_num_threads() == before
