"""Process groups and local ranks.

Init under torchrun, Slurm or one process, device-aware groups, collectives,
launch detection, spawn, cores and the CPU allocator.
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.distributed.collectives import (
        all_reduce_cpu,
        all_reduce_sums,
        backend_devices,
        check_replica,
        collective_device,
        gather_objects,
        on_rank0,
        to_device,
        world,
    )
    from sciml.distributed.cores import usable_cores
    from sciml.distributed.launch import LaunchInfo, detect_launch, expand_nodelist
    from sciml.distributed.process_group import (
        DEVICE_AWARE,
        DistributedContext,
        DistributedError,
        PreemptionFlag,
        backend_name,
        default_backend,
        init_distributed,
        is_main_process,
        print0,
        rank_zero_only,
        shutdown,
        torch_threads,
    )
    from sciml.distributed.spawn import spawn

#: The module of each public name (imported on first use).
_HOMES = {
    "DEVICE_AWARE": "process_group",
    "DistributedContext": "process_group",
    "DistributedError": "process_group",
    "LaunchInfo": "launch",
    "PreemptionFlag": "process_group",
    "all_reduce_cpu": "collectives",
    "all_reduce_sums": "collectives",
    "backend_devices": "collectives",
    "backend_name": "process_group",
    "check_replica": "collectives",
    "collective_device": "collectives",
    "default_backend": "process_group",
    "detect_launch": "launch",
    "expand_nodelist": "launch",
    "gather_objects": "collectives",
    "init_distributed": "process_group",
    "is_main_process": "process_group",
    "on_rank0": "collectives",
    "print0": "process_group",
    "rank_zero_only": "process_group",
    "shutdown": "process_group",
    "spawn": "spawn",
    "to_device": "collectives",
    "torch_threads": "process_group",
    "usable_cores": "cores",
    "world": "collectives",
}

__all__ = [
    "DEVICE_AWARE",
    "DistributedContext",
    "DistributedError",
    "LaunchInfo",
    "PreemptionFlag",
    "all_reduce_cpu",
    "all_reduce_sums",
    "backend_devices",
    "backend_name",
    "check_replica",
    "collective_device",
    "default_backend",
    "detect_launch",
    "expand_nodelist",
    "gather_objects",
    "init_distributed",
    "is_main_process",
    "on_rank0",
    "print0",
    "rank_zero_only",
    "shutdown",
    "spawn",
    "to_device",
    "torch_threads",
    "usable_cores",
    "world",
]

make_lazy(__name__, _HOMES)
