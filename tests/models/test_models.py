"""sciml.models: shapes, errors, and that every parameter learns."""

import re

import pytest
import torch

from sciml.models import CosmoFlow, UNet


@pytest.mark.parametrize(("dims", "size"), [(2, (32, 48)), (3, (16, 8, 24))])
@pytest.mark.parametrize("upsample", ["transpose", "interpolate"])
def test_unet_keeps_spatial_shape(dims: int, size: tuple[int, ...], upsample: str) -> None:
    model = UNet(3, 2, dims=dims, base_channels=4, depth=2, upsample=upsample)
    x = torch.randn(2, 3, *size)
    y = model(x)
    assert y.shape == (2, 2, *size)
    y.square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_unet_errors() -> None:
    with pytest.raises(ValueError, match="dims=2 or dims=3"):
        UNet(1, 1, dims=1)
    model = UNet(1, 1, dims=3, base_channels=2, depth=2)
    with pytest.raises(ValueError, match="divisible by 4"):
        model(torch.randn(1, 1, 8, 8, 10))
    with pytest.raises(ValueError, match="expects a 5-D tensor"):
        model(torch.randn(1, 1, 8, 8))


@pytest.mark.parametrize("head", ["pool", "flatten"])
def test_cosmoflow_output(head: str) -> None:
    model = CosmoFlow(4, 4, base_filters=4, n_conv=3, head=head, input_size=16, batch_norm=True)
    y = model(torch.randn(2, 4, 16, 16, 16))
    assert y.shape == (2, 4)
    assert y.abs().max() <= 1  # tanh head, as in the MLPerf reference
    y.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_cosmoflow_flatten_needs_input_size() -> None:
    with pytest.raises(ValueError, match="input_size divisible by 2\\*\\*n_conv=8"):
        CosmoFlow(head="flatten", n_conv=3, input_size=20)
    with pytest.raises(ValueError, match="head must be"):
        CosmoFlow(head="dense")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(norm="bogus"), "norm must be 'batch', 'group' or 'none', got 'bogus'"),
        (dict(upsample="bilinear"), "upsample must be 'transpose' or 'interpolate'"),
        (dict(base_channels=0), "base_channels must be a positive integer, got 0"),
        (dict(depth=0), "depth must be an integer >= 1, got 0"),
    ],
)
def test_unet_rejects_bad_options(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        UNet(1, 1, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(in_channels=0), "in_channels must be a positive integer, got 0"),
        (dict(dense=(8, 0)), "dense[1] must be a positive integer, got 0"),
        (dict(n_conv=-1), "n_conv must be an integer >= 0, got -1"),
        (dict(dropout=1.0), "dropout must be in [0, 1), got 1.0"),
        (dict(head="flatten", n_conv=2, input_size=0), "input_size divisible by 2**n_conv=4"),
    ],
)
def test_cosmoflow_rejects_bad_options(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        CosmoFlow(**kwargs)


def test_cosmoflow_rejects_non_volume() -> None:
    with pytest.raises(ValueError, match=r"expects an \(N, C, D, H, W\) tensor, got \(4, 16\)"):
        CosmoFlow(4, 4, base_filters=2, n_conv=1)(torch.randn(4, 16))


def test_cosmoflow_output_scale_stretches_the_tanh() -> None:
    torch.manual_seed(0)
    plain = CosmoFlow(1, 2, base_filters=2, n_conv=1, dense=(4,))
    scaled = CosmoFlow(1, 2, base_filters=2, n_conv=1, dense=(4,), output_scale=1.2)
    scaled.load_state_dict(plain.state_dict())
    x = 50 * torch.randn(3, 1, 4, 4, 4)
    torch.testing.assert_close(scaled(x), 1.2 * plain(x))
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="output_scale must be > 0"):
            CosmoFlow(output_scale=bad)
