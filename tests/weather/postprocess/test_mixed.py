"""MixedPostProcessor: the loss adds the output layer's smoothness penalty; its grid is fixed."""

import pytest
import torch

from sciml.weather.metrics.losses import crps_gaussian_loss
from sciml.weather.postprocess.mixed import MixedPostProcessor
from sciml.weather.postprocess.models import gaussian_crps_loss


def test_the_loss_adds_the_weighted_smoothness_penalty() -> None:
    torch.manual_seed(0)
    model = MixedPostProcessor(
        1, height=4, width=4, features=2, base_channels=4, depth=1, periodic=True, smoothness=0.5
    )
    with torch.no_grad():
        model.local.weight.normal_()
    members, truth, lead = torch.randn(2, 3, 1, 4, 4), torch.randn(2, 1, 4, 4), torch.ones(2)
    penalty = model.local.smoothness()
    assert penalty.item() > 0
    torch.testing.assert_close(model.regularisation(), 0.5 * penalty)
    batch = {"members": members, "truth": truth, "lead_time": lead}
    crps = crps_gaussian_loss(truth, *model(members, None, lead))
    torch.testing.assert_close(gaussian_crps_loss(model, batch), crps + 0.5 * penalty)


def test_another_grid_or_a_bad_smoothness_is_rejected() -> None:
    model = MixedPostProcessor(1, height=4, width=4, features=2, base_channels=4, depth=1)
    with pytest.raises(
        ValueError, match=r"input must be \(N, C_in=2, H=4, W=4\), got \(1, 2, 8, 8\)"
    ):
        model(torch.zeros(1, 3, 1, 8, 8), None, torch.zeros(1))
    with pytest.raises(ValueError, match="smoothness must be a finite number >= 0"):
        MixedPostProcessor(1, height=4, width=4, smoothness=-1.0)
