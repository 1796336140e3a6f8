"""The small collectives: replica checks, CPU reductions on any group, device choice."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from sciml.distributed import init_distributed, spawn
from sciml.distributed.collectives import (
    all_reduce_cpu,
    all_reduce_sums,
    backend_devices,
    check_replica,
    collective_device,
    on_rank0,
    to_device,
)


def test_check_replica() -> None:
    assert check_replica((1, 2)) == (1, 2)
    for bad in ((2, 2), (0, 0), (-1, 3), (True, 2), [0, 1], (0,), "0,1"):
        with pytest.raises(ValueError, match="replica must be \\(index, count\\)"):
            check_replica(bad)


def _sums_of_rank() -> tuple[dict[str, float], int]:
    rank = dist.get_rank()
    return all_reduce_sums({"loss": 0.25 + rank, "acc": 2.0 * rank}, 3 + rank)


def test_all_reduce_sums_adds_named_sums_and_counts_over_ranks() -> None:
    expected = ({"acc": 2.0, "loss": 1.5}, 7)
    assert spawn(_sums_of_rank, 2) == [expected, expected]
    assert all_reduce_sums({"loss": 0.5}, 2) == ({"loss": 0.5}, 2)  # no process group


def test_collective_device_and_to_device_on_cpu() -> None:
    cpu = torch.device("cpu")
    assert collective_device() == cpu
    batch = {"x": torch.ones(2), "pair": (torch.zeros(1), [torch.ones(1)]), "name": "a"}
    moved = to_device(batch, cpu)
    assert isinstance(moved["pair"], tuple) and isinstance(moved["pair"][1], list)
    assert moved["name"] == "a" and torch.equal(moved["x"], batch["x"])


def test_backend_devices_and_group_reductions_on_gloo() -> None:
    with init_distributed(backend="gloo", env={}):
        assert backend_devices() == {"cpu", "cuda"}  # gloo: cpu:gloo,cuda:gloo
        assert collective_device() == torch.device("cpu")
        assert all_reduce_cpu(torch.ones(2), group=dist.new_group([0])).tolist() == [1.0, 1.0]


def test_to_device_keeps_a_tensors_marks() -> None:
    block = torch.ones(1, 1, 2, 2, 2)
    block.mark = (1, 1, 4, 2, 2)  # type: ignore[attr-defined]
    moved = to_device({"x": block}, torch.device("meta"))["x"]
    assert moved.is_meta and moved.mark == (1, 1, 4, 2, 2)


def _rank0_value(fail: bool) -> tuple[str, int]:
    calls: list[int] = []

    def decide() -> int:
        calls.append(dist.get_rank())
        if fail:
            raise FileNotFoundError("no such run folder: runs/x")
        return 7

    try:
        return "value", on_rank0(decide) + len(calls) * 100
    except FileNotFoundError as err:
        return str(err), len(calls)


def test_on_rank0_runs_once_and_every_rank_gets_the_result_or_the_error() -> None:
    assert spawn(_rank0_value, 2, False) == [("value", 107), ("value", 7)]
    (first, calls0), (second, calls1) = spawn(_rank0_value, 2, True)
    assert (calls0, calls1) == (1, 0)
    assert first == "no such run folder: runs/x"
    assert second == "rank 0 failed with FileNotFoundError: no such run folder: runs/x"
