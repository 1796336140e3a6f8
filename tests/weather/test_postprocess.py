"""PostProcessor: the raw ensemble's Gaussian at the start, it learns, and shapes are checked."""

import pytest
import torch

from sciml.weather.postprocess import SIGMA_MIN, PostProcessor, gaussian_crps_loss


def _batch(generator: torch.Generator, static: int = 1) -> dict[str, torch.Tensor]:
    members = torch.randn(4, 5, 2, 8, 8, generator=generator)
    # a systematic error to correct: the truth is 1.5 x the mean, shifted
    truth = 1.5 * members.mean(1) + 0.5 + 0.3 * torch.randn(4, 2, 8, 8, generator=generator)
    batch = {"members": members, "truth": truth}
    if static:
        batch["static"] = torch.randn(4, static, 8, 8, generator=generator)
    return batch


@pytest.mark.parametrize("backbone", ["mlp", "unet"])
def test_starts_from_the_raw_ensemble_and_overfits_a_batch(backbone: str) -> None:
    torch.manual_seed(0)
    batch = _batch(torch.Generator().manual_seed(0))
    model = PostProcessor(2, static=1, backbone=backbone, base_channels=8, depth=1)  # type: ignore[arg-type]
    mu, sigma = model(batch["members"], batch["static"])
    torch.testing.assert_close(mu, batch["members"].mean(1))
    torch.testing.assert_close(sigma, batch["members"].std(1) + SIGMA_MIN)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    start = gaussian_crps_loss(model, batch).item()
    for _ in range(100):
        optimizer.zero_grad()
        loss = gaussian_crps_loss(model, batch)
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.5 * start


def test_inputs_are_checked() -> None:
    model = PostProcessor(2)
    with pytest.raises(ValueError, match=r"members must be \(N, k >= 2, C=2, H, W\)"):
        model(torch.zeros(1, 1, 2, 4, 4))
    with pytest.raises(ValueError, match=r"expected 0 static field\(s\)"):
        model(torch.zeros(1, 3, 2, 4, 4), torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="backbone must be one of"):
        PostProcessor(2, backbone="cnn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channels must be an integer >= 1"):
        PostProcessor(0)
