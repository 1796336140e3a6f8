"""sciml.geo's public names: each from its module, imported on first use."""

import importlib
import subprocess
import sys

import pytest

import sciml.geo


def test_the_public_names_are_those_with_a_home() -> None:
    assert sorted(sciml.geo.__all__) == sorted(sciml.geo._HOMES)


@pytest.mark.parametrize("name", sciml.geo.__all__)
def test_each_public_name_is_its_modules_object(name: str) -> None:
    home = importlib.import_module(f"sciml.geo.{sciml.geo._HOMES[name]}")
    assert getattr(sciml.geo, name) is getattr(home, name)
    assert name in dir(sciml.geo)


def test_the_package_and_the_command_line_import_no_geospatial_stack() -> None:
    # `sciml` registers sciml.geo.cli for every command; geopandas and rasterio cost
    # 1.4 s of CPU per call, and only a geo function needs them
    code = (
        "import sys, sciml.geo, sciml.geo.cli\n"
        "print(sorted(m for m in ('geopandas', 'rasterio', 'shapely') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    with pytest.raises(AttributeError, match="no attribute 'road_masks'"):
        sciml.geo.road_masks  # noqa: B018 - the attribute access is the test
