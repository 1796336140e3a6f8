"""What MONAI's transformers gather on split volumes: the whole tensors each rank holds.

Usage: python benchmarks/spatial_token_gathers.py [--quick] [--out PATH]

UNETR (``img_size`` 32, hidden 12, 12 layers: 8 patch tokens) and SwinUNETR
(``feature_size`` 12, depths 2, 2, 1, 1, windows of 4: a 64^3 input) run one forward
and backward pass of a parallel copy on depth=2 (2 ranks) and depth=2 x height=2
(4 ranks). Every tensor gathered whole on a rank
(:func:`sciml.spatial_parallel.split.redistribute.recorded_gathers`: the keys and
values of attention, windows that straddle the blocks) is counted: ``gathers``
and the largest one's elements, against the first stage's activation
(``volume_elements``: the input's voxels times the first stage's channels).
``max_rel_error_f64``: the largest relative error, over every quantity
:func:`sciml.spatial_parallel.testing.check_parallel` compares (outputs, input and
parameter gradients), of the parallel network in float64 against one device.

Measured on this 2-core machine, on both meshes alike: UNETR, 24 gathers of 96
elements (the keys and values of 8 tokens, two a layer), its queries, MLPs and
norms on the blocks (on 2 x 2 the tokens merge two split dims and stay on the
blocks as folded tokens); SwinUNETR, 2 gathers of at most 6,144 elements (the
deepest stage, whose blocks are thinner than a window), every other window
attention on the blocks (on 2 x 2 its window batch is folded too). ``--quick``: UNETR only.
"""

from __future__ import annotations

import argparse

import torch
from _report import write_report

from sciml.distributed import spawn
from sciml.spatial_parallel.testing import check_parallel


def build(name: str) -> tuple[torch.nn.Module, tuple[int, ...], int]:
    """The network, its input shape and its first stage's channels."""
    from monai.networks.nets import UNETR, SwinUNETR

    torch.manual_seed(0)
    if name == "UNETR":
        net = UNETR(
            in_channels=1,
            out_channels=2,
            img_size=(32, 32, 32),
            feature_size=4,
            hidden_size=12,
            mlp_dim=24,
            num_heads=2,
        )
        return net, (1, 1, 32, 32, 32), 4
    net = SwinUNETR(
        in_channels=1,
        out_channels=2,
        feature_size=12,
        depths=(2, 2, 1, 1),
        num_heads=(1, 1, 1, 1),
        window_size=(4, 4, 4),
    )
    return net, (1, 1, 64, 64, 64), 12


def gathers(mesh_kwargs: dict[str, int], name: str) -> dict[str, int]:
    """One forward and backward pass: the whole tensors gathered, counted on this rank."""
    from sciml.spatial_parallel import SpatialMesh, parallelize, shard
    from sciml.spatial_parallel.split.redistribute import recorded_gathers

    with recorded_gathers() as seen:
        net, shape, _ = build(name)
        mesh = SpatialMesh(**mesh_kwargs)
        parallelize(net, mesh)(shard(torch.randn(shape), mesh)).sum().backward()
    return {"gathers": len(seen), "largest_elements": max(seen, default=0)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="UNETR only")
    parser.add_argument("--out", default="runs/bench/spatial_token_gathers.json")
    args = parser.parse_args(argv)
    rows = []
    print(
        f"{'model':>10} {'mesh':>22} {'gathers':>8} {'largest':>9} {'volume':>9} {'f64 error':>10}"
    )
    for name in ("UNETR",) if args.quick else ("UNETR", "SwinUNETR"):
        _, shape, channels = build(name)
        for mesh in ({"depth": 2}, {"depth": 2, "height": 2}):
            ranks = len(mesh) * 2
            counts = spawn(gathers, ranks, mesh, name, timeout=900)
            net, shape, _ = build(name)
            compared = spawn(check_parallel, ranks, mesh, net, shape, timeout=900)
            row = {
                "model": name,
                "mesh": mesh,
                "ranks": ranks,
                **counts[0],
                "max_rel_error_f64": max(max(c.errors.values()) for c in compared),
                "within_bounds": all(c.ok for c in compared),
                "volume_elements": channels * shape[2] * shape[3] * shape[4],
                "same_on_every_rank": all(c == counts[0] for c in counts),
            }
            rows.append(row)
            print(
                f"{name:>10} {str(mesh):>22} {row['gathers']:>8} "
                f"{row['largest_elements']:>9} {row['volume_elements']:>9} "
                f"{row['max_rel_error_f64']:>10.2e}"
            )
    write_report(args.out, "spatial_token_gathers", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
