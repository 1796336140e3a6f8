"""The layers ``parallelize`` knows: one table that it, the planner and the README list read.

Each torch layer type has one :class:`LayerSpec`: what ``parallelize`` does with
it (its :data:`Role`: swap it for its split class, keep it as it is, or run it
only on replicated tensors), how the planner prices it (:data:`CostKind`,
:mod:`sciml.spatial_parallel.planner.graph`), and how the README's "Which model
code works" names a swapped one (:func:`readme_list`, checked by the tests).

Adding a spatial layer is one new module in this folder (a subclass of the torch
layer and :class:`~sciml.spatial_parallel.layers.base.SpatialLayer` with
``from_module``) and one entry in :data:`LAYERS` (or a :func:`register` call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from sciml.spatial_parallel.layers.base import SpatialLayer
from sciml.spatial_parallel.layers.conv import SpatialConv3d
from sciml.spatial_parallel.layers.conv_transpose import SpatialConvTranspose3d
from sciml.spatial_parallel.layers.heads import (
    SpatialAdaptiveAvgPool3d,
    SpatialAdaptiveMaxPool3d,
    SpatialDropout,
    SpatialDropout3d,
    SpatialFlatten,
    SpatialLayerNorm,
    SpatialLinear,
    SpatialPReLU,
)
from sciml.spatial_parallel.layers.norm import (
    SpatialBatchNorm3d,
    SpatialGroupNorm,
    SpatialInstanceNorm3d,
)
from sciml.spatial_parallel.layers.pool import SpatialAvgPool3d, SpatialMaxPool3d
from sciml.spatial_parallel.layers.upsample import SpatialUpsample

#: What ``parallelize`` does with a layer: ``swap`` it for its split class; keep an
#: ``elementwise`` one (correct on any block); keep a ``functional`` one, whose torch
#: ops the split blocks compute as on the global tensor (``F.pad``, ``softmax``) or
#: refuse naming the op; keep a ``dense`` one, valid only on replicated tensors
#: (after global pooling or flatten), its gradients averaged over the spatial group.
Role = Literal["swap", "elementwise", "functional", "dense"]

#: How the planner prices a layer: as a convolution, transposed convolution, pooling
#: (their windows and FLOPs), a normalisation (statistics over the split volume), a
#: dense layer, or ``elementwise`` (one pass over its input and output).
CostKind = Literal[
    "Conv3d",
    "ConvTranspose3d",
    "MaxPool3d",
    "AvgPool3d",
    "BatchNorm3d",
    "GroupNorm",
    "InstanceNorm3d",
    "Linear",
    "elementwise",
]


@dataclass(frozen=True)
class LayerSpec:
    """How ``parallelize`` and the planner treat one torch layer type (and its subclasses).

    Attributes:
        module: The torch layer type.
        role: What ``parallelize`` does with it (:data:`Role`).
        cost: How the planner prices it (:data:`CostKind`).
        parallel: The split class of a swapped layer, built by its ``from_module``.
        overlap: Whether the split layer takes ``parallelize``'s ``overlap`` option
            (computes its interior while the halos travel).
        readme: How the README's list of swapped layers names it (default: its name).
    """

    module: type[nn.Module]
    role: Role
    cost: CostKind = "elementwise"
    parallel: type[SpatialLayer] | None = None
    overlap: bool = False
    readme: str | None = None

    def __post_init__(self) -> None:
        """Refuse a swapped layer without a split class of its type, or a kept one with one."""
        if (self.role == "swap") != (self.parallel is not None):
            raise ValueError(
                f"LayerSpec({self.module.__name__}): a split class is given for role "
                f"'swap' and only for it, got role {self.role!r} and {self.parallel}"
            )
        if self.parallel is not None and not issubclass(self.parallel, self.module):
            raise ValueError(
                f"LayerSpec({self.module.__name__}): the split class {self.parallel.__name__} "
                f"must subclass it (same parameters, same state_dict keys)"
            )

    @property
    def readme_name(self) -> str:
        """Its words in the README's list of swapped layers."""
        return self.readme or f"`{self.module.__name__}`"


def _swap(
    module: type[nn.Module],
    parallel: type[SpatialLayer],
    cost: CostKind = "elementwise",
    *,
    overlap: bool = False,
    readme: str | None = None,
) -> LayerSpec:
    return LayerSpec(module, "swap", cost, parallel, overlap, readme)


def _kept(role: Role, *modules: type[nn.Module]) -> list[LayerSpec]:
    return [LayerSpec(module, role) for module in modules]


_NORM_NOTE = "(affine, running statistics)"

