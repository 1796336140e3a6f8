"""The halo exchange posts one batch per direction, and every send meets its receive."""

from __future__ import annotations

from sciml.distributed import spawn
from sciml.spatial_parallel.audit import unmatched
from tests.spatial_parallel.comm_workers import posted_messages


def test_every_send_meets_its_receive_at_the_same_position_on_the_peer() -> None:
    """2x2 ranks (edges and corners), a circular wrap (two messages per pair and direction),
    forward and backward, overlapped and blocking: one batch_isend_irecv per exchange, each
    sorted by (peer, tag, kind), and the k-th send from a to b is the k-th receive on b."""
    ranks = spawn(posted_messages, 4, {"depth": 2, "height": 2})
    for setting in ranks[0]:
        logs = [rank[setting] for rank in ranks]
        assert unmatched(logs) == [], setting
        for log in logs:
            assert log.batches, setting
            for batch in log.batches:
                order = [(m.peer, m.tag, m.kind != "send") for m in batch]
                assert order == sorted(order), setting
