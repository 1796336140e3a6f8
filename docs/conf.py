"""Sphinx configuration of the documentation site (``make docs`` -> docs/_build/html).

The site is made of the README (its introduction and the two commands), the user
guide (``docs/guide/``), the design notes (``docs/*.md``), the notebooks of
``notebooks/`` (through the ``docs/notebooks`` link) executed at build time in quick
mode, the API reference written here at build time from the packages' ``__all__``
(``docs/api/``, not in git) and the demo's report (``docs/demo/``, not in git).
Warnings fail the build (``make docs`` runs ``sphinx-build -W --keep-going``), and so
does a cell that raises or writes to stderr.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

from docutils import nodes
from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

# The notebooks' kernels inherit this: quick mode (sizes only, the same code), and
# Jupyter's inline backend as for a user.
os.environ["SCIML_QUICK"] = "1"
os.environ.pop("MPLBACKEND", None)

project = "sciml"
author = "the sciml authors"
copyright = "the sciml authors, Apache-2.0"  # noqa: A001 (Sphinx's name)

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx-mathjax-offline",  # MathJax served from _static: the site reads nothing online
]

root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]
html_theme = "furo"
html_title = "sciml"
html_static_path: list[str] = []
html_favicon = "_static/favicon.svg"  # else browsers ask for /favicon.ico: a 404
# Every warning is an error (make docs runs sphinx-build -W): a missing page, a broken
# Markdown link, a docstring that is not valid reStructuredText. Not nitpicky: the
# docstrings name torch's, xarray's ... objects (no inventory offline) and sciml's
# internal ones that the reference leaves out; those names show as code, unlinked.
nitpicky = False

# MyST: the Markdown of the README, the guide and the notes.
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# MyST-NB: every notebook executed at build time, in quick mode (above). A cell that
# raises or writes to stderr fails the build.
nb_execution_mode = "force"
nb_execution_timeout = 1200
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_output_stderr = "error"
nb_merge_streams = True

# autodoc: Google docstrings with their Examples, in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False

#: The notice on every notebook page.
QUICK_NOTE = (
    "This page is the notebook executed when the site was built, in quick mode "
    "(SCIML_QUICK=1): smaller sizes, the same code. In JupyterLab (make lab) it runs "
    "as shipped, at the sizes its first cell picks otherwise (make notebooks)."
)


# --- the API reference, written from the packages' __all__ ---------------------------

API = DOCS / "api"
#: Packages left out of the reference: the demo sits on top of the library.
NOT_API = {"sciml.demos"}


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split(".")) and not name.endswith(".cli")


def _directive(obj: object) -> str:
    if typing.get_origin(obj) is not None:  # a type alias (dict[str, int] ...)
        return "autodata"
    if isinstance(obj, type):
        return "autoclass"
    if callable(obj):
        return "autofunction"
    return "autodata"


def _api_sections() -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """``(package, [(module, names)])`` for every public package of sciml.

    A package with ``__all__`` is documented by it; one without, by the ``__all__`` of
    each of its public modules.
    """
    import sciml

    packages = [
        info.name
        for info in pkgutil.walk_packages(sciml.__path__, "sciml.")
        if info.ispkg and _public(info.name) and info.name not in NOT_API
    ]
    pages = []
    for name in sorted(packages):
        package = importlib.import_module(name)
        if getattr(package, "__all__", None):
            sections = [(name, list(package.__all__))]
        else:
            sections = []
            for info in pkgutil.iter_modules(package.__path__, name + "."):
                if info.ispkg or not _public(info.name):
                    continue
                module = importlib.import_module(info.name)
                if getattr(module, "__all__", None):
                    sections.append((info.name, list(module.__all__)))
        if sections:
            pages.append((name, sections))
    return pages


def _data_doc(package: str, name: str, obj: object) -> list[str]:
    """The ``#:`` comment of a constant ``name``, from the module that defines it.

    Autodoc would show the docstring of the value's type (``dict`` ...).
    """
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith(package) or vars(module).get(name) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except PycodeError:
            continue
        if ("", name) in docs:
            return [line for line in docs[("", name)] if line is not None]
    return []


def _first_line(obj: object) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def write_api() -> list[str]:
    """Write ``docs/api/`` (one page per package and an index); return the page names."""
    pages: dict[str, str] = {}
    seen: dict[int, str] = {}  # an object re-exported by two packages is documented once
    names = []
    for package, sections in _api_sections():
        title = f"``{package}``"
        lines = [title, "=" * len(title), ""]
        doc = _first_line(importlib.import_module(package))
        if doc:
            lines += [doc, ""]
        for module_name, members in sections:
            module = importlib.import_module(module_name)
            if module_name != package:
                heading = f"``{module_name}``"
                lines += [heading, "-" * len(heading), ""]
                doc = _first_line(module)
                if doc:
                    lines += [doc, ""]
            lines += [f".. currentmodule:: {module_name}", "", ".. autosummary::", ""]
            lines += [
                f"   {member}"
                for member in members
                if _directive(getattr(module, member)) != "autodata"
            ]
            lines.append("")
            for member in members:
                obj = getattr(module, member)
                key = id(obj)
                directive = _directive(obj)
                if directive != "autodata" and key in seen:
                    lines += [f".. py:data:: {member}", "   :no-index:", ""]
                    lines += [f"   The same object as :obj:`{seen[key]}`.", ""]
                    continue
                if directive != "autodata":
                    seen[key] = f"{module_name}.{member}"
                else:
                    lines.append(f".. py:data:: {member}")
                    if typing.get_origin(obj) is not None:
                        lines += [f"   :value: {obj!r}", ""]
                    else:
                        lines += [f"   :type: {type(obj).__name__}", ""]
                    lines += [f"   {line}" for line in _data_doc(package, member, obj)]
                    lines.append("")
                    continue
                lines.append(f".. {directive}:: {member}")
                if directive == "autoclass":
                    lines.append("   :members:")
                lines.append("")
        pages[f"{package}.rst"] = "\n".join(lines)
        names.append(package)
    index = ["API reference", "=============", ""]
    index += [
        "Every public package of ``sciml``, written from the names it exports "
        "(``__all__``), or, for a package that exports none, from those of its "
        "modules; each object with its docstring and examples.",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
    ]
    index += [f"   {name}" for name in names]
    pages["index.rst"] = "\n".join(index) + "\n"
    _write_pages(API, pages)
    return names


def _write_pages(folder: Path, pages: dict[str, str]) -> None:
    """Make ``folder`` hold ``pages`` (name -> text), rewriting only the changed ones.

    Sphinx reads again the files it finds newer than its last build.
    """
    folder.mkdir(exist_ok=True)
    for path in folder.iterdir():
        if path.name not in pages:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for name, text in pages.items():
        path = folder / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


# --- the demo's report -------------------------------------------------------------------

DEMO = DOCS / "demo"
#: ``make demo`` writes the full report here; without it the build runs the quick demo.
DEMO_REPORT = ROOT / "runs" / "demo" / "report.md"
QUICK_DEMO = DOCS / "_build" / "demo-quick"


def write_demo() -> None:
    """Copy the demo's report and its figures to ``docs/demo/``.

    The report of ``make demo`` when there is one, else that of ``sciml demo --quick``,
    run into ``docs/_build/demo-quick`` once (a clean build runs it again).
    """
    report, how = DEMO_REPORT, "the report of the last `make demo` (runs/demo/report.md)"
    if not report.exists():
        report = QUICK_DEMO / "report.md"
        if not report.exists():  # a build in a clean docs/_build runs it again
            sciml = Path(sys.executable).parent / "sciml"
            subprocess.run(
                [str(sciml), "demo", "--quick", "--out", str(QUICK_DEMO)], check=True, cwd=ROOT
            )
        how = (
            "the report of `sciml demo --quick`, run by the build because `make demo` "
            "had not written one (smallest sizes: `make demo` writes the full one)"
        )
    text = report.read_text()
    title, _, rest = text.partition("\n")
    note = f"```{{note}}\nThis page is {how}.\n```\n"
    page = (
        f"{title}\n\n{note}{rest}" if title.startswith("# ") else f"# Demo report\n\n{note}{text}"
    )
    _write_pages(DEMO, {"report.md": page})
    for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text):  # the figures it shows
        (DEMO / link).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(report.parent / link, DEMO / link)


# --- the quick-mode notice on each notebook page -----------------------------------------


def _note_quick_mode(app: object, doctree: nodes.document) -> None:
    docname = app.env.docname  # type: ignore[attr-defined]
    if not docname.startswith("notebooks/"):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    note = nodes.note("", nodes.paragraph(text=QUICK_NOTE), classes=["sciml-quick-mode"])
    if section is None:
        doctree.insert(0, note)
    else:
        title = next(iter(section.findall(nodes.title)))
        section.insert(section.index(title) + 1, note)


def setup(app: object) -> None:
    """Write the generated pages and add the notebook notice."""
    write_api()
    write_demo()
    app.connect("doctree-read", _note_quick_mode)  # type: ignore[attr-defined]
