"""The run folder's lock leaves nothing behind."""

from pathlib import Path

from sciml.training.runs.folder import RunLock


def test_a_released_lock_is_empty_and_names_its_holder_while_held(tmp_path: Path) -> None:
    with RunLock(tmp_path, name="x.lock") as lock:
        assert lock.path.read_text().startswith("pid ")
    assert lock.path.read_bytes() == b""  # a run that took it and was refused changed nothing
