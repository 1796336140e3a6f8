"""Packages whose public names are imported from their modules on first use.

A package whose ``__init__`` imports its public names eagerly makes every
import of one of its submodules (a command line's parser, a constants module)
pay for all of them, torch included. A package that ends its ``__init__``
with ``make_lazy(__name__, _HOMES)`` keeps the same public names, imported on
first use instead.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Mapping
from typing import Any

__all__ = ["LazyPackage", "make_lazy"]


class LazyPackage(types.ModuleType):
    """A package module whose ``_HOMES`` (public name -> submodule) are read on first use."""

    _HOMES: Mapping[str, str]

    def __getattr__(self, name: str) -> Any:
        """Import the public ``name`` from its submodule and keep it."""
        homes = self.__dict__["_HOMES"]
        if name not in homes:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{self.__name__}.{homes[name]}"), name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: object) -> None:
        """Set ``name``, except a submodule over the public name it shares.

        Importing a submodule binds it on its package; where a public name is
        also a submodule's name (``parallelize`` in ``parallelize.py``) the
        public name keeps meaning the function, as with eager imports.
        """
        if isinstance(value, types.ModuleType) and name in self.__dict__["_HOMES"]:
            return
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        """The module's names, the public ones not yet imported included."""
        return sorted({*self.__dict__, *self.__dict__["_HOMES"]})


def make_lazy(package: str, homes: Mapping[str, str]) -> None:
    """Make the package ``package`` import each public name from its module on first use.

    Args:
        package: The package's ``__name__`` (already in ``sys.modules``).
        homes: Each public name and the submodule (relative to ``package``) that defines it.
    """
    module = sys.modules[package]
    module._HOMES = homes  # type: ignore[attr-defined]
    module.__class__ = LazyPackage
