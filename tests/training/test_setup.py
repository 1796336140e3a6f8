"""sciml.training.setup: the running sums a resumed rank takes from a checkpoint."""

from sciml.training.setup import LoopState, _own_sums


def test_each_rank_resumes_its_own_sums() -> None:
    saved = LoopState(rank_sums=[{"loss": 1.0}, {"loss": 2.0}], rank_counts=[3, 4])
    assert [(_own_sums(saved, r, 2).sums, _own_sums(saved, r, 2).count) for r in (0, 1)] == [
        ({"loss": 1.0}, 3),
        ({"loss": 2.0}, 4),
    ]
    assert _own_sums(saved, 1, 2).rank_sums == []  # the per-rank copy is not carried on


def test_sums_of_another_world_size_go_to_rank_zero_whole() -> None:
    saved = LoopState(rank_sums=[{"loss": 1.0}, {"loss": 2.0}], rank_counts=[3, 4])
    assert (_own_sums(saved, 0, 4).sums, _own_sums(saved, 0, 4).count) == ({"loss": 3.0}, 7)
    assert (_own_sums(saved, 3, 4).sums, _own_sums(saved, 3, 4).count) == ({}, 0)
    older = LoopState(sums={"loss": 5.0}, count=9)  # checkpoints that saved the summed form
    assert (_own_sums(older, 0, 2).sums, _own_sums(older, 0, 2).count) == ({"loss": 5.0}, 9)
    assert (_own_sums(older, 1, 2).sums, _own_sums(older, 1, 2).count) == ({}, 0)
