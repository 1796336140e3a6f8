"""The planner's model walk: global shapes, FLOPs, parameters and saved tensors on ``meta``."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from sciml.models import UNet
from sciml.spatial_parallel.partition import Window
from sciml.spatial_parallel.planner.cost import estimate
from sciml.spatial_parallel.planner.graph import trace
from tests.spatial_parallel.planner.test_cost import PROFILE
from tests.spatial_parallel.planner_models import pool_then_block


def test_one_convolution_closed_form() -> None:
    graph = trace(nn.Conv3d(2, 4, 3, padding=1), (2, 2, 8, 8, 8))
    (layer,) = graph.layers
    assert layer.kind == "Conv3d" and layer.out_shape == (2, 4, 8, 8, 8)
    # 2 FLOPs per multiply-add: every output voxel reads Cin * 27 inputs
    assert layer.flops == 2 * (2 * 4 * 8**3) * (2 * 27)
    assert layer.params == graph.params == 4 * 2 * 27 + 4
    assert layer.windows == (Window(3, 1, 1, 1, 1),) * 3
    assert graph.saved == ()  # the only saved tensor is the input, a term of its own


def test_in_place_activation_is_counted_once() -> None:
    model = nn.Sequential(
        nn.Conv3d(1, 3, 3, padding=1), nn.ReLU(inplace=True), nn.Conv3d(3, 1, 3, padding=1)
    )
    graph = trace(model, (1, 1, 6, 6, 6))
    # ReLU keeps its output for backward and the second conv keeps the same storage
    big = [s for s in graph.saved if s.split]
    assert [s.shape for s in big] == [(1, 3, 6, 6, 6)]
    assert sum(math.prod(s.shape) * s.itemsize for s in big) == 3 * 6**3 * 4


def test_out_of_place_activations_are_separate_tensors() -> None:
    model = nn.Sequential(nn.Conv3d(1, 3, 3, padding=1), nn.LeakyReLU(), nn.MaxPool3d(2))
    graph = trace(model, (1, 1, 6, 6, 6))
    # LeakyReLU keeps its input (the conv output), max pooling its input and int64 indices
    assert sorted((s.shape, s.itemsize) for s in graph.saved if s.split) == [
        ((1, 3, 3, 3, 3), 8),
        ((1, 3, 6, 6, 6), 4),
        ((1, 3, 6, 6, 6), 4),
    ]


def test_the_model_is_not_modified() -> None:
    model = nn.Conv3d(1, 1, 3)
    trace(model, (1, 1, 5, 5, 5))
    assert model.weight.device.type == "cpu"


@pytest.mark.parametrize(
    ("model", "shape", "message"),
    [
        (
            nn.Sequential(nn.Conv2d(1, 1, 3)),
            (1, 1, 8, 8, 8),
            r"layer '0' \(Conv2d\) cannot be split",
        ),
        (nn.Conv3d(1, 1, 3), (1, 1, 8, 8), r"5 positive sizes \(N, C, D, H, W\)"),
        (nn.Conv3d(1, 1, 3), (1, 1, 0, 8, 8), "5 positive sizes"),
        (nn.Conv3d(2, 1, 3), (1, 1, 8, 8, 8), r"Conv3d rejects input shape \(1, 1, 8, 8, 8\)"),
        ("cosmoflow", (1, 1, 8, 8, 8), "expected a torch.nn.Module"),
    ],
)
def test_bad_inputs_are_named(model: nn.Module, shape: tuple[int, ...], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        trace(model, shape)


def test_a_float64_model_is_priced_in_float64() -> None:
    graph = trace(nn.Sequential(nn.Conv3d(1, 2, 3), nn.ReLU()).double(), (1, 1, 5, 5, 5))
    assert {layer.itemsize for layer in graph.layers} == {8}
    assert [s.itemsize for s in graph.saved] == [8]


def test_a_block_holds_its_input_until_its_last_layer() -> None:
    # Sequential.forward lets each input go once the next layer has it; a block's
    # caller holds the block's input until the block returns
    flat, nested = (trace(pool_then_block(n), (1, 2, 16, 16, 16)) for n in (False, True))
    assert [layer.input_held for layer in flat.layers][1:] == [0, 0, 0, 0]
    assert [layer.input_held for layer in nested.layers][1:] == [0, 2, 0, 0]
    # the first convolution's output, unsaved, lives on through the ReLU that takes it
    assert [layer.output_held for layer in flat.layers] == [0, 0, 1, 0, 0]


def test_the_unet_holds_each_upsampled_volume_through_its_decoder_block() -> None:
    # x = up(x); x = block(cat([x, skip])): the upsampled x and the concatenation
    # live through the whole decoder block
    model = UNet(2, 2, base_channels=4, depth=2)
    graph = trace(model, (1, 2, 16, 16, 16))
    names = [layer.name for layer in graph.layers]
    block = len([m for m in model.decoder[1].modules() if not list(m.children())])
    up = names.index("up.1")
    assert graph.layers[up].output_held == block
    assert graph.layers[up + 1].name == "decoder.1.0"
    assert graph.layers[up + 1].input_held == block - 1
    assert graph.layers[names.index("head")].input_held == 0


class _Conv3DSimple(nn.Conv3d):
    """A subclass that only builds the layer, as torchvision's video models have."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(cin, cout, kernel_size=3, padding=1, bias=False)


