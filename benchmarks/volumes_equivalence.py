"""Hybrid-parallel training from files equals one process: losses, metrics and weights.

Usage: python benchmarks/volumes_equivalence.py [--quick] [--out PATH]

CosmoFlow on ``depth=2`` and ``data=2 x depth=2`` (4 processes) and the
U-Net on ``depth=2 x height=2`` (4 processes) train in float64 from
generated files for 12 steps or more, preempted on rank 0 after step 3 (as
by SIGUSR1: ``fit``'s ``preempt_after``) and resumed, and are compared with one
process trained without interruption on the same data: the largest relative
difference of every logged value (losses and metrics, per step and per
epoch) and of every weight. The claim: below 1e-9.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from pathlib import Path
from typing import Any

import torch
from _report import write_report

from sciml.distributed import init_distributed, spawn
from sciml.training import TrainConfig
from sciml.training.checkpoint import read_checkpoint
from sciml.volumes.config import VolumeTraining
from sciml.volumes.data import write_cosmology, write_segmentation
from sciml.volumes.train import train_volumes

CASES = [
    ("cosmoflow", {"depth": 2}),
    ("cosmoflow", {"data": 2, "depth": 2}),
    ("unet3d", {"depth": 2, "height": 2}),
]


def _options(model: str, mesh: dict[str, int], batch: int) -> VolumeTraining:
    config = TrainConfig(epochs=3, batch_size=batch, seed=3, progress=False, tensorboard=False)
    return VolumeTraining(
        model,
        mesh=mesh,
        config=config,
        lr=0.02,
        width=2,
        levels=2,
        dtype="float64",  # type: ignore[arg-type]
    )


def _rank(data: str, run_dir: str, model: str, mesh: dict[str, int], batch: int, at: int) -> str:
    """Train with rank 0 preempted (as by SIGUSR1) after step ``at``, then resume."""
    options = _options(model, mesh, batch)
    preempt = at if torch.distributed.get_rank() == 0 else None
    first = train_volumes(data, options, run_dir, val=data, preempt_after=preempt)
    second = train_volumes(data, options, run_dir, val=data)
    return f"{first.status}@{first.global_step},{second.status}@{second.global_step}"


def _values(run_dir: Path) -> list[tuple[str, float]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return [(f"{r['split']}/{r['metric']}", float(r["value"])) for r in csv.DictReader(handle)]


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def _compare(single: Path, parallel: Path) -> dict[str, Any]:
    expected, got = _values(single), _values(parallel)
    if [k for k, _ in expected] != [k for k, _ in got]:
        raise AssertionError(f"{parallel} logged other values than {single}")
    logged = max(_relative(g, e) for (_, g), (_, e) in zip(got, expected, strict=True))
    reference = read_checkpoint(single / "checkpoints" / "last.pt")["model"]
    weights = read_checkpoint(parallel / "checkpoints" / "last.pt")["model"]
    worst = max(
        float(((weights[k] - v).abs() / v.abs().clamp_min(1e-12)).max())
        for k, v in reference.items()
    )
    steps = sum(1 for k, _ in got if k == "train_step/loss")
    return {
        "logged_values": len(got),
        "steps": steps,
        "max_rel_logged": logged,
        "max_rel_weights": worst,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the comparisons, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the depth=2 case only")
    parser.add_argument("--out", default="runs/bench/volumes_equivalence.json")
    args = parser.parse_args(argv)
    cases = CASES[:1] if args.quick else CASES
    rows = []
    print(
        f"{'model':>9} {'mesh':>26} {'steps':>5} {'run':>28} {'logged rel':>10} {'weights rel':>11}"
    )
    with tempfile.TemporaryDirectory(prefix="sciml-bench-") as tmp:
        files = {
            "cosmoflow": write_cosmology(Path(tmp) / "c.zarr", samples=16, size=8, seed=2),
            "unet3d": write_segmentation(Path(tmp) / "s.zarr", samples=16, size=8, seed=2),
        }
        for n, (model, mesh) in enumerate(cases):
            replicas = mesh.get("data", 1)
            batch = 2  # per replica: the single process takes the global batch
            single = Path(tmp) / f"single-{n}"
            with init_distributed(backend="gloo"):
                train_volumes(
                    files[model], _options(model, {}, batch * replicas), single, val=files[model]
                )
            parallel = Path(tmp) / f"mesh-{n}"
            ranks = replicas * mesh.get("depth", 1) * mesh.get("height", 1) * mesh.get("width", 1)
            status = spawn(
                _rank, ranks, str(files[model]), str(parallel), model, mesh, batch, 3, timeout=1800
            )
            row = {"model": model, "mesh": mesh, "ranks": ranks, "status": status[0]} | _compare(
                single, parallel
            )
            rows.append(row)
            print(
                f"{model:>9} {str(mesh):>26} {row['steps']:>5} {status[0]:>28} "
                f"{row['max_rel_logged']:>10.2e} {row['max_rel_weights']:>11.2e}"
            )
    path = write_report(args.out, "volumes_equivalence", rows)
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
