"""A failing command under torchrun shows its one-line error once, in torchrun's summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from sciml.cli import ELASTIC_ERROR_FILE, EXIT_FAILURE, EXIT_USAGE, main

MISSING = "ensemble file not found"


def _summary(error_file: Path) -> str:
    """torchrun's failure summary of one rank that failed with ``error_file``."""
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=EXIT_FAILURE, error_file=str(error_file))
    return ChildFailedError("sciml", {0: failure}).format_msg()


def test_error_goes_to_the_elastic_error_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    error_file = tmp_path / "error.json"
    monkeypatch.setenv(ELASTIC_ERROR_FILE, str(error_file))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")  # a rank that prints nothing, yet its error is kept
    assert main(["weather", "score", str(tmp_path / "none.nc"), "--variable", "t"]) == EXIT_FAILURE
    assert capsys.readouterr().err == ""
    line = f"sciml: error: FileNotFoundError: {MISSING}: {tmp_path / 'none.nc'}"
    assert f"  traceback : {line} (--debug shows the traceback)\n" in _summary(error_file)
    assert [p.name for p in tmp_path.iterdir()] == ["error.json"]  # no temporary left


def test_usage_error_goes_to_the_elastic_error_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    error_file = tmp_path / "error.json"
    monkeypatch.setenv(ELASTIC_ERROR_FILE, str(error_file))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit) as exit_info:
        main(["weather", "score", "f.nc", "--variable", "t", "--bogus"])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: sciml weather score ") and "error" not in err
    line = "sciml weather score: error: unrecognized arguments: --bogus"
    assert f"  traceback : {line}\n" in _summary(error_file)


def test_failing_torchrun_job_shows_the_error_once(tmp_path: Path) -> None:
    job = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run", "--standalone"),
            *("--nproc-per-node", "2", "-m", "sciml", "weather", "train"),
            *(str(tmp_path / "none.nc"), "--model", "emos", "--run-dir", str(tmp_path / "run")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert job.returncode == 1
    lines = job.stderr.splitlines()
    assert not [line for line in lines if line.startswith("sciml: error")]  # no rank printed it
    root = lines[lines.index("Root Cause (first observed failure):") :]
    traceback = next(line for line in root if line.startswith("  traceback : "))
    assert traceback.startswith("  traceback : sciml: error: FileNotFoundError: " + MISSING)


def test_unwritable_error_file_prints_the_error_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(ELASTIC_ERROR_FILE, str(blocker / "error.json"))
    assert main(["weather", "score", str(tmp_path / "none.nc"), "--variable", "t"]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert err.startswith(f"sciml: error: FileNotFoundError: {MISSING}")
    assert f"(not written to {ELASTIC_ERROR_FILE} {blocker / 'error.json'}: " in err
    assert len(err.splitlines()) == 1
