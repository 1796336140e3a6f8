"""Every call form of the computed reductions, on 2 and 4 gloo ranks, against one device.

The forms are generated (:mod:`tests.spatial_parallel.reduction_forms`): method
and function, positional and keyword, ``unbiased`` and ``correction``,
``keepdim`` both ways, ``dim`` as int, tuple, list, negative and absent. Each
is exact in float64 (1e-9, as the other functional-op tests: these problems'
rounding is below 1e-13), or refused because it drops some split dims but not
all. ``make test`` runs every third form and the ones a user reported; the
slow test runs them all. The same forms on a folded block (tokens merged across
depth and height) are all exact.
"""

from __future__ import annotations

import pytest
import torch

from sciml.distributed import spawn
from sciml.spatial_parallel.split.binding import bind
from tests.spatial_parallel.reduction_forms import FORMS, compare_forms

MESHES = {"1x2x1x1": (dict(depth=2), {2}), "1x2x2x1": (dict(depth=2, height=2), {2, 3})}
SHAPE = (2, 2, 7, 6, 5)
EXACT = 1e-9
#: Forms that were once wrong: biased and keepdim read as unbiased; an IndexError.
REPORTED = [
    "y.std((2, 3, 4), False, True)",
    "y.var(2, False, True)",
    "torch.std(y, (2, 3, 4), False)",
]


def _check(mesh_id: str, sources: list[str]) -> None:
    mesh, split_dims = MESHES[mesh_id]
    ranks = mesh.get("depth", 1) * mesh.get("height", 1)
    results = spawn(compare_forms, ranks, mesh, SHAPE, sources, timeout=600)
    bad = {}
    for source in sources:
        value = results[0][source]
        if FORMS[source].refused_on(split_dims):
            if not (isinstance(value, str) and "keepdim=True" in value):
                bad[source] = f"not refused: {value}"
        elif isinstance(value, str) or not value < EXACT:
            bad[source] = value
    assert not bad, bad


@pytest.mark.parametrize("mesh_id", list(MESHES))
def test_reported_and_every_third_form(mesh_id: str) -> None:
    _check(mesh_id, sorted({*REPORTED, *list(FORMS)[::3]}))


@pytest.mark.slow
@pytest.mark.parametrize("mesh_id", list(MESHES))
def test_every_form(mesh_id: str) -> None:
    _check(mesh_id, list(FORMS))


def _check_folded(sources: list[str]) -> None:
    """Every form on tokens merged across depth and height: exact, none refused (a form
    over the merged dim gathers the tokens, the others run on the blocks)."""
    mesh = MESHES["1x2x2x1"][0]
    results = spawn(compare_forms, 4, mesh, (2, 2, 7, 6, 6), sources, True, timeout=1200)
    bad = {s: v for s, v in results[0].items() if isinstance(v, str) or not v < EXACT}
    assert not bad, bad


def test_every_tenth_form_on_folded_blocks() -> None:
    _check_folded(list(FORMS)[::10])


@pytest.mark.slow
def test_every_form_on_folded_blocks() -> None:
    _check_folded(list(FORMS))


def test_calls_are_bound_as_torch_binds_them() -> None:
    x = torch.randn(2, 3, 4, 5, 6)
    bound = bind(torch.Tensor.std, (x, (2, 3, 4), False, True), {})
    assert bound.name == "std"
    assert bound.arguments["input"] is x
    assert (bound.arguments["dim"], bound.arguments["correction"]) == ([2, 3, 4], 0)
    assert bound.arguments["keepdim"] is True
    assert bind(torch.std, (x, (2, 3, 4), False), {}).arguments["keepdim"] is False
    assert bind(torch.max, (x, x), {}).name == "maximum"
    assert bind(torch.Tensor.norm, (x,), {"p": "fro", "dim": (2, 3)}).arguments["ord"] == 2


def test_invalid_arguments_raise_torchs_own_error() -> None:
    x = torch.randn(2, 3, 4, 5, 6)
    with pytest.raises(IndexError, match="Dimension out of range"):
        bind(torch.Tensor.std, (x, 7), {})
