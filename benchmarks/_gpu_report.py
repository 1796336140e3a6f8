"""The GPU check's records: a section's rows as it runs, and the Markdown summary.

A section runs in a process of its own (``gpu_check.py --section NAME``) and
records its figures through a :class:`Part`, which rewrites the section's
file atomically after every row: a section killed at its time budget still
leaves the rows it finished. :func:`markdown` renders the whole report.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sciml.io_utils import atomic_write_text

__all__ = ["Part", "markdown", "read_part", "write_markdown"]

Row = dict[str, Any]


@dataclass
class Part:
    """One section's rows and notes, written to ``path`` after each addition.

    Attributes:
        path: The section's file (JSON: ``{"rows": [...], "notes": [...]}``).
        deadline: Wall-clock time (``time.time()``) at which the section is stopped.
        dry_run: Tiny sizes on the CPU instead of the GPU's.
        scratch: A folder the sections share for files they pass on (not returned).
        report: The report so far: the earlier sections' rows by name.
        rows: The figures so far.
        notes: Lines that say what was skipped and why.
    """

    path: Path
    deadline: float
    dry_run: bool
    scratch: Path
    report: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        """``"cpu"`` in a dry run, else ``"cuda"``."""
        return "cpu" if self.dry_run else "cuda"

    def left(self) -> float:
        """Seconds left of the section's budget."""
        return self.deadline - time.time()

    def add(self, row: Row) -> None:
        """Record one row of figures (and rewrite the section's file)."""
        self.rows.append(row)
        self._write()

    def note(self, text: str) -> None:
        """Record a line for the summary (and rewrite the section's file)."""
        print(text, flush=True)
        self.notes.append(text)
        self._write()

    def enough(self, seconds: float, what: str) -> bool:
        """Whether ``seconds`` are left for ``what``; if not, say that it is skipped."""
        if self.left() >= seconds:
            return True
        self.note(f"skipped {what}: {self.left():.0f} s left of the section's budget")
        return False

    def _write(self) -> None:
        atomic_write_text(self.path, json.dumps({"rows": self.rows, "notes": self.notes}))


def read_part(path: Path) -> Row:
    """A section's file as :class:`Part` wrote it; empty rows and notes if it never wrote one."""
    if not path.exists():
        return {"rows": [], "notes": []}
    part: Row = json.loads(path.read_text())
    return part


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[Row]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return lines


def markdown(report: Row) -> str:
    """The report as Markdown: the machine, then every section's status, figures and notes."""
    env = report.get("environment", {})
    title = "GPU check (dry run on the CPU)" if report["dry_run"] else "GPU check"
    lines = [f"# {title}", ""]
    lines += [f"- {key}: {_cell(value)}" for key, value in env.items()]
    if "wheels" in report:
        lines += [f"- carried wheels: {_cell(report['wheels'])}"]
    lines += [f"- elapsed: {report['elapsed_s']:.0f} s of a {report['budget_s']:.0f} s budget"]
    for name, section in report["sections"].items():
        lines += ["", f"## {name}: {section['status']} ({section['seconds']:.1f} s)", ""]
        lines += _table(section["rows"]) if section["rows"] else []
        lines += [f"- {note}" for note in section["notes"]]
        if section.get("error"):
            lines += ["", "```", section["error"], "```"]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, report: Row) -> None:
    """Write :func:`markdown` of ``report`` to ``path`` atomically."""
    atomic_write_text(path, markdown(report))
