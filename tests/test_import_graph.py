"""tools/import_graph.py on a small package whose graph is known by construction."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).resolve().parents[1] / "tools" / "import_graph.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_rooms_layers_arrows_and_cycles(tmp_path: Path) -> None:
    tool = _tool()
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "base.py": "import os\n",
            "mid.py": "from . import base\n",
            "sub/__init__.py": "from .a import thing\n",
            "sub/a.py": "from pkg.mid import x\nthing = 1\n",
            # a function-local import still ties the two modules together
            "sub/b.py": "def f():\n    from ..top import y\n",
            "top.py": "from .sub import b\nfrom .sub.a import thing\n",
        },
    )
    figures = tool.summary(tool.read_graph(package))
    assert figures["modules"] == 7
    # rooms: pkg, pkg.base, pkg.mid, pkg.top (root modules), pkg.sub (folder)
    assert figures["rooms"] == 5
    assert set(map(tuple, figures["arrows"])) == {
        ("pkg.mid", "pkg.base"),
        ("pkg.sub", "pkg.mid"),
        ("pkg.sub", "pkg.top"),
        ("pkg.top", "pkg.sub"),
    }
    assert figures["module_cycles"] == [["pkg.sub.b", "pkg.top"]]
    assert figures["room_cycles"] == [["pkg.sub", "pkg.top"]]
    assert figures["room_layers"] == {
        "pkg": 0,
        "pkg.base": 0,
        "pkg.mid": 1,
        "pkg.sub": 2,
        "pkg.top": 2,
    }
    assert figures["layers"] == 3


def test_the_command_fails_on_a_module_cycle(tmp_path: Path) -> None:
    tool = _tool()
    package = _package(
        tmp_path, {"__init__.py": "", "a.py": "from . import b\n", "b.py": "import pkg.a\n"}
    )
    assert tool.main([str(package)]) == 1
    (package / "b.py").write_text("")
    assert tool.main([str(package), "--json", str(tmp_path / "graph.json")]) == 0
    assert (tmp_path / "graph.json").is_file()
