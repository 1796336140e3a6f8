"""The GPU check's fused sweeps: K post-processors trained as one against K separate runs.

Section ``fused_sweeps`` of ``benchmarks/gpu_check.py``: the steps of
``benchmarks/weather_fused_sweeps.py`` (the evaluation preset's sizes) on the GPU, where
a small model leaves most of the device idle and fusion has something to fill. For the
MLP and the pooled model and K copies: samples/s summed over the K models of a batched
fused step (``vmap``, the GPU's default), of a fused step that calls the copies one after
another (``loop``, the CPU's) and of the K separate models stepped one after another,
each the median of interleaved rounds; each fused step's speed-up over the separate
runs (the aim: 2 at K = 4); the peak memory of the three set-ups together. The weather
models need xarray and pandas (the GPU machine has both); without them the section says
so and skips, and the check's other sections run as before.
"""

from __future__ import annotations

import statistics

import torch
from _gpu_probe import importable
from _gpu_report import Part, Row
from _gpu_workloads import failure, note_failures, release

#: The set-ups timed: fused batched, fused one after another, separate.
SETUPS = ("vmap", "loop", "separate")
#: What the weather models import beyond torch and numpy.
NEEDS = ("xarray", "pandas")


def _measure(name: str, k: int, device: str, *, rounds: int, count: int) -> Row:
    """One model's and K's row: samples/s of each set-up, speed-ups, peak memory."""
    from weather_fused_sweeps import BATCH, fused_step, separate_steps, timed

    setups = {
        "vmap": [fused_step(name, k, "vmap", device)],
        "loop": [fused_step(name, k, "loop", device)],
        "separate": separate_steps(name, k, device),
    }
    for steps in setups.values():
        timed(steps, 1, device)  # warm-up
    times: dict[str, list[float]] = {label: [] for label in SETUPS}
    for r in range(rounds):
        order = SETUPS if r % 2 == 0 else SETUPS[::-1]
        for label in order:
            times[label].append(timed(setups[label], count, device))
    samples = k * BATCH * count
    row: Row = {"model": name, "copies": k}
    for label in SETUPS:
        row[f"{label}_samples_per_s"] = samples / statistics.median(times[label])
    for label in ("vmap", "loop"):
        row[f"{label}_speedup"] = row[f"{label}_samples_per_s"] / row["separate_samples_per_s"]
    if device == "cuda":
        row["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return row


def fused_sweeps(part: Part) -> None:
    """Every model and K within the section's budget (the module docstring)."""
    absent = [name for name in NEEDS if not importable(name)]
    if absent:
        part.note(f"skipped: the weather models need {absent}, which this Python lacks")
        return
    device = part.device
    if part.dry_run:
        models, copies, rounds, count = ("mlp",), (1, 2), 2, 1
    else:
        models, copies, rounds, count = ("mlp", "pooled"), (1, 4, 8), 3, 5
    for name in models:
        for k in copies:
            if part.left() < 8:
                part.note(f"out of time before {name} with {k} copies")
                return
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            try:
                row = _measure(name, k, device, rounds=rounds, count=count)
            except (RuntimeError, ValueError) as err:
                row = {"model": name, "copies": k, "error": failure(err)}
            part.add(row)
            release(device)
    note_failures(part)
