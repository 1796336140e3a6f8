"""Each notebook and README block runs with the runtime plus the extra it names, and no more.

A notebook runs in an environment of the runtime dependencies plus the ``notebooks``
extra; a README ``python`` block in the runtime environment (``make demo``'s), or in one
with the extras its comment names as ``pip install "sciml-workflows[EXTRA]"``. The quick
check below reads every import a notebook's code cells and a block make (``import``,
``from ... import``, ``__import__("...")``), maps each top-level module to the
distribution that installs it (``importlib.metadata.packages_distributions()``) and asks
that distribution to be among those the allowed requirements pull in: pyproject's
``dependencies`` and the named extras, then the ``Requires-Dist`` of each installed
distribution reached, markers evaluated, a dependency's extras followed only where a
requirement names them. Standard-library modules pass, and so do the local modules, listed
here: ``sciml`` itself and the notebooks' helpers (a module a ``%%writefile`` cell writes,
the ``benchmarks/`` scripts a notebook imports or runs, whose imports are checked in turn).

The system test builds such an environment from nothing (a venv, ``pip install -c
constraints.txt -e ".[notebooks]"``) and runs every notebook in it in quick mode: no
error, no output on stderr (a warning counts), every figure shown.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.test_readme import README, readme_blocks

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BENCHMARKS = ROOT / "benchmarks"
#: Imported by name, installed by no distribution: the package itself.
LOCAL = {"sciml"}
#: The helper modules each notebook uses, found by :func:`notebook_imports`.
HELPERS = {
    "01_spatial_parallel.ipynb": {
        "mean_head",  # a %%writefile cell writes it
        "spatial_plan_projection",  # benchmarks/, imported
        "spatial_efficiency",  # benchmarks/, run
        "_report",  # benchmarks/, imported by both
        "_spatial_workloads",
    },
}
#: What a README block's comment names: pip install "sciml-workflows[models]".
_NAMES_EXTRA = re.compile(r"""pip install ["']?sciml-workflows\[([\w,-]+)\]""")
_WRITEFILE = re.compile(r"^%%writefile\s+(?:-a\s+)?\S*?(\w+)\.py\s*$")
_BENCHMARK_FILE = re.compile(r"\.\./benchmarks/(\w+)\.py")


def project(text: str | None = None) -> tuple[list[str], dict[str, list[str]]]:
    """The runtime requirements and the extras of pyproject.toml (or of ``text``)."""
    data = tomllib.loads(text if text is not None else (ROOT / "pyproject.toml").read_text())
    return data["project"]["dependencies"], data["project"]["optional-dependencies"]


