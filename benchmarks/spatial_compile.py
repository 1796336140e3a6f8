"""Step time of a parallel model under torch.compile against eager, on 2 ranks.

Usage: python benchmarks/spatial_compile.py [--quick] [--rounds 7] [--steps 3] [--size 48]
       [--models cosmoflow,unet] [--compiler inductor] [--out PATH]

CosmoFlow and the 3D U-Net (``_spatial_workloads.volume_model``, as in
``spatial_mechanism_cost.py``) on 2 gloo ranks (depth split), one thread
each; one training step = forward + backward of ``sum(y * 0.5)``. The same
parallel model runs eagerly and through ``torch.compile`` (ops on split
blocks and the halo exchanges run eagerly, between compiled graphs of the
layers' local compute). ``compile_s`` is the first compiled step (tracing
and code generation), then each mode takes one more warm-up step. Timed
rounds interleave the two modes, in alternating order, so that both see the
same machine load; a round keeps each mode's fastest of ``steps`` steps (the
slower rank's time), and ``ratio`` is the median over rounds of compiled /
eager, with its 95% percentile-bootstrap interval (rounds resampled).
``graphs`` and ``breaks`` are the compiler's counts on rank 0.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from _report import write_report
from _spatial_workloads import median_interval, volume_model

from sciml.distributed import spawn
from sciml.spatial_parallel import SpatialMesh, parallelize, shard


def _seconds(step: Callable[[], None]) -> float:
    """One step's wall time on the slower rank."""
    dist.barrier()
    start = time.perf_counter()
    step()
    seconds = torch.tensor(time.perf_counter() - start)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return float(seconds)


def time_rounds(name: str, size: int, rounds: int, steps: int, compiler: str) -> dict[str, Any]:
    """Compile time, graph counts and each round's fastest steps (run on every rank)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    mesh = SpatialMesh(depth=2)
    model, shape = volume_model(name, size)
    pmodel = parallelize(model, mesh)
    compiled = torch.compile(pmodel, backend=compiler)
    x = shard(torch.randn(shape), mesh)

    def step(run: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def one() -> None:
            (run(x) * 0.5).sum().backward()

        return one

    modes = {"eager": step(pmodel), "compiled": step(compiled)}
    compile_s = _seconds(modes["compiled"])
    for one in modes.values():  # warm-up: the shape trace, allocator pools, compiled code
        one()
    per_round = []
    for index in range(rounds):
        order = ("eager", "compiled") if index % 2 == 0 else ("compiled", "eager")
        per_round.append({mode: min(_seconds(modes[mode]) for _ in range(steps)) for mode in order})
    return {
        "compile_s": compile_s,
        "graphs": counters["stats"]["unique_graphs"],
        "breaks": sum(counters["graph_break"].values()),
        "rounds": per_round,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16^3 volumes, 2 rounds of 2 steps")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", type=int, default=48)
    parser.add_argument(
        "--models",
        type=lambda text: text.split(","),
        default=["cosmoflow", "unet"],
        help="comma-separated: cosmoflow, unet",
    )
    parser.add_argument("--compiler", default="inductor", help="the torch.compile backend")
    parser.add_argument("--out", default="runs/bench/spatial_compile.json")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - {"cosmoflow", "unet"})
    if unknown:
        parser.error(f"--models: unknown {unknown}; expected cosmoflow and/or unet")
    size, rounds, steps = (16, 2, 2) if args.quick else (args.size, args.rounds, args.steps)
    rows: list[dict[str, Any]] = []
    print(
        f"{'model':>10} {'size':>5} {'eager ms':>9} {'compiled ms':>12} {'ratio':>7} "
        f"{'95% interval':>14} {'compile s':>10} {'graphs':>7} {'breaks':>7}"
    )
    for name in args.models:
        result = spawn(time_rounds, 2, name, size, rounds, steps, args.compiler, timeout=1800)[0]
        per_round = result.pop("rounds")
        ratios = [r["compiled"] / r["eager"] for r in per_round]
        row = {
            "model": name,
            "size": size,
            "compiler": args.compiler,
            "eager_ms": statistics.median(r["eager"] for r in per_round) * 1e3,
            "compiled_ms": statistics.median(r["compiled"] for r in per_round) * 1e3,
            "ratio": statistics.median(ratios),
            "ratio_ci95": median_interval(ratios),
            "ratios": ratios,
            **result,
        }
        rows.append(row)
        lo, hi = row["ratio_ci95"]
        print(
            f"{name:>10} {size:>5} {row['eager_ms']:>9.1f} {row['compiled_ms']:>12.1f} "
            f"{row['ratio']:>7.3f} {f'{lo:.3f}-{hi:.3f}':>14} {row['compile_s']:>10.1f} "
            f"{row['graphs']:>7} {row['breaks']:>7}"
        )
    write_report(args.out, "spatial_compile", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
