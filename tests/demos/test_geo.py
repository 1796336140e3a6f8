"""The ``sciml demo`` section of the geo workflow, at quick sizes."""

from __future__ import annotations

from pathlib import Path

from sciml.demos.geo import demo


def test_demo_quick(tmp_path: Path) -> None:
    markdown = demo(tmp_path, quick=True)
    assert markdown.startswith("## OSM road masks for tree segmentation")
    assert "| masked |" in markdown and "| unmasked |" in markdown and "0.784" in markdown
    for figure in ("geo/experiment.png", "geo/osbs.png"):
        assert f"({figure})" in markdown
        assert (tmp_path / figure).stat().st_size > 10_000
    assert (tmp_path / "geo" / "osbs_probability.tif").exists()
