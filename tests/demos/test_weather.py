"""The weather section of ``sciml demo`` (quick mode)."""

import re
from pathlib import Path

from sciml.demos.weather import demo


def test_demo_quick_writes_linked_figures(tmp_path: Path) -> None:
    markdown = demo(tmp_path, quick=True)
    assert markdown.startswith("## Ensemble weather")
    links = re.findall(r"\]\(([^)]+)\)", markdown)
    assert len(links) == 6
    for link in links:
        assert (tmp_path / link).stat().st_size > 1000
    assert (tmp_path / "weather" / "toy_ensemble.nc").exists()
    assert "| lead | crps | crps_fair |" in markdown
