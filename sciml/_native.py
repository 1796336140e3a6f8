"""Load pyproj so that a PROJ another wheel made global cannot take its calls (issue 40).

``xr.open_dataset(path)`` without ``engine=`` imports every xarray backend to guess one,
cfgrib's among them. ecCodes' wheels load eckit's libraries through ``findlibs`` with
``RTLD_GLOBAL``, and eckitlib >= 2.3 bundles a PROJ of its own (9.8 beside pyproj's
9.5) that ``libeckit_geo`` links: from then on it sits in the process's global symbol
scope, which the dynamic linker searches before a library's own dependencies. pyproj
loaded after that binds its ``proj_*`` calls, and those of its own libproj, to eckit's
copy while reading its own proj.db: "no database context specified", then "double free
or corruption" at exit (rasterio's and pyogrio's GDAL keep their PROJ's symbols private,
so only pyproj is exposed). pyproj loaded before eckit is bound already and unharmed.

The dependency pins (pyproject.toml: ``eckitlib<2.3``) keep the global PROJ out of
this project's environments, whatever order a script imports in; :func:`load_pyproj`
covers the environments that resolved ecCodes without them: when ``sciml`` is imported
after such a PROJ became global, pyproj is loaded with ``RTLD_DEEPBIND``, so that it
and its libproj look up their own symbols before the global ones.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import os
import sys
from pathlib import Path

#: A symbol every PROJ exports without a prefix (rasterio's carries ``internal_``).
_PROJ_SYMBOL = "proj_context_create"


def foreign_proj_loaded() -> bool:
    """Whether a PROJ library is in the process's global symbol scope (none normally is)."""
    try:
        return hasattr(ctypes.CDLL(None), _PROJ_SYMBOL)
    except OSError:  # pragma: no cover - a platform without dlopen(NULL)
        return False


def load_pyproj() -> None:
    """Import pyproj (all its extension modules) bound to its own libproj.

    Does nothing where pyproj is imported already (too late to change its binding) or
    is not installed. Where no other PROJ is global, a plain import: Python loads
    extensions with ``RTLD_NOW``, so pyproj stays bound to its own PROJ when eckit's
    arrives later. ``RTLD_DEEPBIND`` is kept to the other case, since a library loaded
    with it also prefers libc's ``malloc`` to an ``LD_PRELOAD`` one (jemalloc, sanitizers).
    """
    if "pyproj" in sys.modules or importlib.util.find_spec("pyproj") is None:
        return
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    if not deepbind or not foreign_proj_loaded():
        with contextlib.suppress(ImportError):  # a broken install fails where it is used
            importlib.import_module("pyproj")
        return
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | deepbind)
    try:
        with contextlib.suppress(ImportError):
            package = importlib.import_module("pyproj")
            # pyproj imports all of them today; one imported lazily later would bind
            # to the global PROJ, so each is loaded now, under the same flags.
            for extension in sorted(Path(str(package.__file__)).parent.glob("*.so")):
                importlib.import_module(f"pyproj.{extension.name.split('.')[0]}")
    finally:
        sys.setdlopenflags(flags)
