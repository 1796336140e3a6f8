"""Where a command may write: never over one of its inputs, never over a file unasked.

Paths are compared after resolving symbolic links and ``..``, and existing
files by identity (a hard link to an input is that input).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["OutputPathError", "check_outputs"]


class OutputPathError(ValueError):
    """An output path is one of the command's inputs, or exists without ``--overwrite``."""


def _same(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def _inside(path: Path, folder: Path) -> bool:
    return folder.is_dir() and folder.resolve() in path.resolve().parents


def check_outputs(
    outputs: Mapping[str, str | Path],
    inputs: Mapping[str, str | Path | None],
    *,
    overwrite: bool | None,
) -> None:
    """Refuse outputs that are, or lie inside, an input; and existing ones unless ``overwrite``.

    Args:
        outputs: Each output path by the name the user gave it (``"OUT"``,
            ``"--run-dir"``, ``"OUT/image.tif"``).
        inputs: Each input path (a file or a folder) by its name; ``None`` is skipped.
        overwrite: Whether existing outputs may be replaced; ``None`` for outputs
            that may exist (a run folder that resumes).

    Raises:
        OutputPathError: Naming the output, the input, and what to do instead.
    """
    for out_name, out_path in outputs.items():
        out = Path(out_path)
        for in_name, in_path in inputs.items():
            if in_path is None:
                continue
            source = Path(in_path)
            where = "is" if _same(out, source) else "is inside" if _inside(out, source) else ""
            if where:
                raise OutputPathError(
                    f"output {out_name} ({out}) {where} the input {in_name} ({source}): writing "
                    "it would destroy the input; give the output another path"
                )
        if overwrite is False and out.exists():
            raise OutputPathError(
                f"output {out_name} ({out}) exists; pass --overwrite to replace it, or give "
                "the output another path"
            )
