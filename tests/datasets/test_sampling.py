import pytest
import torch

from sciml.datasets.sampling import epoch_batches, epoch_seed


def test_epoch_seed_keeps_the_orders_of_earlier_runs() -> None:
    # runs checkpointed before epoch_seed existed resume onto the same order
    assert epoch_seed(7, 3) == 7 * 1_000_003 + 3
    assert epoch_seed(7, 3, stream="workers") == 7 * 7919 + 3
    order = torch.randperm(23, generator=torch.Generator().manual_seed(7 * 1_000_003 + 3))
    flat = [i for batch in epoch_batches(23, 4, epoch=3, seed=7) for i in batch]
    assert flat == order.tolist()


def test_epoch_seeds_differ_between_epochs_and_streams() -> None:
    seeds = {epoch_seed(seed, epoch) for seed in range(3) for epoch in range(3)}
    assert len(seeds) == 9
    assert epoch_seed(1, 0) != epoch_seed(1, 0, stream="workers")


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((-1, 0), {}, "seed must be an integer >= 0, got -1"),
        ((0, -2), {}, "epoch must be an integer >= 0, got -2"),
        ((0, 1.5), {}, "epoch must be an integer >= 0, got 1.5"),
        ((True, 0), {}, "seed must be an integer >= 0, got True"),
        ((0, 0), {"stream": "shuffle"}, "stream must be one of"),
    ],
)
def test_epoch_seed_rejects_bad_inputs(
    args: tuple[float, ...], kwargs: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        epoch_seed(*args, **kwargs)


def test_epoch_batches_cover_each_sample_once_per_epoch() -> None:
    batches = epoch_batches(23, 4, epoch=3, seed=7)
    assert sorted(i for b in batches for i in b) == list(range(23))
    assert batches == epoch_batches(23, 4, epoch=3, seed=7)
    assert batches != epoch_batches(23, 4, epoch=4, seed=7)
    halves = [epoch_batches(23, 4, epoch=3, seed=7, replica=(r, 2)) for r in range(2)]
    assert sum(len(b) for h in halves for b in h) == 24  # padded to equal shares
    assert {i for h in halves for b in h for i in b} == set(range(23))
