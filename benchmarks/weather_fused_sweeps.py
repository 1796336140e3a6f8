"""Fused copies against separate runs: training throughput of K post-processors at once.

Usage: python benchmarks/weather_fused_sweeps.py [--quick] [--models mlp pooled unet]
       [--copies 1 2 4 8] [--rounds 5] [--steps 5] [--strategy auto|vmap|loop] [--out PATH]

For each model family and K, K copies (seeds 0..K-1) of the model at the evaluation
preset's sizes (``qg-imperfect-v1``: 5 of 10 members, psi and q on 2 levels, 32 x 32,
topography, batches of 8, periodic longitudes) train with Adam on the Gaussian CRPS:

* ``fused``: one :class:`~sciml.training.fused.FusedModels` step trains all K (its
  ``--strategy``: ``auto`` calls the copies one after another on the CPU, ``vmap``
  batches them);
* ``sequential``: the K separate models step one after another (K runs one after
  another, as a sweep runs today), in the same process and on the same threads;
* ``concurrent``: K processes at once, one model each, with the cores shared between
  them (``max(1, cores // K)`` threads each).

Fused and sequential are timed in interleaved rounds whose order alternates; a round
times ``steps`` steps of each and gives one ratio. The rounds also time the sequential
steps on one thread, which bounds what fusion gains by filling idle cores: if a fused
step kept every core busy at one thread's speed, its speed-up would be
``cores * t_all / t_one`` (``t_all``: a separate step on all the process's threads,
``t_one``: on one), the ``ceiling`` column (on two cores it reaches the target 2 only where
two threads are no faster than one). Only batched kernels faster per sample than one
thread's separate kernels could pass it (``--strategy vmap`` measures the batched ones).
The table shows samples per second summed over the K models
(``K * batch * steps / seconds``), the median speed-up of fused over sequential and its
95% percentile-bootstrap interval over rounds, the concurrent
processes' samples per second (the slowest process's wall time, after a barrier), and
each set-up's peak memory above the process's state once its models are built (the
largest resident set: a fresh process per set-up, ``ru_maxrss``). The target is a fused
speed-up of at least 2 at K = 4 for the MLP and the pooled model.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _report import write_report
from _spatial_workloads import median_interval

from sciml.datasets.sampling import seed_everything
from sciml.distributed import spawn, torch_threads
from sciml.training.fused import STRATEGIES, FusedModels
from sciml.weather.postprocess.models import PostProcessor, gaussian_crps_loss
from sciml.weather.postprocess.pooled import PooledPostProcessor

TARGET = 2.0
#: The evaluation preset's samples: batch, members seen, channels (2 variables x 2 levels), grid.
BATCH, MEMBERS, CHANNELS, GRID = 8, 5, 4, 32
BUILDERS: dict[str, Callable[[], torch.nn.Module]] = {
    "mlp": lambda: PostProcessor(CHANNELS, static=1, periodic=True),
    "pooled": lambda: PooledPostProcessor(CHANNELS, static=1, periodic=True),
    "unet": lambda: PostProcessor(CHANNELS, static=1, backbone="unet", periodic=True),
}


def _copies(name: str, k: int, device: str = "cpu") -> list[torch.nn.Module]:
    models = []
    for seed in range(k):
        seed_everything(seed)
        models.append(BUILDERS[name]().to(device))
    return models


def _batch(k: int | None, device: str = "cpu") -> dict[str, torch.Tensor]:
    """A preset-shaped batch (``k``: one per copy, stacked; ``None``: one)."""
    lead = (k,) if k else ()
    generator = torch.Generator().manual_seed(0)
    batch = {
        "members": torch.randn(*lead, BATCH, MEMBERS, CHANNELS, GRID, GRID, generator=generator),
        "static": torch.randn(*lead, BATCH, 1, GRID, GRID, generator=generator),
        "lead_time": torch.rand(*lead, BATCH, generator=generator) * 6,
        "truth": torch.randn(*lead, BATCH, CHANNELS, GRID, GRID, generator=generator),
    }
    return {key: value.to(device) for key, value in batch.items()}


def fused_step(name: str, k: int, strategy: str, device: str = "cpu") -> Callable[[], None]:
    """One training step of K fused copies of model ``name`` (Adam on the Gaussian CRPS)."""
    fused = FusedModels(_copies(name, k, device), strategy=strategy)
    optimizer = torch.optim.Adam(fused.param_groups(lr=1e-3))
    batch = _batch(k, device)

    def step() -> None:
        optimizer.zero_grad()
        fused.losses(gaussian_crps_loss, batch).sum().backward()
        optimizer.step()

    return step


def separate_steps(name: str, k: int, device: str = "cpu") -> list[Callable[[], None]]:
    """A training step of each of K separate copies of model ``name``."""
    batch = _batch(None, device)
    steps = []
    for model in _copies(name, k, device):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step(
            model: torch.nn.Module = model, optimizer: torch.optim.Optimizer = optimizer
        ) -> None:
            optimizer.zero_grad()
            gaussian_crps_loss(model, batch).backward()
            optimizer.step()

        steps.append(step)
    return steps


def timed(steps: list[Callable[[], None]], count: int, device: str = "cpu") -> float:
    """Seconds of ``count`` steps of each model in turn (a sweep's order), on ``device``."""
    wait = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    wait()
    start = time.perf_counter()
    for step in steps:  # each model's steps, then the next model's
        for _ in range(count):
            step()
    wait()
    return time.perf_counter() - start


def _peak_mib(name: str, k: int, fused: bool, count: int, strategy: str) -> float:
    """Largest resident set above the built models' (run in a fresh process), MiB."""
    steps = [fused_step(name, k, strategy)] if fused else separate_steps(name, 1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    timed(steps, count)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024


def _concurrent_seconds(name: str, k: int, count: int) -> float:
    """One model per process, after a barrier: this process's seconds for ``count`` steps."""
    import torch.distributed as dist

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // k))
    seed_everything(dist.get_rank())
    steps = separate_steps(name, 1)
    timed(steps, 1)  # warm-up
    dist.barrier()
    return timed(steps, count)


def main(argv: list[str] | None = None) -> int:
    """Measure every model and K; print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 1 step, K 1 and 2")
    parser.add_argument("--models", nargs="+", default=list(BUILDERS), choices=list(BUILDERS))
    parser.add_argument("--copies", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--strategy", choices=STRATEGIES, default="auto", help="fused calls")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/weather_fused_sweeps.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.copies, args.rounds, args.steps = [1, 2], 2, 1
    rows = []
    print(
        f"{'model':>7} {'K':>3} {'fused/s':>9} {'seq/s':>9} {'speed-up':>9} {'95% interval':>16} "
        f"{'ceiling':>8} {'conc/s':>9} {'fused MiB':>10} {'one run MiB':>12}"
    )
    for name in args.models:
        for k in args.copies:
            fused, separate = fused_step(name, k, args.strategy), separate_steps(name, k)
            timed([fused, *separate], 1)  # warm-up
            speedups, fused_s, sequential_s, one_thread_s = [], [], [], []
            cores = torch.get_num_threads()
            for r in range(args.rounds):
                order = [("fused", [fused]), ("sequential", separate), ("one thread", separate)]
                alternating = order if r % 2 == 0 else order[::-1]
                times = {}
                for label, steps in alternating:
                    with torch_threads(1 if label == "one thread" else None):
                        times[label] = timed(steps, args.steps)
                fused_s.append(times["fused"])
                sequential_s.append(times["sequential"])
                one_thread_s.append(times["one thread"])
                speedups.append(times["sequential"] / times["fused"])
            samples = k * BATCH * args.steps
            conc = max(spawn(_concurrent_seconds, k, name, k, args.steps)) if k > 1 else None
            peaks = {
                whole: spawn(_peak_mib, 1, name, k, whole, args.steps, args.strategy)[0]
                for whole in (True, False)
            }
            row = {
                "model": name,
                "copies": k,
                "fused_samples_per_s": samples / statistics.median(fused_s),
                "sequential_samples_per_s": samples / statistics.median(sequential_s),
                "speedup": statistics.median(speedups),
                "speedup_ci95": median_interval(speedups),
                "speedups": speedups,
                "ceiling": cores
                * statistics.median(sequential_s)
                / statistics.median(one_thread_s),
                "cores": cores,
                "concurrent_samples_per_s": None if conc is None else samples / conc,
                "fused_peak_mib": peaks[True],
                "one_run_peak_mib": peaks[False],
            }
            rows.append(row)
            lo, hi = row["speedup_ci95"]
            concurrent = "-" if conc is None else f"{row['concurrent_samples_per_s']:.0f}"
            print(
                f"{name:>7} {k:>3} {row['fused_samples_per_s']:>9.0f} "
                f"{row['sequential_samples_per_s']:>9.0f} {row['speedup']:>9.2f} "
                f"{f'[{lo:.2f}, {hi:.2f}]':>16} {row['ceiling']:>8.2f} {concurrent:>9} "
                f"{row['fused_peak_mib']:>10.1f} {row['one_run_peak_mib']:>12.1f}"
            )
    print(
        f"samples/s summed over the K models; speed-up: fused over sequential, median of "
        f"{args.rounds} interleaved rounds of {args.steps} steps with its percentile-bootstrap "
        f"95% interval (target >= {TARGET} at K = 4 for mlp and pooled); ceiling: what filling "
        f"every core at one thread's speed would gain (cores x sequential / one-thread "
        f"time); conc: K processes at once; MiB: peak resident set above the built models, a "
        f"fresh process each"
    )
    write_report(
        args.out, "weather_fused_sweeps", rows, target_speedup=TARGET, strategy=args.strategy
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
