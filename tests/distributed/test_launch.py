"""Launch detection: torchrun and Slurm variables, node lists, and the errors for bad ones."""

import pytest

from sciml.distributed.launch import JOB_PORTS, detect_launch, expand_nodelist


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node1", ["node1"]),
        ("gpu[01-03,7],login1", ["gpu01", "gpu02", "gpu03", "gpu7", "login1"]),
        ("a[8-10]", ["a8", "a9", "a10"]),
        ("nid[0009-0011]", ["nid0009", "nid0010", "nid0011"]),
    ],
)
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


def test_expand_nodelist_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="malformed"):
        expand_nodelist("gpu[a-b]")


def test_detect_launch_sources() -> None:
    torchrun = detect_launch(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "h0",
            "MASTER_PORT": "1234",
        }
    )
    assert (torchrun.source, torchrun.rank, torchrun.world_size) == ("torchrun", 3, 4)
    assert (torchrun.local_rank, torchrun.local_world_size) == (1, 2)
    assert (torchrun.master_addr, torchrun.master_port) == ("h0", 1234)

    slurm = detect_launch(
        {
            "SLURM_PROCID": "5",
            "SLURM_NTASKS": "8",
            "SLURM_LOCALID": "1",
            "SLURM_TASKS_PER_NODE": "4(x2)",
            "SLURM_JOB_NODELIST": "gpu[12-13]",
            "SLURM_JOB_ID": "123456",
        }
    )
    assert (slurm.source, slurm.rank, slurm.world_size, slurm.local_rank) == ("slurm", 5, 8, 1)
    assert slurm.local_world_size == 4
    assert slurm.master_addr == "gpu12"
    assert slurm.master_port == JOB_PORTS[123456 % len(JOB_PORTS)] < 32768  # not ephemeral
    explicit = detect_launch(
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "gpu[12-13]"},
        master_addr="10.0.0.5",
        master_port=4000,
    )
    assert (explicit.master_addr, explicit.master_port) == ("10.0.0.5", 4000)

    # torchrun inside a Slurm allocation: torchrun's variables win
    both = detect_launch({"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert both.source == "torchrun"
    # a one-task Slurm job (python run directly in sbatch) is a single process
    assert detect_launch({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}).source == "single"
    assert detect_launch({}).source == "single"


def test_detect_launch_rejects_bad_variables() -> None:
    with pytest.raises(ValueError, match="RANK"):
        detect_launch({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="outside world size"):
        detect_launch({"RANK": "2", "WORLD_SIZE": "2"})
