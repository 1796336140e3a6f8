"""The run record: claimed under the folder's lock, refused before writing, read back by kind."""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sciml.training.runs.folder import claim_run_dir
from sciml.training.runs.record import (
    RecordKind,
    RunDirError,
    RunRecordError,
    read_run_record,
    record_text,
)
from tests.weather.test_grid import _hashes

KIND = RecordKind("toy", 2, "toy_run.json", "a toy run", changes={1: "the toy now has a grid"})


@dataclass(frozen=True)
class Toy:
    lr: float
    grid: tuple[int, ...]


def _claim(run: Path, config: object) -> bool:
    with claim_run_dir(run, KIND, config) as claim:
        claim.write()
        return claim.resumed


def test_a_claimed_folder_is_written_once_and_read_back(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert not _claim(run, Toy(lr=0.1, grid=(4, 8)))
    saved = json.loads((run / KIND.file).read_text())
    assert saved == {"kind": "toy", "version": 2, "config": {"lr": 0.1, "grid": [4, 8]}}
    assert read_run_record(run, KIND) == {"lr": 0.1, "grid": [4, 8]}
    before = _hashes(run)
    assert _claim(run, {"lr": 0.1, "grid": [4, 8]})  # the same as a mapping: resumed
    assert _hashes(run) == before
    assert (run / "run.lock").read_bytes() == b""  # the folder's lock, released


def test_another_configuration_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / KIND.file).write_text(record_text(KIND, {"lr": 0.1, "grid": [4, 8], "seed": 0}))
    before = _hashes(run)  # no lock file yet: a refused claim must not create one
    with pytest.raises(RunRecordError) as caught:
        _claim(run, {"lr": 0.2, "grid": [4, 16], "seed": 0})
    assert str(caught.value) == (
        f"--run-dir {run} holds a toy run with another configuration (grid: [4, 8] in the "
        "run, [4, 16] now; lr: 0.1 in the run, 0.2 now); nothing was written: give this run "
        "another --run-dir"
    )
    assert isinstance(caught.value, ValueError | RunDirError)
    assert _hashes(run) == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"kind": "toy", "ver', r"toy_run.json is not valid JSON \(Unterminated string"),
        ("[1, 2]", "toy_run.json holds no run record"),
        (
            '{"kind": "geo-segmenter", "version": 2, "config": {}}',
            r"the record of a 'geo-segmenter' run, not a toy run \('toy'\)",
        ),
        ('{"lr": 0.1}', r"a toy run of format 1; .* reads format 2 \(the toy now has a grid\)"),
        (
            '{"kind": "toy", "version": 3, "config": {}}',
            r"a toy run of format 3; .* reads format 2 \(another format\)",
        ),
    ],
    ids=["corrupt", "not-a-record", "other-kind", "older", "newer"],
)
def test_a_bad_record_is_refused_by_name_on_claim_and_read(
    tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / KIND.file).write_text(content)
    before = _hashes(tmp_path)
    with pytest.raises(RunRecordError, match=message) as caught:
        _claim(tmp_path, {"lr": 0.1})
    assert str(caught.value).endswith("nothing was written: give this run another --run-dir")
    assert _hashes(tmp_path) == before
    with pytest.raises(RunRecordError, match=message) as caught:
        read_run_record(tmp_path, KIND)
    assert str(caught.value).endswith("retrain it in a new --run-dir")


def test_missing_folder_record_or_a_foreign_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing \(--run-dir\) not found"):
        read_run_record(tmp_path / "missing", KIND)
    with pytest.raises(FileNotFoundError, match=r"toy_run.json not found: .* holding a toy run"):
        read_run_record(tmp_path, KIND)
    (tmp_path / "weights.pt").write_bytes(b"")
    with pytest.raises(RunRecordError, match="holds weights.pt but no toy_run.json, so not a toy"):
        _claim(tmp_path, {"lr": 0.1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.pt"]


def test_a_second_process_cannot_claim_a_held_folder(tmp_path: Path) -> None:
    holder = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from sciml.training.runs.folder import RunLock\n"
        "with RunLock(Path(sys.argv[1])):\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.readline()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        with pytest.raises(
            RunDirError, match=f"in use by another training run \\(pid {proc.pid} "
        ) as caught:
            _claim(tmp_path, {"lr": 0.1})
        assert str(caught.value).endswith(
            "; wait for it to finish, or give this run another --run-dir"
        )
        assert not (tmp_path / KIND.file).exists()
    finally:
        proc.communicate("\n", timeout=60)
    assert not _claim(tmp_path, {"lr": 0.1})  # released: the folder can be claimed
