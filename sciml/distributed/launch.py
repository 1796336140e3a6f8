"""Where this process sits in a job, read from the launcher's environment variables.

:func:`detect_launch` understands torchrun, Slurm (``srun``) and a plain
process; :func:`expand_nodelist` expands Slurm's compressed host lists. Pure
functions of the environment: nothing here starts ``torch.distributed``
(:func:`sciml.distributed.init_distributed` does).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT_PORT", "JOB_PORTS", "LaunchInfo", "Source", "detect_launch", "expand_nodelist"]

Source = Literal["torchrun", "slurm", "single"]

#: Port used when neither the caller, MASTER_PORT nor a Slurm job id gives one.
DEFAULT_PORT = 29500
#: Ports derived from a Slurm job id: below Linux's ephemeral range (32768-60999), from
#: which the kernel takes the local ports of outgoing connections (a derived port there
#: can be in use by one, and the rendezvous fails with EADDRINUSE).
JOB_PORTS = range(12000, 32000)


@dataclass(frozen=True)
class LaunchInfo:
    """Where this process sits in the job, as the launcher described it."""

    source: Source
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a Slurm node list such as ``"gpu[01-03,7],login1"`` into host names.

    Raises:
        ValueError: If the list is empty or malformed.
    """
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[\]]+)(?:\[([^\]]+)\])?(?:,|$)", nodelist.strip()):
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise ValueError(f"malformed range {part!r} in Slurm node list {nodelist!r}")
            for number in range(int(low), int(high or low) + 1):
                hosts.append(f"{prefix}{number:0{len(low)}d}")
    if not hosts:
        raise ValueError(f"empty or malformed Slurm node list {nodelist!r}")
    return hosts


def _int_env(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError as err:
        raise ValueError(f"environment variable {name}={env[name]!r} is not an integer") from err


def _tasks_on_first_node(tasks_per_node: str) -> int:
    """First count of ``SLURM_TASKS_PER_NODE`` (e.g. ``"4(x2),3"`` -> 4)."""
    return int(re.match(r"\d+", tasks_per_node).group())  # type: ignore[union-attr]


def detect_launch(
    env: Mapping[str, str] | None = None,
    *,
    master_addr: str | None = None,
    master_port: int | None = None,
) -> LaunchInfo:
    """Read rank, world size and rendezvous address from the launcher's variables.

    torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) wins over Slurm
    (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``); with neither, or a
    Slurm job of one task, this is a single process. The master address is
    ``master_addr``, else ``MASTER_ADDR``, else the first host of
    ``SLURM_JOB_NODELIST``; the port is ``master_port``, else ``MASTER_PORT``,
    else derived from ``SLURM_JOB_ID`` so that jobs sharing a node differ.

    Args:
        env: Variables to read (default: ``os.environ``).
        master_addr: Explicit rendezvous host.
        master_port: Explicit rendezvous port.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        source: Source = "torchrun"
        rank, world = _int_env(env, "RANK"), _int_env(env, "WORLD_SIZE")
        local_rank = _int_env(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
        local_world = _int_env(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
    elif "SLURM_PROCID" in env and _int_env(env, "SLURM_NTASKS") > 1:
        source = "slurm"
        rank, world = _int_env(env, "SLURM_PROCID"), _int_env(env, "SLURM_NTASKS")
        local_rank = _int_env(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
        per_node = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        local_world = _tasks_on_first_node(per_node) if per_node else world
    else:
        source, rank, world, local_rank, local_world = "single", 0, 1, 0, 1
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside world size {world} ({source} variables)")
    if not 0 <= local_rank < local_world:
        raise ValueError(
            f"local rank {local_rank} is outside the {local_world} local processes "
            f"({source} variables)"
        )

    addr = master_addr or env.get("MASTER_ADDR")
    if addr is None:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        addr = expand_nodelist(nodelist)[0] if source == "slurm" and nodelist else "127.0.0.1"
    if master_port is None:
        if "MASTER_PORT" in env:
            master_port = _int_env(env, "MASTER_PORT")
        elif "SLURM_JOB_ID" in env:
            master_port = JOB_PORTS[_int_env(env, "SLURM_JOB_ID") % len(JOB_PORTS)]
        else:
            master_port = DEFAULT_PORT
    if not 0 < master_port < 65536:
        raise ValueError(f"rendezvous port {master_port} is not a TCP port (1-65535)")
    return LaunchInfo(source, rank, world, local_rank, local_world, addr, master_port)
