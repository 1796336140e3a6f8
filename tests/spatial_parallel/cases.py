"""Layer and model configurations checked against the single-device op."""

from __future__ import annotations

from typing import Any


def conv(**kwargs: Any) -> tuple[str, dict[str, Any]]:
    """A Conv3d spec with 2 input and 3 output channels."""
    return ("Conv3d", dict(in_channels=2, out_channels=3, **kwargs))


def seq(*layers: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A Sequential spec."""
    return ("Seq", dict(layers=list(layers)))


POOL_HEAD = seq(
    conv(kernel_size=3, padding=1),
    ("AdaptiveAvgPool3d", dict(output_size=1)),
    ("Flatten", {}),
    ("Linear", dict(in_features=3, out_features=2)),
)

#: One entry per layer feature: (spec, global input shape).
LAYERS: list[tuple[tuple[str, dict[str, Any]], tuple[int, ...]]] = [
    (conv(kernel_size=3, padding=1), (2, 2, 7, 6, 5)),
    (conv(kernel_size=2), (2, 2, 7, 6, 5)),
    (conv(kernel_size=4, padding="same"), (1, 2, 9, 6, 5)),
    (conv(kernel_size=(3, 2, 1), stride=2, padding=1), (1, 2, 9, 7, 5)),
    (conv(kernel_size=3, dilation=2, padding=2), (1, 2, 11, 7, 6)),
    (conv(kernel_size=3, padding=1, padding_mode="circular"), (1, 2, 8, 6, 5)),
    (conv(kernel_size=3, padding=1, padding_mode="replicate"), (1, 2, 8, 6, 5)),
    (conv(kernel_size=3, padding=2, padding_mode="reflect"), (1, 2, 9, 6, 5)),
    (
        (
            "Conv3d",
            dict(in_channels=4, out_channels=4, kernel_size=3, padding=1, groups=2, bias=False),
        ),
        (1, 4, 7, 6, 5),
    ),
    (("MaxPool3d", dict(kernel_size=2)), (1, 2, 9, 6, 5)),
    (("MaxPool3d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)), (1, 2, 10, 6, 5)),
    (("MaxPool3d", dict(kernel_size=2, dilation=2, stride=1)), (1, 2, 9, 6, 5)),
    (
        (
            "AvgPool3d",
            dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        ),
        (1, 2, 10, 6, 5),
    ),
    (("AvgPool3d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)), (1, 2, 10, 6, 5)),
    (("AvgPool3d", dict(kernel_size=2, divisor_override=3)), (1, 2, 9, 6, 5)),
    (
        ("ConvTranspose3d", dict(in_channels=2, out_channels=3, kernel_size=2, stride=2)),
        (1, 2, 5, 4, 3),
    ),
    (
        (
            "ConvTranspose3d",
            dict(
                in_channels=2, out_channels=3, kernel_size=3, stride=2, padding=1, output_padding=1
            ),
        ),
        (1, 2, 5, 4, 3),
    ),
    (
        ("ConvTranspose3d", dict(in_channels=2, out_channels=4, kernel_size=2, stride=3, groups=2)),
        (1, 2, 5, 4, 3),
    ),
    (("Upsample", dict(scale_factor=2, mode="nearest")), (1, 2, 5, 4, 3)),
    (("Upsample", dict(scale_factor=2, mode="trilinear", align_corners=False)), (1, 2, 5, 4, 3)),
    (("Upsample", dict(size=(7, 5, 4), mode="trilinear", align_corners=True)), (1, 2, 5, 4, 3)),
    (("Upsample", dict(scale_factor=1.5, mode="nearest-exact")), (1, 2, 5, 4, 3)),
    (("BatchNorm3d", dict(num_features=2)), (3, 2, 5, 4, 3)),
    (("BatchNorm3d", dict(num_features=2, momentum=None)), (2, 2, 5, 4, 3)),
    (("GroupNorm", dict(num_groups=2, num_channels=4)), (2, 4, 5, 4, 3)),
    (
        seq(
            conv(kernel_size=3, padding=1),
            ("LeakyReLU", dict(negative_slope=0.1)),
            ("Dropout", dict(p=0.3)),
        ),
        (2, 2, 6, 5, 4),
    ),
    (seq(conv(kernel_size=3, padding=1), ("Dropout3d", dict(p=0.5))), (3, 2, 6, 5, 4)),
    # every constructor option of the swapped layers (issue: each is exact or refused)
    (conv(kernel_size=3, padding="valid"), (1, 2, 7, 6, 5)),
    (conv(kernel_size=3, padding="same", padding_mode="reflect"), (1, 2, 7, 6, 5)),
    (conv(kernel_size=(1, 3, 2), dilation=(1, 2, 1), bias=False), (1, 2, 7, 8, 5)),
    (
        (
            "ConvTranspose3d",
            dict(
                in_channels=2,
                out_channels=2,
                kernel_size=3,
                stride=2,
                dilation=2,
                output_padding=1,
                bias=False,
            ),
        ),
        (1, 2, 5, 4, 3),
    ),
    (
        ("MaxPool3d", dict(kernel_size=(3, 2, 2), stride=(1, 2, 1), padding=(1, 0, 1))),
        (1, 2, 8, 6, 5),
    ),
    (("AvgPool3d", dict(kernel_size=(2, 3, 1), stride=1, padding=(1, 1, 0))), (1, 2, 8, 6, 5)),
    (
        ("Upsample", dict(scale_factor=1.5, mode="trilinear", recompute_scale_factor=True)),
        (1, 2, 5, 4, 3),
    ),
    (("Upsample", dict(scale_factor=(2, 1, 3), mode="nearest")), (1, 2, 5, 4, 3)),
    (("Upsample", dict(scale_factor=0.5, mode="nearest")), (1, 2, 8, 6, 4)),
    (("Upsample", dict(size=(9, 4, 5), mode="nearest-exact")), (1, 2, 5, 4, 3)),
    (("Upsample", dict(size=7, mode="trilinear")), (1, 2, 5, 4, 3)),
    (("BatchNorm3d", dict(num_features=2, bias=False)), (3, 2, 5, 4, 3)),
    (("BatchNorm3d", dict(num_features=2, affine=False, eps=1e-3, momentum=0.5)), (2, 2, 5, 4, 3)),
    (("BatchNorm3d", dict(num_features=2, track_running_stats=False)), (2, 2, 5, 4, 3)),
    (("BatchNorm3d", dict(num_features=2)), (2, 2, 1, 1, 1)),  # empty blocks on split ranks
    (("GroupNorm", dict(num_groups=2, num_channels=4, affine=False)), (2, 4, 5, 4, 3)),
    (("GroupNorm", dict(num_groups=2, num_channels=4, bias=False, eps=1e-3)), (2, 4, 1, 1, 1)),
    (seq(conv(kernel_size=3, padding=1), ("Dropout", dict(p=0.3, inplace=True))), (2, 2, 6, 5, 4)),
    (
        seq(
            conv(kernel_size=3, padding=1),
            ("AdaptiveAvgPool3d", dict(output_size=(1, 1, 1))),
            ("Flatten", dict(start_dim=1, end_dim=-1)),
        ),
        (2, 2, 6, 5, 4),
    ),
    (POOL_HEAD, (3, 2, 7, 6, 5)),
]

#: Whole models (spec, global input shape).
MODELS: list[tuple[tuple[str, dict[str, Any]], tuple[int, ...]]] = [
    (
        (
            "CosmoFlow",
            dict(
                in_channels=2,
                out_features=3,
                base_filters=4,
                n_conv=3,
                dense=(8,),
                batch_norm=True,
                dropout=0.2,
            ),
        ),
        (2, 2, 16, 12, 12),
    ),
    (
        (
            "CosmoFlow",
            dict(
                in_channels=2,
                out_features=3,
                base_filters=4,
                n_conv=2,
                dense=(8,),
                head="flatten",
                input_size=8,
            ),
        ),
        (2, 2, 8, 8, 8),
    ),
    (("UNet", dict(in_channels=2, out_channels=2, base_channels=4, depth=2)), (2, 2, 8, 12, 4)),
    (
        (
            "UNet",
            dict(
                in_channels=2,
                out_channels=2,
                base_channels=4,
                depth=2,
                norm="group",
                upsample="interpolate",
            ),
        ),
        (1, 2, 12, 4, 8),
    ),
]


def cases(entries: list[Any], **options: Any) -> list[dict[str, Any]]:
    """Keyword arguments of :func:`workers.compare` for each entry."""
    return [dict(spec=spec, shape=shape, **options) for spec, shape in entries]
