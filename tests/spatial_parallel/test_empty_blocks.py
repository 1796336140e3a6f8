"""A rank whose output block is empty still joins the gradient reduction."""

from sciml.distributed import spawn
from tests.spatial_parallel.workers import run_cases

# Depth 5 over 2 ranks (blocks 3 + 2); stride 3 leaves one output plane, owned by
# rank 0, so rank 1's output depends on no parameter. It used to skip the
# gradient all-reduce that rank 0 waited in (a deadlock found by hypothesis).
SPEC = (
    "Conv3d",
    dict(
        in_channels=4,
        out_channels=4,
        kernel_size=(3, 3, 1),
        stride=3,
        padding=(1, 2, 0),
        dilation=(2, 2, 1),
        groups=2,
        bias=False,
    ),
)


def test_empty_output_block_joins_gradient_reduction() -> None:
    cases = [
        dict(
            spec=(SPEC[0], dict(SPEC[1], padding_mode=mode)), shape=(1, 4, 5, 9, 7), overlap=overlap
        )
        for mode in ("zeros", "circular")
        for overlap in (False, True)
    ]
    results = spawn(run_cases, 2, {"depth": 2}, cases, timeout=120)
    for case, *per_rank in zip(cases, *results, strict=True):
        for errors in per_rank:
            assert errors.errors and errors.ok, (case, errors.failures())
