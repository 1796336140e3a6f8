"""The GPU check's planner sections: predicted against measured, and the largest volume.

``planner``: ``sciml spatial plan --calibrate --device cuda`` measures this
machine's constants; the planner then prices the training section's models on
one rank, and its predictions are set against the planner's own measurements
(:func:`~sciml.spatial_parallel.planner.measure.time_step` and
:func:`~sciml.spatial_parallel.planner.measure.step_memory`, one rank) and
against the training section's float32 runs. ``largest``: CosmoFlow at batch 1
on growing cubes, the planner's peak memory (and whether it fits the device)
against a real run, until the device runs out of memory.

A dry run prices with the built-in ``h100`` profile: a CPU calibration takes
longer than the whole dry run.
"""

from __future__ import annotations

import contextlib
import functools
import io
from pathlib import Path
from typing import Any

import torch
from _gpu_report import Part, Row
from _gpu_workloads import Shape, Sizes, failure, release, sizes, train_rate
from torch import nn

from sciml.cli import main
from sciml.distributed import spawn
from sciml.spatial_parallel.planner.cost import Estimate, estimate
from sciml.spatial_parallel.planner.graph import trace
from sciml.spatial_parallel.planner.measure import step_memory, time_step
from sciml.spatial_parallel.planner.profile import Profile, get_profile, load_profile

MODELS = ("cosmoflow", "unet")
#: The planner's claims: step time within 30%, memory within 15%.
TIME_TOLERANCE, MEMORY_TOLERANCE = 0.30, 0.15
ONE_RANK = (1, 1, 1, 1)


def profile_path(part: Part) -> Path:
    """Where the planner section caches the profile it calibrated on this machine."""
    return part.scratch / "planner_profile.json"


def calibration_arguments(path: Path) -> list[str]:
    """``sciml`` arguments that calibrate the GPU and cache its profile at ``path``."""
    return ["spatial", "plan", "--calibrate", "--device", "cuda", "--cache", str(path)]


