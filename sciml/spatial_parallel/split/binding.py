"""Torch's own binding of a call's arguments: the aten overload it reaches, argument by name.

Torch functions and methods accept many call forms (``x.std(2, False, True)``,
``torch.std(x, dim=2, correction=0, keepdim=True)``, ``x.std(False)``), and
their Python argument parser picks the overload. Reading those arguments by
hand repeats that parser and gets it wrong at the edges; :func:`bind` asks
torch instead: it runs the call on ``meta`` stand-ins of the same global
shapes and dtypes under a dispatch mode that stops at the first aten op, then
names the op's arguments by its schema (defaults filled in). The stand-ins
are then run through the op outside the mode, so invalid arguments raise
torch's own error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sciml.spatial_parallel.split.tensor import SplitTensor, map_tensors

__all__ = ["Bound", "bind", "schema_arguments"]


@dataclass(frozen=True)
class Bound:
    """A call bound as torch binds it.

    Attributes:
        op: The aten overload the call reaches (e.g. ``aten.std.correction``).
        arguments: Every argument of its schema by name (``self`` is ``input``),
            defaults filled in, holding the call's own tensors.
    """

    op: torch._ops.OpOverload
    arguments: dict[str, Any]

    @property
    def name(self) -> str:
        """The op's aten name without overload (``"std"``, ``"linalg_vector_norm"``)."""
        return self.op._schema.name.split("::")[-1]


class _Reached(Exception):
    """The first aten op of a call, with its arguments (raised to stop the call there)."""


class _FirstOp(TorchDispatchMode):
    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        raise _Reached(func, args, kwargs or {})


def _stand_in(t: torch.Tensor, originals: dict[int, Any]) -> torch.Tensor:
    shape = t._gshape if isinstance(t, SplitTensor) else tuple(t.shape)
    meta = torch.empty(shape, dtype=t.dtype, device="meta")
    originals[id(meta)] = t
    return meta


def bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Bound:
    """The aten overload ``func(*args, **kwargs)`` reaches and its arguments by name.

    Raises:
        Whatever torch raises for these arguments (the call's own error).
        TypeError: If the call reaches no aten op.
    """
    originals: dict[int, Any] = {}
    meta_args = map_tensors(args, lambda t: _stand_in(t, originals))
    meta_values = map_tensors(tuple(kwargs.values()), lambda t: _stand_in(t, originals))
    meta_kwargs = dict(zip(kwargs, meta_values, strict=True))
    try:
        with _FirstOp():
            func(*meta_args, **meta_kwargs)
    except _Reached as reached:
        op, op_args, op_kwargs = reached.args
    else:
        raise TypeError(f"{func} reaches no aten op; its arguments cannot be bound")
    op(*op_args, **op_kwargs)  # torch's own checks of the arguments (dims in range, dtypes)
    arguments: dict[str, Any] = {}
    for name, value in schema_arguments(op, op_args, op_kwargs).items():
        if isinstance(value, torch.Tensor):
            value = originals.get(id(value), value)
        arguments["input" if name == "self" else name] = value
    return Bound(op, arguments)


def schema_arguments(
    op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """``args`` and ``kwargs`` named by ``op``'s schema, its defaults filled in.

    Also for a Python function whose parameters are those of an aten op
    (``F.scaled_dot_product_attention`` and ``aten.scaled_dot_product_attention``).

    Raises:
        TypeError: For a keyword the schema does not have.
    """
    names = [argument.name for argument in op._schema.arguments]
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise TypeError(f"{op} has no argument {unknown[0]!r}")
    arguments: dict[str, Any] = {}
    for i, argument in enumerate(op._schema.arguments):
        if i < len(args):
            arguments[argument.name] = args[i]
        elif argument.name in kwargs:
            arguments[argument.name] = kwargs[argument.name]
        else:
            default = argument.default_value if argument.has_default_value() else None
            arguments[argument.name] = default
    return arguments
