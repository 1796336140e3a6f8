"""The message log's matching: what it reports on hand-made logs of two ranks."""

from __future__ import annotations

import pickle

from sciml.spatial_parallel.audit import CommLog, Message, unmatched


def _message(kind: str, peer: int, tag: int, size: int = 4) -> Message:
    return Message(kind, peer, tag, (size,), "torch.float32", "cpu")


def test_matched_batches_pass() -> None:
    zero = CommLog(batches=[[_message("send", 1, 0), _message("recv", 1, 1)]])
    one = CommLog(batches=[[_message("send", 0, 1)], [_message("recv", 0, 0)]])
    assert unmatched([zero, one]) == []


def test_order_between_a_pair_counts_not_only_the_tags() -> None:
    """NCCL matches by order: two sends whose receives are posted the other way round."""
    zero = CommLog(batches=[[_message("send", 1, 0, 2), _message("send", 1, 1, 3)]])
    one = CommLog(batches=[[_message("recv", 0, 1, 3), _message("recv", 0, 0, 2)]])
    problems = unmatched([zero, one])
    assert len(problems) == 2 and "message 0 from rank 0 to rank 1" in problems[0]


def test_missing_receive_and_unbatched_operations_are_reported() -> None:
    zero = CommLog(batches=[[_message("send", 1, 0)]], unbatched=[_message("send", 1, 7)])
    problems = unmatched([zero, CommLog()])
    assert "operations outside batch_isend_irecv" in problems[0]
    assert "received as None" in problems[1]


def test_log_pickles_without_its_patches() -> None:
    log = pickle.loads(pickle.dumps(CommLog(batches=[[_message("send", 1, 0)]])))
    assert log.batches[0][0].peer == 1 and log.devices() == set()