def calibrate_cuda(path: Path) -> Profile:
    """``sciml spatial plan --calibrate --device cuda --cache PATH``, and the profile it wrote.

    Raises:
        RuntimeError: If the command fails (its error output included).
    """
    args = calibration_arguments(path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    if code != 0:
        raise RuntimeError(f"sciml {' '.join(args)} exited {code}: {err.getvalue()[-2000:]}")
    return load_profile(path)


def section_profile(part: Part) -> Profile:
    """The profile this check calibrated (the planner section's), else the built-in ``h100``."""
    path = profile_path(part)
    return load_profile(path) if path.exists() else get_profile("h100")


def _measure(kind: str, cases: list[tuple[nn.Module, Shape]], device: str) -> list[Any]:
    """Rank function: the planner's ``time_step`` or ``step_memory`` of each model on one rank."""
    measure = time_step if kind == "time" else step_memory
    results = []
    for model, shape in cases:
        torch.manual_seed(0)
        results.append(measure(model, {}, shape, device=device))
    return results


def _training_rows(part: Part) -> dict[str, Row]:
    """The training section's float32, NCDHW rows by model (empty if it did not run)."""
    rows = part.report.get("training", {}).get("rows", [])
    return {
        r["model"]: r
        for r in rows
        if r.get("precision") == "fp32" and r.get("layout") == "ncdhw" and "step_s" in r
    }


def _ratio(measured: float | None, predicted: float) -> float | None:
    return None if measured is None else measured / predicted


def _estimate(cfg: Sizes, name: str, shape: Shape, profile: Profile) -> Estimate:
    return estimate(trace(cfg.model(name), shape), ONE_RANK, profile)


def planner(part: Part) -> None:
    """Calibrate, price each model on one rank, and set the prices against measurements."""
    cfg = sizes(part.dry_run)
    if not part.dry_run:
        profile = calibrate_cuda(profile_path(part))
        part.note(f"calibrated: {_describe(profile)}")
    profile = section_profile(part)
    cases = [(cfg.model(name), cfg.train[name]) for name in MODELS]
    backend = "nccl" if part.device == "cuda" else "gloo"
    measured = {}
    for kind in ("time", "memory"):  # each in fresh processes, as planner_measure asks
        rank = functools.partial(_measure, kind, cases, part.device)
        measured[kind] = spawn(rank, 1, backend=backend, timeout=max(part.left(), 1))[0]
    trained = _training_rows(part)
    for index, name in enumerate(MODELS):
        est = _estimate(cfg, name, cfg.train[name], profile)
        run = trained.get(name, {})
        row: Row = {
            "model": name,
            "shape": list(cfg.train[name]),
            "profile": profile.name,
            "predicted_step_s": est.step_time,
            "measured_step_s": measured["time"][index]["seconds"],
            "predicted_step_bytes": est.step_memory,
            "measured_step_bytes": measured["memory"][index],
            "predicted_peak_bytes": est.peak_memory,
            "training_step_s": run.get("step_s"),
            "training_peak_bytes": run.get("peak_bytes"),
        }
        row["time_ratio"] = row["measured_step_s"] / est.step_time
        row["step_memory_ratio"] = row["measured_step_bytes"] / est.step_memory
        row["training_time_ratio"] = _ratio(row["training_step_s"], est.step_time)
        row["training_peak_ratio"] = _ratio(row["training_peak_bytes"], est.peak_memory)
        row["time_within_30pct"] = abs(row["time_ratio"] - 1) <= TIME_TOLERANCE
        row["memory_within_15pct"] = abs(row["step_memory_ratio"] - 1) <= MEMORY_TOLERANCE
        part.add(row)
    if not trained:
        part.note("the training section left no float32 rows: training_* columns are empty")


def _describe(profile: Profile) -> str:
    return (
        f"conv {profile.conv_rate / 1e12:.1f} TFLOP/s forward, {profile.conv_bwd_rate / 1e12:.1f} "
        f"backward, memory {profile.mem_bw / 1e9:.0f} GB/s, op overhead "
        f"{profile.op_overhead * 1e6:.1f} us, device memory {profile.memory / 2**30:.1f} GiB"
    )


def largest(part: Part) -> None:
    """CosmoFlow at batch 1 on growing cubes: the planner's peak memory against a real run.

    The planner traces float32 activations, so its figure is that of the
    float32 run; a bfloat16 run keeps its convolutions' outputs in half the
    bytes. Each precision stops at its first failure (out of memory, or a
    size a kernel refuses), which its row reports.
    """
    cfg = sizes(part.dry_run)
    profile = section_profile(part)
    limit = float(torch.cuda.mem_get_info()[1]) if part.device == "cuda" else profile.memory
    part.note(f"planner profile: {profile.name}; the device's memory: {limit / 2**30:.1f} GiB")
    for dtype in ("bf16", "fp32"):
        for edge in cfg.edges:
            if not part.enough(15, f"CosmoFlow {edge}^3 in {dtype}"):
                return
            shape = (1, 4, edge, edge, edge)
            est = _estimate(cfg, "cosmoflow", shape, profile)
            row: Row = {
                "precision": dtype,
                "edge": edge,
                "predicted_peak_gib": est.peak_memory / 2**30,
                "predicted_fits": est.peak_memory <= limit,
            }
            try:
                figures = train_rate(
                    cfg.model("cosmoflow"),
                    shape,
                    device=part.device,
                    dtype=dtype,
                    layout="ncdhw",
                    warmup=1,
                    steps=2,
                    host_batches=1,
                )
            except Exception as err:  # out of memory, or a size a kernel refuses: recorded
                row["outcome"] = failure(err)
            else:
                row |= {"outcome": "trained", "step_s": figures["step_s"]}
                row["peak_gib"] = figures["peak_gib"]
                if figures["peak_bytes"] is not None:
                    row["peak_over_predicted"] = figures["peak_bytes"] / est.peak_memory
            part.add(row)
            release(part.device)
            if row["outcome"] != "trained":
                break