#: Every layer ``parallelize`` knows, by torch type; swapped ones in the README's order.
LAYERS: dict[type[nn.Module], LayerSpec] = {
    spec.module: spec
    for spec in (
        _swap(nn.Conv3d, SpatialConv3d, "Conv3d", overlap=True),
        _swap(nn.ConvTranspose3d, SpatialConvTranspose3d, "ConvTranspose3d"),
        _swap(nn.MaxPool3d, SpatialMaxPool3d, "MaxPool3d", overlap=True),
        _swap(nn.AvgPool3d, SpatialAvgPool3d, "AvgPool3d", overlap=True),
        _swap(
            nn.AdaptiveAvgPool3d,
            SpatialAdaptiveAvgPool3d,
            readme="`AdaptiveAvgPool3d` (any output size; `F.adaptive_avg_pool3d` too)",
        ),
        _swap(
            nn.AdaptiveMaxPool3d,
            SpatialAdaptiveMaxPool3d,
            readme="`AdaptiveMaxPool3d` (any output size; `F.adaptive_max_pool3d` too)",
        ),
        _swap(nn.BatchNorm3d, SpatialBatchNorm3d, "BatchNorm3d"),
        _swap(nn.GroupNorm, SpatialGroupNorm, "GroupNorm"),
        _swap(
            nn.InstanceNorm3d,
            SpatialInstanceNorm3d,
            "InstanceNorm3d",
            readme=f"`InstanceNorm3d` {_NORM_NOTE}",
        ),
        _swap(nn.LayerNorm, SpatialLayerNorm, readme="`LayerNorm` over unsplit dims"),
        _swap(nn.PReLU, SpatialPReLU),
        _swap(
            nn.Linear,
            SpatialLinear,
            "Linear",
            readme="`Linear` (a dense head, or tokens and channels last: over an unsplit last dim)",
        ),
        _swap(nn.Upsample, SpatialUpsample),
        _swap(nn.Flatten, SpatialFlatten),
        _swap(nn.Dropout, SpatialDropout),
        _swap(nn.Dropout3d, SpatialDropout3d),
        *_kept(
            "elementwise",
            *(nn.Identity, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU),
            *(nn.SiLU, nn.Mish, nn.Sigmoid, nn.Tanh, nn.Softplus, nn.Softsign, nn.Hardtanh),
            *(nn.Hardswish, nn.Hardsigmoid, nn.LogSigmoid, nn.Tanhshrink),
        ),
        *_kept(
            "functional",
            *(nn.ConstantPad3d, nn.ZeroPad3d, nn.ReplicationPad3d, nn.ReflectionPad3d),
            *(nn.CircularPad3d, nn.Softmax, nn.LogSoftmax, nn.Softmin),
        ),
        LayerSpec(nn.Bilinear, "dense"),
    )
}

#: Containers: no computation of their own (an empty one included).
CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)

#: Methods a subclass of a supported layer may override: they build the layer and
#: print it, but take no part in its computation, which the split layer replaces.
SUBCLASS_MAY_OVERRIDE = frozenset({"__init__", "reset_parameters", "extra_repr", "__repr__"})


def register(spec: LayerSpec) -> None:
    """Add ``spec`` to :data:`LAYERS` (its torch type must be new to the table).

    Raises:
        ValueError: If the table already has an entry for ``spec.module``.
    """
    if spec.module in LAYERS:
        raise ValueError(f"the layer table already has {spec.module.__name__}")
    LAYERS[spec.module] = spec


def unregister(module: type[nn.Module]) -> None:
    """Remove the entry of ``module`` from :data:`LAYERS`."""
    del LAYERS[module]


def names(role: Role) -> list[str]:
    """The sorted names of the layer types of ``role`` (for messages)."""
    return sorted(spec.module.__name__ for spec in LAYERS.values() if spec.role == role)


def readme_list() -> str:
    """The README's list of swapped layers: ``"`Conv3d`, `ConvTranspose3d`, ..."``."""
    return ", ".join(spec.readme_name for spec in LAYERS.values() if spec.role == "swap")


def supported_spec(module: nn.Module, name: str) -> LayerSpec | None:
    """The entry of the layer of :data:`LAYERS` that ``module`` is (or subclasses), if any.

    Raises:
        ValueError: If ``module`` is lazy, or subclasses a supported layer and
            overrides part of its computation.
    """
    kind = type(module)
    if isinstance(module, LazyModuleMixin):
        raise ValueError(
            f"parallelize: layer '{name}' ({kind.__name__}) cannot be split in space while its "
            f"parameters are uninitialised; run one forward pass on one device first"
        )
    base = next((cls for cls in kind.__mro__ if cls in LAYERS), None)
    if base is None or base is kind:
        return None if base is None else LAYERS[base]
    for cls in kind.__mro__[: kind.__mro__.index(base)]:
        for attr, value in vars(cls).items():
            if attr in SUBCLASS_MAY_OVERRIDE or not callable(getattr(base, attr, None)):
                continue
            if not callable(value) and not isinstance(value, staticmethod | classmethod):
                continue
            why = (
                "its forward is not the one the split layer replaces"
                if attr == "forward"
                else f"the split layer replaces {base.__name__}'s computation and would not call it"
            )
            raise ValueError(
                f"parallelize: layer '{name}' ({kind.__name__}) subclasses {base.__name__} but "
                f"overrides {cls.__name__}.{attr}, so it cannot be split in space: {why}"
            )
    return LAYERS[base]
