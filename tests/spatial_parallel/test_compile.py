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
#: The published models, the Inductor backend and dynamic shapes: the same split code as the
#: small model's cases below, each at 30-60 s of compiling on 2 cores.
SLOW = pytest.mark.slow


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
        pytest.param("cosmoflow", [12, 12], "inductor", id="cosmoflow-inductor", marks=SLOW),
        pytest.param("unet", [12, 12], "aot_eager", id="unet", marks=SLOW),
    ],
)
def test_compiled_parallel_model_matches_one_device(
    case: str, depths: list[int], compiler: str
) -> None:
    """Forward and backward over two steps of the published models (the second step meets
    the compiled code the first one left)."""
    results = spawn(compiled_errors, 2, DEPTH, case, depths, compiler, timeout=600)
    _assert_exact(results)


@SLOW
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
    averaged over replicas, as DistributedDataParallel does). The global depth changes (13
    is odd: the model's shape branch pads) while a depth rank's block keeps 6 planes, then
    returns to 12 (the code compiled for it runs again)."""
    results = spawn(compiled_errors, 4, mesh, "global_mean", [12, 13, 12], "aot_eager", timeout=600)
    _assert_exact(results)


def test_refused_op_and_fullgraph_name_themselves_under_compile() -> None:
    for messages in spawn(refused_under_compile, 2, DEPTH, "aot_eager", timeout=300):
        refused = messages["op"]
        assert refused.startswith("SplitOpError"), refused
        assert "Tensor.argmax" in refused and "depth (dim 2)" in refused, refused
        assert "compile_workers.py:" in refused, refused
        assert "compile a parallel model without fullgraph=True" in messages["fullgraph"], messages