def test_a_subclass_of_a_supported_layer_is_priced_as_that_layer() -> None:
    shape = (1, 2, 16, 16, 16)
    plain = trace(nn.Sequential(nn.Conv3d(2, 4, 3, padding=1, bias=False), nn.ReLU()), shape)
    sub = trace(nn.Sequential(_Conv3DSimple(2, 4), nn.ReLU()), shape)
    assert [layer.kind for layer in sub.layers] == ["Conv3d", "ReLU"]
    for grid in [(1, 1, 1, 1), (1, 2, 1, 1), (1, 2, 2, 1)]:
        assert estimate(sub, grid, PROFILE) == estimate(plain, grid, PROFILE)


class _ScaledConv(nn.Conv3d):
    """A subclass whose own forward the split layer would not run."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(x)


def test_a_subclass_with_its_own_forward_is_refused_as_parallelize_refuses_it() -> None:
    with pytest.raises(ValueError, match=r"'0' \(_ScaledConv\) subclasses Conv3d but overrides"):
        trace(nn.Sequential(_ScaledConv(2, 4, 3, padding=1)), (1, 2, 8, 8, 8))


def test_instance_norm_is_priced_as_the_group_norm_it_equals() -> None:
    # InstanceNorm3d(C, affine=True) computes what GroupNorm(C, C) computes: per sample and
    # channel statistics over the whole (split) volume, the same collectives
    def model(norm: nn.Module) -> nn.Module:
        return nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), norm, nn.ReLU())

    shape = (2, 1, 16, 16, 16)
    instance = trace(model(nn.InstanceNorm3d(4, affine=True)), shape)
    group = trace(model(nn.GroupNorm(4, 4)), shape)
    assert instance.layers[1].kind == "InstanceNorm3d" and instance.layers[1].channels == 4
    assert instance.layers[1].flops == group.layers[1].flops
    split, grouped = (estimate(g, (1, 2, 1, 1), PROFILE) for g in (instance, group))
    assert split.time["norm"] > 0.0  # four all-reduces over the two ranks of a sample
    assert split.time == grouped.time
    # torch's own kernels keep statistics of other shapes for backward: (N * C) or (N, G)
    statistics = 2 * 2 * 4 * 4  # mean and 1/std of N=2 samples and C=4 channels, float32
    for term, nbytes in split.memory.items():
        assert abs(nbytes - grouped.memory[term]) <= (statistics if term == "activations" else 0)
    assert estimate(instance, (1, 1, 1, 1), PROFILE).time["norm"] == 0.0  # nothing to reduce


class _Attention(nn.Module):
    """Patch tokens attending to each other, written as a user writes them."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.empty = nn.Conv3d(1, 4, 4, stride=4), nn.ModuleList()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        weights = torch.softmax(tokens @ tokens.transpose(1, 2), -1)
        return (weights @ tokens).transpose(1, 2).reshape(self.embed(x).shape)


def test_attention_over_tokens_is_refused_naming_the_op_and_line() -> None:
    """parallelize runs it on gathered tokens, which the planner does not price; an empty
    container (no layer of its own) is not what it names."""
    with pytest.raises(ValueError, match=r"_Attention computes Tensor.matmul on tokens at .*"):
        trace(_Attention(), (1, 1, 8, 8, 8))
    with pytest.raises(ValueError, match=r"test_graph.py:\d+; parallelize runs it exactly"):
        trace(_Attention(), (1, 1, 8, 8, 8))
