"""The run folder's lock and claim leave nothing behind."""

from pathlib import Path

import pytest

from sciml.training.runs.folder import RunLock, claim_run_dir
from sciml.training.runs.record import RecordKind, read_run_record


def test_a_released_lock_is_empty_and_names_its_holder_while_held(tmp_path: Path) -> None:
    with RunLock(tmp_path, name="x.lock") as lock:
        assert lock.path.read_text().startswith("pid ")
    assert lock.path.read_bytes() == b""  # a run that took it and was refused changed nothing


KIND = RecordKind("demo", 1, "demo_run.json", "a demo run")


def test_a_claim_refused_by_its_caller_leaves_no_folder_it_created(tmp_path: Path) -> None:
    new = tmp_path / "runs" / "new"
    with pytest.raises(ValueError, match="bad input"), claim_run_dir(new, KIND, {"lr": 1}):
        raise ValueError("bad input found after the claim")
    assert not new.exists() and (tmp_path / "runs").exists()  # its parents stay
    # a folder that was there, or one the run wrote into, stays as it is
    old = tmp_path / "old"
    old.mkdir()
    with pytest.raises(ValueError), claim_run_dir(old, KIND, {"lr": 1}):
        raise ValueError("bad input")
    assert old.is_dir()
    with pytest.raises(ValueError), claim_run_dir(new, KIND, {"lr": 1}) as claim:
        claim.write()
        raise ValueError("failed after writing its record")
    assert read_run_record(new, KIND) == {"lr": 1}
