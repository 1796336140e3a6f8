"""``torch.compile`` of a parallel model: exact against eager and one device, or refused by name.

Ops on split blocks run eagerly (graph breaks) and the split layers' local
compute is compiled. Each case runs in float64 on gloo processes and must
match the single-device model to 1e-9, eager and compiled alike (as in
``test_functional_ops``: the float64 rounding of these small problems is
below 1e-13, and the compiled kernels only reorder it). ``aot_eager`` runs
the compiler's tracing and autograd without generating code, which is what
decides exactness and costs a fraction of Inductor's compile time; one case
runs the default backend (Inductor).
"""

from __future__ import annotations

import pytest

from sciml.distributed import spawn
from tests.spatial_parallel.compile_workers import compiled_errors, refused_under_compile

EXACT = 1e-9
DEPTH = dict(depth=2)


def _assert_exact(results: list[dict[str, object]]) -> None:
    for result in results:
        errors = result["errors"]
        assert isinstance(errors, dict)
        assert any(k.startswith("compiled:grad:") for k in errors), errors
        assert max(errors.values()) < EXACT, errors
        assert result["graphs"], "nothing was compiled"


@pytest.mark.parametrize(
    ("case", "depths", "compiler"),
    [
        ("cosmoflow", [12, 12], "inductor"),
        ("unet", [12, 12], "aot_eager"),
        ("global_mean", [12, 13, 12], "aot_eager"),
    ],
    ids=["cosmoflow-inductor", "unet", "global_mean"],
)
def test_compiled_parallel_model_matches_one_device(
    case: str, depths: list[int], compiler: str
) -> None:
    """Forward and backward over several steps; the last case's global depth changes (13 is
    odd: its shape branch pads) while rank 1's block keeps 6 planes."""
    results = spawn(compiled_errors, 2, DEPTH, case, depths, compiler, timeout=600)
    _assert_exact(results)


def test_dynamic_shapes_compile_the_norms_exactly() -> None:
    """``dynamic=True`` traces sizes as symbols from the first call: the norms' statistics
    broadcast without rebuilding a shape from them (a fake-tensor reshape error before)."""
    results = spawn(
        compiled_errors, 2, DEPTH, "norms", [12, 13], "aot_eager", 12, True, timeout=600
    )
    _assert_exact(results)


@pytest.mark.parametrize(
    "mesh", [dict(depth=2, height=2), dict(data=2, depth=2)], ids=["2x2", "hybrid"]
)
def test_compiled_four_ranks(mesh: dict[str, int]) -> None:
    """Two split dims; and two data-parallel replicas of a depth split (the gradients
    averaged over replicas, as DistributedDataParallel does)."""
    results = spawn(compiled_errors, 4, mesh, "global_mean", [12, 13], "aot_eager", timeout=600)
    _assert_exact(results)


def test_refused_op_and_fullgraph_name_themselves_under_compile() -> None:
    for messages in spawn(refused_under_compile, 2, DEPTH, "aot_eager", timeout=300):
        refused = messages["op"]
        assert refused.startswith("SplitOpError"), refused
        assert "Tensor.cumsum" in refused and "depth (dim 2)" in refused, refused
        assert "compile_workers.py:" in refused, refused
        assert "compile a parallel model without fullgraph=True" in messages["fullgraph"], messages
