"""UNet options: a pooling factor per spatial dim."""

import pytest
import torch

from sciml.models import UNet


@pytest.mark.parametrize("upsample", ["transpose", "interpolate"])
def test_per_dim_pooling_keeps_a_two_level_axis(upsample: str) -> None:
    net = UNet(3, 2, dims=3, base_channels=4, depth=2, pool=(1, 2, 2), upsample=upsample)
    x = torch.randn(2, 3, 2, 8, 12)
    assert net(x).shape == (2, 2, 2, 8, 12)
    # the default pools every dim: the 2-level axis cannot be pooled twice
    with pytest.raises(ValueError, match=r"divisible by 4, 4, 4 \(pool\*\*depth"):
        UNet(3, 2, dims=3, base_channels=4, depth=2, upsample=upsample)(x)


def test_default_pool_is_unchanged() -> None:
    torch.manual_seed(0)
    default = UNet(1, 1, dims=2, base_channels=4, depth=1)
    torch.manual_seed(0)
    explicit = UNet(1, 1, dims=2, base_channels=4, depth=1, pool=(2, 2))
    x = torch.randn(1, 1, 4, 4)
    assert default.state_dict().keys() == explicit.state_dict().keys()
    assert torch.equal(default(x), explicit(x))


@pytest.mark.parametrize("pool", [(2, 2), 0, (2, 2, 1.5), True])
def test_bad_pool_is_rejected(pool: object) -> None:
    with pytest.raises(ValueError, match="UNet pool must be an integer >= 1 or 3 of them"):
        UNet(1, 1, dims=3, pool=pool)  # type: ignore[arg-type]
