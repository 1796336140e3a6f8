"""sciml.volumes.mesh_record: one grid for every rank, recorded with the run and kept on resume."""

from pathlib import Path

import pytest

from sciml.cli import main
from sciml.distributed import init_distributed
from sciml.training.runs.record import LAST_CHECKPOINT, record_text
from sciml.volumes.data import write_cosmology
from sciml.volumes.mesh_record import MeshChoice, choose_mesh, full_mesh, read_record
from sciml.volumes.volume_record import RECORD, VOLUMES_RECORD, record_volumes


def record_mesh(run_dir: Path, mesh: dict[str, int]) -> None:
    """Record a run's grid (as the run records it, with the rest of its record)."""
    record_volumes(run_dir, {"mesh": full_mesh(mesh)})


TINY = ["--epochs", "1", "--width", "2", "--levels", "1", "--workers", "0", "--no-progress"]


def test_the_recorded_grid_is_kept(tmp_path: Path) -> None:
    chosen = {"data": 1, "depth": 1, "height": 1, "width": 1}

    def plan() -> MeshChoice:
        return MeshChoice(dict(chosen), "the table")

    def no_plan() -> MeshChoice:
        raise AssertionError("a recorded grid must not be planned again")

    with init_distributed(backend="gloo"):
        assert choose_mesh(tmp_path, None, plan=plan) == chosen
        assert not (tmp_path / RECORD).exists()  # recorded by the run, once its inputs are checked
        record_mesh(tmp_path, chosen)
        assert choose_mesh(tmp_path, None, plan=no_plan) == chosen  # resume: reused
        assert choose_mesh(tmp_path, {}, plan=no_plan) == chosen
        # before the run's first checkpoint nothing binds: the grid asked for replaces it
        assert choose_mesh(tmp_path, {"depth": 2}) == {**chosen, "depth": 2}
        record_mesh(tmp_path, {"depth": 2})
        record_mesh(tmp_path, chosen)
        (tmp_path / LAST_CHECKPOINT).parent.mkdir()
        (tmp_path / LAST_CHECKPOINT).touch()
        with pytest.raises(ValueError, match="differs from the grid .* recorded in"):
            choose_mesh(tmp_path, {"depth": 2})
        with pytest.raises(ValueError, match=r"another configuration \(mesh.depth: 1 in the"):
            record_mesh(tmp_path, {"depth": 2})  # a checkpointed run's grid is never replaced
        assert read_record(tmp_path) == chosen
        for bad, message in (
            ({"depht": 2}, "axes \\['depht'\\] are unknown"),
            ({"depth": 0}, ">= 1"),
        ):
            with pytest.raises(ValueError, match=message):
                choose_mesh(tmp_path / "new", bad)
        (tmp_path / RECORD).write_text(record_text(VOLUMES_RECORD, {"mesh": {"depth": 0}}))
        with pytest.raises(ValueError, match="does not record a grid"):
            read_record(tmp_path)
        (tmp_path / RECORD).write_text('{"mesh": {"depth": 1}}')  # the layout of format 1
        with pytest.raises(ValueError, match=r"CosmoFlow / U-Net run of format 1; .* format 3"):
            choose_mesh(tmp_path, None, plan=no_plan)


def test_a_run_that_fails_on_its_inputs_records_no_grid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cosmo = write_cosmology(tmp_path / "c.zarr", samples=2, size=4)
    run = ["cosmoflow", "train", "--run-dir", str(tmp_path / "r"), *TINY]
    assert main([*run[:2], str(tmp_path / "none.zarr"), *run[2:]]) == 1
    assert main([*run[:2], str(cosmo), *run[2:], "--mesh", "depth=2"]) == 1  # 1 process
    assert "has 2 ranks but the world size is 1" in capsys.readouterr().err
    assert not (tmp_path / "r" / RECORD).exists()
