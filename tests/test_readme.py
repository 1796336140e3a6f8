"""The README's and the user guide's examples run as pasted: every ``python`` and ``bash``
block, read from README.md and docs/guide/*.md (the README's sections moved there).

The blocks of one section run in order in an empty folder of their own, with the
venv's ``bin`` first on ``PATH``: bash blocks with ``bash -e``, Python blocks saved
as a file and run by the venv's Python, or by the command in their first line when
that is a ``# torchrun ... NAME.py`` comment. A block a page marks with
``<!-- not run by tests: REASON -->`` is not run; :data:`NOT_RUN` lists them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The pages whose blocks run: the README, then the guide's pages in its order.
GUIDE = ROOT / "docs" / "guide"

#: The blocks the pages mark as not run (their first line), and the reason it gives.
NOT_RUN = {
    "make demo    # sets up .venv, runs every workflow on the bundled data "
    "-> runs/demo/report.md": "sets up .venv and runs for minutes (the tests run inside that venv)",
    "sciml spatial plan --calibrate          # measure this machine; then --profile calibrated": (
        "measures this machine for about 30 s"
    ),
    "sbatch --ntasks=4 slurm/cosmoflow.sbatch runs/cosmo.zarr --run-dir runs/cosmo4 "
    "--mesh data=2,depth=2": "needs a Slurm cluster",
    "sbatch --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 --cpus-per-task=8 \\": (
        "needs a Slurm cluster"
    ),
    "# evaluate_on_slurm.py": (
        "needs a Slurm cluster (tests/test_slurm.py runs it on the local one)"
    ),
}

_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!-- not run by tests: (.+) -->$")
_TORCHRUN = re.compile(r"^# (torchrun .+ (\S+\.py))$")
_TIMEOUT = 600  # a hung block fails instead of stalling the suite; not a timing check


@dataclass(frozen=True)
class Block:
    """A fenced ``python`` or ``bash`` block of a page (the README or a guide page)."""

    language: str
    line: int  # of the opening fence, counted from 1
    section: str
    code: str
    not_run: str | None
    page: str = "README.md"  # relative to the repository's root


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The ``python`` and ``bash`` blocks of ``text`` in order, with their section and marker.

    Raises:
        ValueError: A marker that does not stand right above a python or bash block, or
            a block that is never closed.
    """
    blocks: list[Block] = []
    section, marker, fence = "", None, None
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is not None:
            if line.strip() == "```":
                language, start, reason = fence
                if language in ("python", "bash"):
                    code = "\n".join(body) + "\n"
                    blocks.append(Block(language, start, section, code, reason, page))
                fence, body = None, []
            else:
                body.append(line)
            continue
        opening = _FENCE.match(line)
        if (
            marker is not None
            and line.strip()
            and not (opening and opening[1] in ("python", "bash"))
        ):
            raise ValueError(
                f"{page} line {marker[0]}: a 'not run by tests' marker must stand right "
                f"above a python or bash block, found {line!r}"
            )
        if opening:
            fence = (opening[1], number, None if marker is None else marker[1])
            marker = None
        elif match := _NOT_RUN.match(line.strip()):
            marker = (number, match[1])
        elif line.startswith("#"):
            section = line.lstrip("#").strip()
    if fence is not None:
        raise ValueError(f"{page} line {fence[1]}: the block is never closed")
    return blocks


def guide_pages() -> list[Path]:
    """The README, then the guide's pages in the order of its toctree."""
    toctree = re.search(r"```\{toctree\}\n(.*?)```", (GUIDE / "index.md").read_text(), re.S)
    names = [line.strip() for line in toctree[1].splitlines() if line.strip()[:1].isalnum()]
    return [README, *(GUIDE / f"{name}.md" for name in names)]


BLOCKS = [
    block
    for path in guide_pages()
    for block in readme_blocks(path.read_text(), str(path.relative_to(ROOT)))
]
SECTIONS = list(dict.fromkeys(block.section for block in BLOCKS if block.not_run is None))


def test_readme_marks_exactly_the_blocks_it_does_not_run() -> None:
    marked = {block.code.splitlines()[0]: block.not_run for block in BLOCKS if block.not_run}
    assert marked == NOT_RUN
    assert len(BLOCKS) - len(marked) == 12  # every other block runs below


def test_readme_blocks_parse_markers_and_sections() -> None:
    text = (
        "## A\n\n```bash\necho a\n```\n\n```\nnot code\n```\n### B\n"
        "<!-- not run by tests: needs a cluster -->\n```python\n# a comment, not a heading\n```\n"
    )
    blocks = readme_blocks(text)
    assert [(b.language, b.line, b.section, b.not_run) for b in blocks] == [
        ("bash", 3, "A", None),
        ("python", 12, "B", "needs a cluster"),
    ]
    with pytest.raises(ValueError, match="line 1: a 'not run by tests' marker must stand"):
        readme_blocks("<!-- not run by tests: why -->\ntext\n```bash\necho\n```\n")
    with pytest.raises(ValueError, match="line 1: the block is never closed"):
        readme_blocks("```bash\necho\n")


def _command(block: Block, folder: Path) -> list[str]:
    """Save ``block`` in ``folder`` and return the command that runs it there."""
    if block.language == "bash":
        script = folder / f"readme_{block.line}.sh"
        script.write_text(block.code)
        return ["bash", "-e", "-o", "pipefail", script.name]
    torchrun = _TORCHRUN.match(block.code.splitlines()[0])
    script = folder / (torchrun[2] if torchrun else f"readme_{block.line}.py")
    script.write_text(block.code)
    return shlex.split(torchrun[1]) if torchrun else [sys.executable, script.name]


@pytest.mark.system
@pytest.mark.parametrize("section", SECTIONS)
def test_readme_section_runs_as_pasted(section: str, tmp_path: Path) -> None:
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "")}
    for block in BLOCKS:
        if block.section != section or block.not_run is not None:
            continue
        run = subprocess.run(
            _command(block, tmp_path),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=_TIMEOUT,
        )
        assert run.returncode == 0, (
            f"{block.page} line {block.line} ({section}, {block.language}) exited with "
            f"{run.returncode}:\n{run.stdout[-4000:]}"
        )
