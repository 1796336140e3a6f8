"""A small distributed job for the launcher tests.

Usage: python dist_job.py OUT_JSON [--die-rank R] [--timeout S]

Every rank initialises through ``sciml.distributed.init_distributed``, takes
part in an all-reduce and writes what it saw to ``OUT_JSON.<rank>``. With
``--die-rank R``, rank R kills itself (SIGKILL) after the first all-reduce and
the others keep reducing, which must fail within the timeout.
"""

import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from sciml.distributed import init_distributed

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--die-rank", type=int, default=None)
parser.add_argument("--timeout", type=float, default=60.0)
args = parser.parse_args()

with init_distributed(timeout=args.timeout) as ctx:
    value = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(value)
    with open(f"{args.out}.{ctx.rank}", "w") as handle:
        json.dump(
            {
                "rank": ctx.rank,
                "world_size": ctx.world_size,
                "local_rank": ctx.local_rank,
                "source": ctx.source,
                "backend": ctx.backend,
                "sum": value.item(),
            },
            handle,
        )
    if args.die_rank is not None:
        if ctx.rank == args.die_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        while time.monotonic() - start < 10 * args.timeout:
            dist.all_reduce(torch.ones(1))
            time.sleep(0.05)
        sys.exit("survivor was never told that its peer died")
