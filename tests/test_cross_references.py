"""Every cross-reference in the package's docstrings names something that exists.

A docstring's ``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:attr:``, ``:data:``,
``:exc:`` and ``:obj:`` roles are resolved as Sphinx resolves them: a dotted path
imported and walked attribute by attribute, or a name looked up from the docstring's own
class and module (a leading ``.`` or ``~`` changes only how the link is shown). A module
moved or renamed without its references fails here, not in a reader's browser.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sciml"
ROLE = re.compile(r":(?:py:)?(mod|func|class|meth|attr|data|exc|obj):`([^`]+)`")


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] != "__main__":  # runs the command line when imported
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _docstrings(tree: ast.Module) -> Iterator[tuple[list[str], str, int]]:
    """Each docstring with the names of the classes around it and its line."""

    def walk(node: ast.AST, scope: list[str]) -> Iterator[tuple[list[str], str, int]]:
        body = getattr(node, "body", [])
        for child in ast.iter_child_nodes(node):
            if ast.get_docstring(node, clean=False) and body and child is body[0]:
                continue  # the docstring of node, yielded with it
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                inner = [*scope, child.name] if isinstance(child, ast.ClassDef) else scope
                text = ast.get_docstring(child, clean=False)
                if text:
                    yield inner, text, child.lineno
                yield from walk(child, inner)
            elif isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant):
                value = child.value.value
                if isinstance(value, str):  # attribute docstrings
                    yield scope, value, child.lineno

    text = ast.get_docstring(tree, clean=False)
    if text:
        yield [], text, 1
    yield from walk(tree, [])


def _walk(start: Any, names: list[str]) -> bool:
    value = start
    for name in names:
        if not hasattr(value, name):
            annotations = getattr(value, "__annotations__", {})
            fields = getattr(value, "__dataclass_fields__", {})
            return names[-1] == name and (name in annotations or name in fields)
        value = getattr(value, name)
    return True


def _importable(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _walk(module, parts[cut:])
    return False


def _instance_attribute(module: ModuleType, scope: list[str], name: str) -> bool:
    """Whether the class ``scope`` of ``module`` sets ``self.<name>`` (as ``__init__`` does)."""
    if not scope or not _walk(module, scope):
        return False
    owner: Any = module
    for part in scope:
        owner = getattr(owner, part)
    try:
        source = inspect.getsource(owner)
    except (OSError, TypeError):
        return False
    return re.search(rf"self\.{re.escape(name)}\b[^=\n]*=", source) is not None


def _resolves(target: str, module: ModuleType, scope: list[str]) -> bool:
    target = target.lstrip("~!.")
    if "<" in target:  # "title <target>"
        target = target[target.index("<") + 1 : target.rindex(">")].lstrip("~!.")
    target = target.removesuffix("()")
    names = target.split(".")
    for depth in range(len(scope), -1, -1):  # the class, the classes around it, the module
        owner: Any = module
        if not _walk(owner, scope[:depth]):
            continue
        for name in scope[:depth]:
            owner = getattr(owner, name)
        if _walk(owner, names):
            return True
    if len(names) <= 2 and _instance_attribute(module, [*scope, *names[:-1]], names[-1]):
        return True
    parts = module.__name__.split(".")  # the module, then the packages around it
    return _importable(target) or any(
        _importable(".".join([*parts[:cut], target])) for cut in range(len(parts), 0, -1)
    )


@pytest.mark.parametrize("name", _modules())
def test_every_cross_reference_resolves(name: str) -> None:
    module = importlib.import_module(name)
    path = Path(module.__file__ or "")
    broken = []
    for scope, text, line in _docstrings(ast.parse(path.read_text())):
        for role, target in ROLE.findall(text):
            if not _resolves(target, module, scope):
                broken.append(f"{path.relative_to(ROOT)}:{line}: :{role}:`{target}`")
    assert not broken, "references to nothing:\n" + "\n".join(broken)
