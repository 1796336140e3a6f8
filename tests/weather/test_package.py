"""The sciml.weather package as a whole: the shape of its public functions."""

import importlib
import inspect
import pkgutil

import pytest

import sciml.weather

MODULES = sorted(
    info.name.removeprefix("sciml.weather.")
    for info in pkgutil.walk_packages(sciml.weather.__path__, "sciml.weather.")
    if not info.ispkg
)


@pytest.mark.parametrize("name", MODULES)
def test_options_are_keyword_only(name: str) -> None:
    """Every parameter with a default of a public function can only be given by keyword."""
    module = importlib.import_module(f"sciml.weather.{name}")
    positional = []
    for attr, func in vars(module).items():
        if (
            attr.startswith("_")
            or not inspect.isfunction(func)
            or func.__module__ != module.__name__
        ):
            continue
        for param in inspect.signature(func).parameters.values():
            kind_ok = param.kind in (param.KEYWORD_ONLY, param.VAR_KEYWORD, param.VAR_POSITIONAL)
            if param.default is not param.empty and not kind_ok:
                positional.append(f"{attr}({param.name})")
    assert positional == []
