"""sciml.volumes.auto_mesh: --mesh auto from the planner, one decision, recorded with the run."""

import dataclasses
from pathlib import Path

import pytest
import torch

from sciml.cli import main
from sciml.distributed import spawn
from sciml.spatial_parallel.planner.profile import PROFILES, save_profile
from sciml.volumes.auto_mesh import auto_mesh, plan_mesh
from sciml.volumes.config import VolumeTraining
from sciml.volumes.data import write_cosmology
from sciml.volumes.mesh_record import MeshChoice, read_record
from tests.volumes.test_mesh_record import record_mesh

pytestmark = pytest.mark.xdist_group("volumes_auto_mesh")

#: The H100 constants without the reserved 1.5 GiB, so that tiny runs fit in 1 GiB.
PROFILE = dataclasses.replace(PROFILES["h100"], name="test", reserved=0.0)
OPTIONS = VolumeTraining("cosmoflow", width=2, levels=1)
TINY = ["--epochs", "1", "--width", "2", "--levels", "1", "--workers", "0", "--no-progress"]


@pytest.fixture(scope="module")
def cosmo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cosmology(tmp_path_factory.mktemp("auto") / "c.zarr", samples=2, size=8, seed=1)


def _plan(data: Path, batch: int, world: int, *, memory: float = 2**30) -> MeshChoice:
    return plan_mesh(
        data, OPTIONS, global_batch=batch, world_size=world, memory=memory, profile=PROFILE
    )


def test_the_plan_follows_the_batch_the_profile_and_the_memory(cosmo: Path) -> None:
    one = {"data": 1, "depth": 1, "height": 1, "width": 1}
    # two samples: two replicas (no halo exchange, the same gradient all-reduce)
    assert _plan(cosmo, 2, 2).mesh == one | {"data": 2}
    # one sample cannot be split over replicas: a spatial grid; three do not split over two
    for batch in (1, 3):
        mesh = _plan(cosmo, batch, 2).mesh
        assert mesh["data"] == 1 and sorted(mesh.values()) == [1, 1, 1, 2], batch
    assert "*" in _plan(cosmo, 1, 2).table  # the choice is marked in the table
    with pytest.raises(ValueError, match=r"no grid of 2 ranks fits in .* needs"):
        _plan(cosmo, 2, 2, memory=1000.0)
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="global_batch must be an integer >= 1"):
            _plan(cosmo, bad, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no grid of 11 ranks can split input"):
        _plan(cosmo, 1, 11)  # 8 voxels cannot take 11 blocks, one sample not 11 replicas


def test_auto_mesh_sets_the_grid_and_the_replica_batch(tmp_path: Path, cosmo: Path) -> None:
    """One process: the planner's grid is all ones and the replica takes the whole batch."""
    profile = str(save_profile(PROFILE, tmp_path / "test_profile.json"))
    cpu = torch.device("cpu")
    options = auto_mesh(
        cosmo, OPTIONS, tmp_path / "run", global_batch=3, device=cpu, profile=profile, memory=2**30
    )
    assert options.mesh == {"data": 1, "depth": 1, "height": 1, "width": 1}
    assert options.config.batch_size == 3 and options.model == OPTIONS.model
    # a recorded grid is kept without planning, and its data size must divide the batch
    recorded = tmp_path / "recorded"
    record_mesh(recorded, {"data": 2})
    with pytest.raises(ValueError, match="--global-batch 3 does not split over the 2 data"):
        auto_mesh(cosmo, OPTIONS, recorded, global_batch=3, device=cpu, profile="no such file")
    options = auto_mesh(cosmo, OPTIONS, recorded, global_batch=4, device=cpu, profile="none")
    assert options.mesh["data"] == 2 and options.config.batch_size == 2
    for bad in (0, True):  # refused before the record is read, not split as a batch of 0 or 1
        with pytest.raises(ValueError, match="global_batch must be an integer >= 1"):
            auto_mesh(cosmo, OPTIONS, recorded, global_batch=bad, device=cpu)


def _train_auto(argv: list[str]) -> int:
    return main(argv)


def test_two_processes_train_on_the_planned_grid(tmp_path: Path, cosmo: Path) -> None:
    profile = save_profile(PROFILE, tmp_path / "test_profile.json")
    run = tmp_path / "run"
    argv = ["cosmoflow", "train", str(cosmo), "--run-dir", str(run), "--mesh", "auto"]
    argv += ["--global-batch", "1", "--profile", str(profile), "--memory", "1GiB", *TINY]
    assert spawn(_train_auto, 2, argv, timeout=240) == [0, 0]
    mesh = read_record(run)
    assert mesh is not None and mesh["data"] == 1 and sorted(mesh.values()) == [1, 1, 1, 2]
    steps = [
        line for line in (run / "metrics.csv").read_text().splitlines() if "train_step" in line
    ]
    assert len(steps) == 2 * 2  # 2 samples of one step each, loss and mae


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mesh", "auto"], "--mesh auto needs --global-batch N"),
        (["--mesh", "auto", "--global-batch", "2", "--batch-size", "2"], "not --batch-size"),
        (["--mesh", "depth=1", "--profile", "h100"], "--profile: only with --mesh auto"),
        (["--global-batch", "2", "--memory", "8GiB"], "--global-batch, --memory: only with"),
        (["--mesh", "auto", "--global-batch", "2", "--profile", "h200"], "unknown profile"),
    ],
)
def test_bad_auto_options_are_named(
    tmp_path: Path, cosmo: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["cosmoflow", "train", str(cosmo), "--run-dir", str(tmp_path / "r"), *TINY, *extra]
    assert main(argv) == 1
    assert message in capsys.readouterr().err
