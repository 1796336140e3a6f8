"""sciml cosmoflow|unet3d data|train: the command line, one process and under torchrun."""

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sciml.cli import main
from tests.signals import signal_when_handled

pytestmark = pytest.mark.xdist_group("volumes_cli")

TINY = ["--epochs", "1", "--batch-size", "2", "--width", "2", "--levels", "1", "--workers", "0"]


def _steps(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return [r for r in csv.DictReader(handle) if r["split"] == "train_step"]


def test_data_then_train_in_one_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "seg.zarr"
    assert main(["unet3d", "data", str(data), "--samples", "4", "--size", "8", "--seed", "1"]) == 0
    shown = capsys.readouterr()
    assert "wrote 4 samples of 8^3 voxels" in shown.out
    assert "3D U-Net fields of 8^3 voxels: 100% (4/4 samples) after " in shown.err
    assert f"writing {data} (" in shown.err and ": done in " in shown.err.splitlines()[-1]
    run = tmp_path / "run"
    assert main(["unet3d", "train", str(data), "--run-dir", str(run), "--no-progress", *TINY]) == 0
    shown = capsys.readouterr()
    assert "completed after 2 steps" in shown.out
    # the status lines on stderr: the epoch's loss as metrics.csv has it (5 significant
    # digits shown), the summary with the best epoch's checkpoint
    with open(run / "metrics.csv", newline="") as handle:
        logged = {r["metric"]: float(r["value"]) for r in csv.DictReader(handle) if r["epoch"]}
    epoch = re.search(r"^epoch 1/1: train_loss (\S+) \(best\),", shown.err, re.MULTILINE)
    assert epoch and float(epoch[1]) == pytest.approx(logged["train_loss"], rel=5e-5), shown.err
    assert f"checkpoint {run}/checkpoints/best.pt" in shown.err.splitlines()[-1]
    assert {r["metric"] for r in _steps(run)} == {"loss", "accuracy"}
    assert sorted(p.name for p in run.glob("*.json")) == ["volumes.json"]  # the one record
    assert (run / "perf.csv").exists()


def test_bad_command_lines_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "c.zarr"
    assert main(["cosmoflow", "data", str(data), "--samples", "2", "--size", "4"]) == 0
    with pytest.raises(SystemExit):
        main(["cosmoflow", "train", str(data), "--run-dir", "r", "--decay-epochs", "3,x"])
    assert "expected comma-separated epochs >= 1" in capsys.readouterr().err
    run = ["cosmoflow", "train", str(data), "--run-dir", str(tmp_path / "r"), *TINY]
    assert main([*run, "--mesh", "depth=2"]) == 1
    assert "has 2 ranks but the world size is 1" in capsys.readouterr().err
    assert main(["cosmoflow", "data", str(data), "--samples", "2", "--size", "4"]) == 1
    assert "c.zarr exists" in capsys.readouterr().err
    assert main(["cosmoflow", "train", str(tmp_path / "none.zarr"), "--run-dir", "r"]) == 1
    assert "no such file or Zarr store" in capsys.readouterr().err


def test_a_signal_leaves_the_requeue_marker_until_the_run_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # in one process, what the torchrun test below checks across a launch: exit 3 and the
    # marker a batch script reads, which the completed rerun removes
    data, run = tmp_path / "c.zarr", tmp_path / "run"
    assert main(["cosmoflow", "data", str(data), "--samples", "4", "--size", "8"]) == 0
    command = ["cosmoflow", "train", str(data), "--run-dir", str(run), "--no-progress", *TINY]
    command += ["--epochs", "3"]  # 6 steps: the signal comes long before the last
    watcher = signal_when_handled(signal.SIGUSR1)
    assert main(command) == 3
    watcher.join()
    stopped = re.search(r"interrupted after (\d+) steps", capsys.readouterr().out)
    assert stopped and 1 <= int(stopped[1]) < 6
    assert (run / "requeue").read_text() == f"interrupted after {stopped[1]} steps\n"
    assert main(command) == 0
    assert "completed after 6 steps" in capsys.readouterr().out
    assert not (run / "requeue").exists()


@pytest.mark.slow
def test_torchrun_requeue_way_signal_the_launch_and_read_the_marker(tmp_path: Path) -> None:
    # 2 ranks on depth=2 under torchrun, whose agent dies of SIGUSR1 unless it ignores it,
    # and reports the workers' exit 3 as 1
    data = tmp_path / "c.zarr"
    assert main(["cosmoflow", "data", str(data), "--samples", "16", "--size", "16"]) == 0
    torchrun = Path(sys.prefix, "bin", "torchrun")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SLURM_"))}
    run = tmp_path / "run"
    command = [str(torchrun), "--standalone", "--nproc-per-node", "2", "--no-python"]
    command += [str(Path(sys.prefix, "bin", "sciml")), "cosmoflow", "train", str(data)]
    command += ["--run-dir", str(run), "--mesh", "depth=2", "--no-progress", "--epochs", "3"]
    command += ["--batch-size", "2", "--width", "4", "--levels", "2", "--workers", "0"]
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the launch is one process group
        preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_IGN),  # as `trap '' USR1`
    )
    deadline = time.monotonic() + 120
    while not (run / "metrics.csv").exists() or len(_steps(run)) < 4:
        assert time.monotonic() < deadline and proc.poll() is None, "training did not start"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGUSR1)  # what the agent's group gets: ignored
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    for pid in workers.stdout.split():  # torchrun starts each worker in a session of its own
        os.kill(int(pid), signal.SIGUSR1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "exitcode  : 3" in err, err[-2000:]
    assert "interrupted after" in out and (run / "requeue").exists()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "completed after 24 steps" in done.stdout, done.stderr[-2000:]
    assert not (run / "requeue").exists()
    assert len(_steps(run)) == 2 * 24
