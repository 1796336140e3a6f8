"""Digests of files and folders, to assert that a refused command left its inputs untouched."""

import hashlib
from pathlib import Path


def digests(*paths: Path) -> dict[str, str]:
    """SHA-256 of every file under each of ``paths`` (a file or a folder), by path.

    Folders are listed (``"folder"``) and a path that does not exist is recorded as
    ``"absent"``, so that a refusal that creates either shows as a difference.
    """
    found: dict[str, str] = {}
    for path in paths:
        for entry in [path, *(sorted(path.rglob("*")) if path.is_dir() else [])]:
            if entry.is_file():
                found[str(entry)] = hashlib.sha256(entry.read_bytes()).hexdigest()
            else:
                found[str(entry)] = "folder" if entry.is_dir() else "absent"
    return found
