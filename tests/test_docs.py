"""The documentation: docstring examples run as written, and every docs/ page is linked."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sciml"

#: The modules of the public API's functions (../shared/DESIGN.md), each with examples.
PUBLIC = {
    "sciml.datasets.samples",
    "sciml.distributed.process_group",
    "sciml.geo.mask",
    "sciml.spatial_parallel.parallelize",
    "sciml.spatial_parallel.sharding",
    "sciml.training.loop",
    "sciml.weather.metrics.dispersion",
    "sciml.weather.metrics.crps",
}

RUN_EXAMPLES = """
import doctest, importlib, json, sys
results = {}
for name in sys.argv[1:]:
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(importlib.import_module(name), optionflags=flags, verbose=False)
    results[name] = [result.attempted, result.failed]
print(json.dumps(results))
"""


def _modules_with_examples() -> list[str]:
    return sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in PACKAGE.rglob("*.py")
        if ">>>" in path.read_text()
    )


def test_docstring_examples_run_as_written(tmp_path: Path) -> None:
    # a process of their own (an example starts a process group) in an empty folder
    modules = _modules_with_examples()
    done = subprocess.run(
        [sys.executable, "-c", RUN_EXAMPLES, *modules],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    failed = {name: counts for name, counts in results.items() if counts[1]}
    assert failed == {}, done.stdout
    assert {name for name, (attempted, _) in results.items() if attempted} >= PUBLIC


def test_every_docs_page_is_linked_from_the_code_and_every_link_resolves() -> None:
    # the design notes: docs/*.md but the site's front page (docs/index.md)
    pages = {path.name for path in (ROOT / "docs").glob("*.md")} - {"index.md"}
    linked = {
        name
        for path in PACKAGE.rglob("*.py")
        for name in re.findall(r"docs/([\w-]+\.md)", path.read_text())
    }
    assert linked - pages == set(), "docstrings link pages that do not exist"
    assert pages - linked == set(), "pages no module links"
