"""PooledPostProcessor: independent of the members' order, applies to any number of members."""

import pytest
import torch
from torch import nn

from sciml.weather.postprocess.pooled import PooledPostProcessor


def test_invariant_to_member_order_and_any_member_count() -> None:
    torch.manual_seed(0)
    model = PooledPostProcessor(2, static=1, hidden=8, periodic=True).double()
    last = model.head[-1]
    assert isinstance(last, nn.Conv2d)
    with torch.no_grad():  # the zero last layer would make any model invariant
        last.weight.normal_(std=0.1)
    members = torch.randn(3, 5, 2, 4, 6, dtype=torch.float64)
    static = torch.randn(3, 1, 4, 6, dtype=torch.float64)
    lead = torch.tensor([0.0, 1.0, 4.0], dtype=torch.float64)
    mu, sigma = model(members, static, lead)
    shuffled = members[:, torch.randperm(5)]
    mu2, sigma2 = model(shuffled, static, lead)
    # float64: reordering the pooled sums moves the result by ~k eps64 per layer, far below
    # 1e-10; any dependence on the order moves it by O(0.01)
    torch.testing.assert_close(mu2, mu, rtol=0, atol=1e-10)
    torch.testing.assert_close(sigma2, sigma, rtol=0, atol=1e-10)
    for k in (2, 3, 9):
        mu_k, sigma_k = model(torch.randn(3, k, 2, 4, 6, dtype=torch.float64), static, lead)
        assert mu_k.shape == sigma_k.shape == (3, 2, 4, 6) and bool((sigma_k > 0).all())
    with pytest.raises(ValueError, match=r"members must be \(N, k >= 2"):
        model(members[:, :1], static, lead)
