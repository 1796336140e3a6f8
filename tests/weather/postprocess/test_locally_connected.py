"""LocallyConnected2d: one point's input moves only that point's output; the neighbour penalty."""

import pytest
import torch

from sciml.weather.postprocess.locally_connected import LocallyConnected2d


def test_each_point_sees_only_its_own_input() -> None:
    torch.manual_seed(0)
    layer = LocallyConnected2d(3, 2, 4, 5)
    assert not layer.weight.any() and not layer.bias.any()  # zero at the start
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x = torch.randn(2, 3, 4, 5)
    changed = x.clone()
    changed[:, :, 1, 3] += 1.0
    moved = (layer(changed) - layer(x)).abs().amax(dim=(0, 1)) > 0
    expected = torch.zeros(4, 5, dtype=torch.bool)
    expected[1, 3] = True
    assert torch.equal(moved, expected)
    # a point's output is its own weights applied to its own input, in float64
    ref = layer.weight[:, :, 2, 4].double() @ x[0, :, 2, 4].double() + layer.bias[:, 2, 4]
    torch.testing.assert_close(layer(x)[0, :, 2, 4].double(), ref.double())


@pytest.mark.parametrize("periodic", [False, True])
def test_smoothness_is_the_mean_squared_difference_of_neighbours(periodic: bool) -> None:
    # one input and one output channel on a 2 x 3 grid: theta = (weight, bias) per point
    layer = LocallyConnected2d(1, 1, 2, 3, periodic=periodic)
    weight = torch.tensor([[0.0, 1.0, 3.0], [1.0, 1.0, 0.0]])
    with torch.no_grad():
        layer.weight[0, 0] = weight
        layer.bias[0, 1, 2] = 2.0  # bias zero elsewhere
    # latitude pairs (3): weights 1, 0, 9; biases 0, 0, 4 -> 14
    # longitude pairs (2 per row, 4): weights 1 + 4 + 0 + 1, biases 0 + 0 + 0 + 4 -> 10
    # periodic adds the (last, first) pair of each row (2): weights 9 + 1, biases 0 + 4 -> 14
    expected = (14 + 10 + 14) / 9 if periodic else (14 + 10) / 7
    assert layer.smoothness().item() == pytest.approx(expected, rel=1e-6)


def test_bad_inputs_are_rejected() -> None:
    layer = LocallyConnected2d(3, 2, 4, 5)
    with pytest.raises(
        ValueError, match=r"input must be \(N, C_in=3, H=4, W=5\), got \(1, 3, 5, 4\)"
    ):
        layer(torch.zeros(1, 3, 5, 4))
    with pytest.raises(ValueError, match="width must be an integer >= 1"):
        LocallyConnected2d(3, 2, 4, 0)
    with pytest.raises(ValueError, match="a periodic grid needs width >= 3"):
        LocallyConnected2d(3, 2, 4, 2, periodic=True)
