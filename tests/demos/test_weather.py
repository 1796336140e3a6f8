"""The weather section of ``sciml demo`` (quick mode)."""

import re
from pathlib import Path

from sciml.demos.weather import demo


def test_demo_quick_writes_linked_figures(tmp_path: Path) -> None:
    markdown = demo(tmp_path, quick=True)
    assert markdown.startswith("## Ensemble weather")
    links = re.findall(r"\]\(([^)]+)\)", markdown)
    assert len(links) == 8
    for link in links:
        assert (tmp_path / link).stat().st_size > 1000
    assert (tmp_path / "weather" / "toy_ensemble.nc").exists()
    assert "| lead | crps | crps_fair |" in markdown
    # post-processing: EMOS on 2 and 4 members, the MLP on 2, the raw 4 and 2
    assert "| model | crps | crps_skill | crps_efi | crps_efi_skill | crps_extreme |" in markdown
    for model in ("raw_4", "raw_2", "emos_2", "emos_4", "mlp_2"):
        assert f"\n| {model} |" in markdown
    assert "the climate data's start dates" in markdown
