"""Projection past this machine: CosmoFlow at 512^3 and the U-Net at 256^3 on 16 to 2,048 H100s.

Usage: python benchmarks/spatial_plan_projection.py [--quick] [--out PATH] [--figure PATH]

For each world size the planner (``sciml.spatial_parallel.planner``, H100
profile from the data sheet, 80 GB per GPU, Adam) recommends a grid and
predicts its step time and memory per GPU, in two settings:

* weak scaling: one sample per 16 GPUs (global batch ``W / 16``);
* strong scaling: a global batch of 16 samples whatever the world size.

Efficiency is ``T(16) / T(W)`` (weak) and ``16 T(16) / (W T(W))`` (strong).
It also finds the smallest grid on which one 512^3 CosmoFlow sample fits.
Oyama et al. (IEEE TPDS 2021, "The case for strong scaling in deep
learning") report good strong and weak scaling of hybrid-parallel CosmoFlow
at 512^3 to 2,048 GPUs; the script prints the predicted efficiencies next to
that qualitative claim (it does not copy their figures).

Imported by notebook 01 (``project``, ``smallest_fit``, ``plot``).
"""

from __future__ import annotations

import argparse
from typing import Any

from _report import write_report
from matplotlib.figure import Figure

from sciml.io_utils import save_figure
from sciml.spatial_parallel.planner.graph import trace
from sciml.spatial_parallel.planner.plan import build_model, plan_graph
from sciml.spatial_parallel.planner.profile import PROFILES

WORLDS = (16, 32, 64, 128, 256, 512, 1024, 2048)
#: (model, channels, edge) of the two workloads.
CASES = {"cosmoflow": (4, 512), "unet": (1, 256)}
MEMORY = 80e9


def _best(name: str, batch: int, world: int) -> dict[str, Any]:
    channels, edge = CASES[name]
    graph = trace(build_model(name, channels), (batch, channels, edge, edge, edge))
    plan = plan_graph(graph, world=world, memory=MEMORY, profile=PROFILES["h100"])
    if not plan.fitting:
        return {"world": world, "batch": batch, "fits": False}
    best = plan.best
    return {
        "world": world,
        "batch": batch,
        "fits": True,
        "mesh": best.mesh,
        "step_time_s": best.step_time,
        "memory_per_gpu_bytes": best.peak_memory,
        "time_s": best.time,
    }


def project(name: str, *, worlds: tuple[int, ...] = WORLDS) -> list[dict[str, Any]]:
    """Weak- and strong-scaling rows of one workload over ``worlds``."""
    rows = []
    for mode in ("weak", "strong"):
        base = None
        for world in worlds:
            batch = max(1, world // 16) if mode == "weak" else 16
            row = {"model": name, "mode": mode, **_best(name, batch, world)}
            if row["fits"]:
                base = base or (world, row["step_time_s"])
                ratio = base[1] / row["step_time_s"]
                row["efficiency"] = ratio if mode == "weak" else ratio * base[0] / world
            rows.append(row)
    return rows


def smallest_fit(name: str = "cosmoflow", *, limit: int = 64) -> dict[str, Any]:
    """The fewest GPUs (powers of two) on which one sample fits, with the grid and memory."""
    world = 1
    while world <= limit:
        row = _best(name, 1, world)
        if row["fits"]:
            return row
        world *= 2
    return {"world": None, "fits": False}


def plot(rows: list[dict[str, Any]]) -> Figure:
    """Step time, efficiency and memory per GPU against GPUs, per workload and mode."""
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    for (name, mode), marker in zip(
        [(m, s) for m in CASES for s in ("weak", "strong")], "os^v", strict=True
    ):
        part = [r for r in rows if r["model"] == name and r["mode"] == mode and r["fits"]]
        worlds = [r["world"] for r in part]
        label = f"{name} {mode}"
        axes[0].plot(worlds, [r["step_time_s"] * 1e3 for r in part], marker=marker, label=label)
        axes[1].plot(worlds, [r["efficiency"] for r in part], marker=marker, label=label)
        axes[2].plot(
            worlds, [r["memory_per_gpu_bytes"] / 1e9 for r in part], marker=marker, label=label
        )
    for ax, title in zip(
        axes, ("step time (ms)", "efficiency", "memory per GPU (GB)"), strict=True
    ):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs (H100)")
        ax.set_title(title)
    axes[0].set_yscale("log")
    axes[1].set_ylim(0, 1.1)
    axes[2].axhline(MEMORY / 1e9, color="k", linestyle=":", linewidth=1)
    axes[0].legend(fontsize=8)
    return fig


def main(argv: list[str] | None = None) -> int:
    """Project both workloads, print the table, write the JSON and the figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16, 128 and 2048 GPUs only")
    parser.add_argument("--out", default="runs/bench/spatial_plan_projection.json")
    parser.add_argument("--figure", default="runs/bench/spatial_plan_projection.png")
    args = parser.parse_args(argv)
    worlds = (16, 128, 2048) if args.quick else WORLDS
    rows = [row for name in CASES for row in project(name, worlds=worlds)]
    print(
        f"{'model':>9} {'mode':>6} {'GPUs':>5} {'batch':>5} {'grid d x D x H x W':>20} "
        f"{'step ms':>9} {'eff':>5} {'GB/GPU':>7}"
    )
    for r in rows:
        if not r["fits"]:
            print(f"{r['model']:>9} {r['mode']:>6} {r['world']:>5} {r['batch']:>5} no grid fits")
            continue
        grid = " x ".join(str(v) for v in r["mesh"].values())
        print(
            f"{r['model']:>9} {r['mode']:>6} {r['world']:>5} {r['batch']:>5} {grid:>20} "
            f"{r['step_time_s'] * 1e3:>9.2f} {r['efficiency']:>5.2f} "
            f"{r['memory_per_gpu_bytes'] / 1e9:>7.2f}"
        )
    fit = smallest_fit()
    print(
        f"smallest grid for one 512^3 CosmoFlow sample in 80 GB: {fit.get('mesh')} "
        f"({fit.get('memory_per_gpu_bytes', float('nan')) / 1e9:.1f} GB per GPU)"
    )
    cosmo = [r for r in rows if r["model"] == "cosmoflow" and r["fits"]]
    for mode in ("weak", "strong"):
        last = [r for r in cosmo if r["mode"] == mode][-1]
        print(
            f"CosmoFlow 512^3 {mode} scaling efficiency at {last['world']} GPUs: "
            f"{last['efficiency']:.2f} (Oyama et al. report good {mode} scaling to 2,048 GPUs)"
        )
    save_figure(plot(rows), args.figure, dpi=120)
    write_report(args.out, "spatial_plan_projection", rows, smallest_fit=fit, profile="h100")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
