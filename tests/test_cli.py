"""The ``sciml`` command line: help on every subcommand, info, the demo."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from sciml.cli import build_parser, main


def _subcommand_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _subcommand_paths(sub, (*prefix, name))


@pytest.mark.parametrize("path", [(), *_subcommand_paths(build_parser())], ids=" ".join)
def test_every_subcommand_has_help(path: tuple[str, ...], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    assert "usage: sciml" in capsys.readouterr().out


def test_info_lists_versions_and_backends(capsys: pytest.CaptureFixture) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "gloo=yes" in out


def test_console_script_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "sciml.cli", "--version"], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    assert out.startswith("sciml ")


def test_demo_spine_section_writes_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["demo", "--quick", "--only", "spine", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "## Spine" in report and "validation RMSE" in report
    assert (tmp_path / "spine_training.png").stat().st_size > 10_000
    assert (tmp_path / "spine" / "checkpoints" / "last.pt").exists()
    assert str(tmp_path / "report.md") in capsys.readouterr().out


def test_demo_rejects_unknown_section(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown demo section"):
        main(["demo", "--only", "nope", "--out", str(tmp_path)])
