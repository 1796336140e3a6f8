"""Torch ops by name: how each is spelled, which kind of op it is, and the refusal naming one.

:func:`aten_name` gives the one name of a torch function, method, property or
Python operator that the op tables of :mod:`.dispatch` classify; the sets here
name the kinds that torch's own tags do not give. :func:`refuse` builds the
:class:`SplitOpError` that names an op, the split dims and the calling line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import torch

import sciml
from sciml.spatial_parallel.partition import DIM_NAMES

#: ``(tensor dim, mesh spatial axis)`` pairs of a block's split dims (``tensor.Split``).
SplitDims = Sequence[tuple[int, int]]


_SKIP_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(sciml.__file__))


class SplitOpError(ValueError):
    """A torch op reached a split block and cannot be computed as on the global tensor."""


def user_line() -> str:
    """``file:line`` of the innermost calling frame outside torch and sciml."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_SKIP_DIRS):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


#: Spellings of Python operators and reflected operators, by aten name.
ALIASES = {
    "truediv": "div",
    "rtruediv": "div",
    "itruediv": "div",
    "floordiv": "floor_divide",
    "rfloordiv": "floor_divide",
    "ifloordiv": "floor_divide",
    "radd": "add",
    "iadd": "add",
    "rmul": "mul",
    "imul": "mul",
    "isub": "sub",
    "rpow": "pow",
    "ipow": "pow",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "rand": "bitwise_and",
    "ror": "bitwise_or",
    "rxor": "bitwise_xor",
    "invert": "bitwise_not",
    "mod": "remainder",
    "rmod": "remainder",
    "imod": "remainder",
    "iand": "bitwise_and",
    "ior": "bitwise_or",
    "ixor": "bitwise_xor",
    "rmatmul": "matmul",
    "imatmul": "matmul",
}


def aten_name(func: Any) -> str:
    """The aten name of a torch function, method, property or Python operator."""
    if getattr(func, "__name__", "") == "__get__" and getattr(func, "__self__", None) is not None:
        return str(func.__self__.__name__)
    name = str(getattr(func, "__name__", ""))
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        return ALIASES.get(name, name)
    return name


def op_name(func: Any) -> str:
    """A readable name of a torch function, method or property."""
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", "") == "__get__" and owner is not None:
        return f"Tensor.{owner.__name__}"
    name = getattr(func, "__name__", repr(func))
    module = getattr(func, "__module__", None) or ""
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"F.{name}"
    if str(getattr(func, "__qualname__", "")).startswith(("TensorBase.", "Tensor.")):
        return f"Tensor.{name}"
    return f"torch.{name}"


def split_names(split: SplitDims) -> str:
    """``'depth (dim 2), width (dim 4)'`` for the split dims ``split``."""
    return ", ".join(f"{DIM_NAMES[axis]} (dim {dim})" for dim, axis in split)


def refuse(func: Any, split: SplitDims, why: str) -> SplitOpError:
    """The error for ``func`` on a block split as ``split``, naming the calling line."""
    return SplitOpError(
        f"spatial_parallel: {op_name(func)} at {user_line()} on a block split along "
        f"{split_names(split)}: {why}"
    )


def writes_in_place(func: Any, kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` writes into its first argument (``add_``, ``+=``, ``inplace=True``).

    ``torch.nn.functional`` passes ``inplace`` on to ``__torch_function__`` by keyword.
    """
    if kwargs.get("inplace") is True:
        return True
    name = str(getattr(func, "__name__", ""))
    if name.startswith("__"):
        return name.startswith("__i") and name != "__invert__"
    return name.endswith("_")


def dropout_draws(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a dropout call draws a mask: ``p > 0`` in training.

    ``F.dropout(input, p, training)`` and ``torch.dropout(input, p, train)`` alike (at
    ``p=0`` torch returns the input before any aten op, so the schema cannot bind it).
    """
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    training = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train", True))
    return bool(training) and p != 0


#: Methods and properties whose result is not a tensor and does not depend on the split.
PASSTHROUGH = frozenset(
    {
        "dim",
        "ndimension",
        "ndim",
        "dtype",
        "device",
        "layout",
        "requires_grad",
        "grad",
        "grad_fn",
        "is_leaf",
        "is_cuda",
        "is_cpu",
        "is_meta",
        "is_sparse",
        "is_quantized",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "element_size",
        "data_ptr",
        "get_device",
        "stride",
        "storage_offset",
        "register_hook",
        "retain_grad",
        "retains_grad",
        "backward",
        "_version",
        "_base",
        "_is_view",
        "is_pinned",
        "names",
        "output_nr",
        "__hash__",
        "_backward_hooks",
        "__dict__",
        "name",
        "is_nested",
        "itemsize",
        "nbytes",
        "has_names",
        "is_mkldnn",
        "is_xla",
        "is_mps",
        "is_inference",
        "untyped_storage",
        "_typed_storage",
        "storage",
        "is_neg",
        "is_conj",
        "_is_zerotensor",
    }
)


#: Ops whose result is laid out as their first argument (other tensor arguments are options).
SAME_LAYOUT = frozenset(
    {
        "detach",
        "detach_",
        "clone",
        "contiguous",
        "to",
        "float",
        "double",
        "half",
        "bfloat16",
        "long",
        "int",
        "short",
        "char",
        "byte",
        "bool",
        "cfloat",
        "cdouble",
        "type",
        "type_as",
        "cpu",
        "cuda",
        "requires_grad_",
        "_to_copy",
        "zero_",
        "fill_",
        "zeros_like",
        "ones_like",
        "empty_like",
        "full_like",
        "prelu",
        "data",
        "real",
        "imag",
        "conj",
        "resolve_conj",
        "resolve_neg",
        "align_to",
    }
)


#: Pointwise ops torch does not tag as such.
POINTWISE = frozenset(
    {
        "hardswish",
        "relu6",
        "log_sigmoid",
        "floor_divide",
        "copy_",
        "rrelu",
        "softshrink",
        "hardshrink",
        "tanhshrink",
        "softsign",
        "threshold_",
        "relu_",
        "elu_",
        "leaky_relu_",
        "clamp_",
        "logical_and",
        "logical_or",
        "logical_xor",
        "bitwise_not",
        "mul_",
        "add_",
    }
)


#: Ops that draw random numbers: each rank would draw its own values.
RANDOM = frozenset(
    {
        "rand_like",
        "randn_like",
        "randint_like",
        "bernoulli",
        "bernoulli_",
        "normal_",
        "uniform_",
        "exponential_",
        "random_",
        "multinomial",
        "rrelu_",
        "cauchy_",
        "log_normal_",
        "geometric_",
    }
)


DROPOUT = frozenset(
    {
        "dropout",
        "dropout_",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "feature_dropout",
    }
)