def _imports(source: str) -> set[str]:
    """The top-level modules ``source`` imports (absolute imports only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(str(node.args[0].value).split(".")[0])
    return found


def _benchmark_imports(name: str, helpers: set[str]) -> set[str]:
    """The imports of ``benchmarks/NAME.py`` and of the benchmark modules it imports."""
    helpers.add(name)
    found: set[str] = set()
    for module in _imports((BENCHMARKS / f"{name}.py").read_text()):
        if (BENCHMARKS / f"{module}.py").exists():
            if module not in helpers:
                found |= _benchmark_imports(module, helpers)
        else:
            found.add(module)
    return found


def notebook_imports(path: Path) -> tuple[set[str], set[str]]:
    """The modules a notebook's code imports, and the local helper modules it uses.

    IPython's line magics and shell lines are left out; a ``%%writefile`` cell's body is
    read as the module it writes. Benchmark scripts (imported after the notebook puts
    ``../benchmarks`` on ``sys.path``, or run as ``../benchmarks/NAME.py``) count as
    helpers, with their own imports.
    """
    cells = [
        "".join(cell["source"])
        for cell in json.loads(path.read_text())["cells"]
        if cell["cell_type"] == "code"
    ]
    found: set[str] = set()
    helpers: set[str] = set()
    for cell in cells:
        lines = cell.splitlines()
        if lines and lines[0].startswith("%%"):
            written = _WRITEFILE.match(lines[0])
            assert written, f"{path.name}: a cell magic this check cannot read: {lines[0]}"
            helpers.add(written[1])
            lines = lines[1:]
        code = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
        found |= _imports(code)
        for script in _BENCHMARK_FILE.findall(cell):
            found |= _benchmark_imports(script, helpers)
    for module in sorted(found):
        if module not in helpers and (BENCHMARKS / f"{module}.py").exists():
            found |= _benchmark_imports(module, helpers)
    return found - helpers, helpers


def _closure(requirements: list[str]) -> tuple[set[str], set[str]]:
    """The distributions ``requirements`` install here, and the required ones not installed.

    Each installed distribution's ``Requires-Dist`` is followed with its markers evaluated
    for this interpreter and the extras its requirer named (none otherwise).
    """
    reached: set[str] = set()
    missing: set[str] = set()
    todo = [Requirement(text) for text in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        reached.add(name)
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            missing.add(name)
            continue
        for text in requires:
            child = Requirement(text)
            if child.marker is None or any(
                child.marker.evaluate({"extra": extra})
                for extra in ("", *sorted(requirement.extras))
            ):
                todo.append(child)
    return reached, missing


@cache
def _distributions_of() -> dict[str, list[str]]:
    return {
        module: [canonicalize_name(dist) for dist in dists]
        for module, dists in importlib.metadata.packages_distributions().items()
    }


def unprovided(
    modules: set[str], extras: list[str], pyproject: str | None = None
) -> tuple[list[str], list[str]]:
    """The modules that the runtime plus ``extras`` do not install, and those not known here.

    Returns:
        ``MODULE (DIST)`` for each module whose distribution is installed here but not
        required, and the modules no installed distribution provides (so not checked).
    """
    runtime, optional = project(pyproject)
    requirements = list(runtime)
    for extra in extras:
        assert extra in optional, f"no extra {extra!r} in pyproject.toml"
        requirements += optional[extra]
    reached, _ = _closure(requirements)
    wrong, unknown = [], []
    for module in sorted(modules - LOCAL - set(sys.stdlib_module_names)):
        dists = _distributions_of().get(module)
        if not dists:
            unknown.append(module)
        elif not reached & set(dists):
            wrong.append(f"{module} ({', '.join(dists)})")
    return wrong, unknown


def _check(modules: set[str], extras: list[str], where: str) -> None:
    wrong, unknown = unprovided(modules, extras, None)
    named = "the runtime" + "".join(f" + [{extra}]" for extra in extras)
    assert not wrong, f"{where} imports what {named} does not install: {wrong}"
    if unknown:  # make test's venv lacks the notebooks extra; make system-test's has it
        pytest.skip(f"{where}: {unknown} installed by no distribution here, not checked")


#: Where the README's blocks are: README.md, and the user guide it links to.
DOCUMENTS = [README, *sorted((ROOT / "docs" / "guide").glob("*.md"))]


def _python_blocks() -> list:
    return [
        pytest.param(block, id=f"{path.relative_to(ROOT)}:{block.line}")
        for path in DOCUMENTS
        for block in readme_blocks(path.read_text())
        if block.language == "python"
    ]


def block_extras(code: str) -> list[str]:
    """The extras a README block's comments name (``pip install "sciml-workflows[a,b]"``)."""
    return [
        extra
        for line in code.splitlines()
        if line.lstrip().startswith("#")
        for match in _NAMES_EXTRA.finditer(line)
        for extra in match[1].split(",")
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_imports_come_with_the_notebooks_extra(path: Path) -> None:
    modules, helpers = notebook_imports(path)
    assert helpers == HELPERS.get(path.name, set())
    _check(modules, ["notebooks"], path.name)


@pytest.mark.parametrize("block", _python_blocks())
def test_readme_block_imports_come_with_the_extras_it_names(block) -> None:  # noqa: ANN001
    _check(_imports(block.code), block_extras(block.code), f"the block at line {block.line}")


def test_progress_bars_have_their_widgets() -> None:
    """tqdm.auto draws a notebook's bars with ipywidgets; without it, a TqdmWarning on stderr."""
    _, optional = project()
    assert "ipywidgets" in {canonicalize_name(Requirement(r).name) for r in optional["notebooks"]}


def test_the_check_finds_what_an_extra_lacks() -> None:
    """pyproject.toml before issue 44: osmium (notebook 04) only in dev, MONAI in no extra."""
    before = (
        '[project]\ndependencies = ["numpy>=1.26", "dask[distributed]>=2024.1"]\n'
        '[project.optional-dependencies]\ndev = ["osmium>=3.7", "monai>=1.4"]\n'
        'notebooks = ["nbclient>=0.9"]\n'
    )
    wrong, _ = unprovided(
        {"osmium", "numpy", "json", "sciml", "distributed"}, ["notebooks"], before
    )
    assert wrong == ["osmium (osmium)"]
    wrong, _ = unprovided({"monai", "torch"}, [], before)
    assert wrong == ["monai (monai)", "torch (torch)"]
    assert unprovided({"monai"}, ["dev"], before)[0] == []
    assert block_extras('# x\n# pip install "sciml-workflows[models,cluster]"\nimport a\n') == [
        "models",
        "cluster",
    ]
    assert _imports('import a.b, c\nfrom d.e import f\nfrom . import g\n__import__("h")') == {
        "a",
        "c",
        "d",
        "h",
    }


# The system test: a venv of the runtime plus [notebooks] only, built from the registries.

_BUILD_TIMEOUT = 1800  # pip from nothing: minutes with the registries' wheels cached
_RUN_TIMEOUT = 1800


@pytest.fixture(scope="module")
def notebooks_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the package, its runtime dependencies and ``[notebooks]``, no more."""
    venv = tmp_path_factory.mktemp("notebooks-venv") / "venv"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--progress-bar", "off"]
        + ["-c", str(ROOT / "constraints.txt"), "-e", f"{ROOT}[notebooks]"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=_BUILD_TIMEOUT,
    )
    assert install.returncode == 0, install.stdout[-4000:]
    print(f"notebooks venv built in {time.perf_counter() - start:.0f} s")
    return python


@pytest.mark.system
@pytest.mark.xdist_group("notebooks_venv")
@pytest.mark.timeout(_BUILD_TIMEOUT + _RUN_TIMEOUT)
def test_notebooks_run_in_a_fresh_notebooks_venv(notebooks_venv: Path) -> None:
    python = notebooks_venv
    # the venv alone: neither the test venv's packages nor its tools
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "PYTHON", "VIRTUAL_ENV", "MPLBACKEND", "JUPYTER"))
    }
    env |= {"SCIML_QUICK": "1", "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}"}
    done = subprocess.run(
        [str(python), str(ROOT / "tests" / "scripts" / "run_notebook.py")]
        + [str(path) for path in NOTEBOOKS],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=_RUN_TIMEOUT,
    )
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    print("\n".join(f"{r['notebook']}: {r['seconds']} s" for r in results))
    assert [r["notebook"] for r in results] == [p.name for p in NOTEBOOKS], done.stderr[-4000:]
    problems = {
        r["notebook"]: {key: r[key] for key in ("errors", "stderr", "unshown") if r[key]}
        for r in results
    }
    assert {name: found for name, found in problems.items() if found} == {}
    assert {r["kernel"] for r in results} == {str(python)}  # the venv's own kernel
    assert done.returncode == 0, done.stderr[-4000:]
