"""sciml.io_utils: outputs appear whole or not at all, with the usual permissions."""

import os
import stat
from pathlib import Path

import pytest

from sciml.io_utils import atomic_path, atomic_write_text, save_figure


def test_atomic_write_replaces_whole_file_with_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.md"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in target.parent.iterdir()] == ["report.md"]


def test_failure_leaves_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "mask.tif"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target, suffix=".tif") as tmp:
        assert tmp.suffix == ".tif" and tmp.parent == tmp_path
        tmp.write_text("half")
        raise RuntimeError("writer crashed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["mask.tif"]


def test_save_figure_is_atomic(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "f.png", dpi=50)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plt.close(fig)

    class Interrupted:  # writes half an image, then the run is killed
        def savefig(self, path: Path, **kwargs: object) -> None:
            Path(path).write_bytes(b"\x89PNG\r\n")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_figure(Interrupted(), tmp_path / "f.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png"]  # the old figure, whole
    assert path.stat().st_size > 1000
