"""sciml.training: exact resume, signals, early stop, data parallelism, bad inputs to fit."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from sciml.distributed import spawn
from sciml.training import (
    EXIT_REQUEUE,
    RunDirError,
    TrainConfig,
    TrainResult,
    fit,
)
from sciml.training.checkpoint import save_checkpoint
from sciml.training.runs.folder import RunLock
from sciml.training.runs.record import RunRecordError, read_run_record
from sciml.training.setup import TRAINING_RECORD
from tests.scripts.train_job import make_problem, mse

SCRIPT = Path(__file__).parents[1] / "scripts" / "train_job.py"
CONFIG = dict(epochs=4, batch_size=5, progress=False, tensorboard=False)


def _train(
    run_dir: Path,
    *,
    interrupt_at: int | None = None,
    preempt_after: int | None = None,
    **overrides: int | str,
) -> tuple[nn.Module, TrainResult]:
    model, train, val = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    calls = {"n": 0}

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == interrupt_at:
            os.kill(os.getpid(), signal.SIGUSR1)  # as Slurm does before the time limit
        return mse(model, batch)

    config = TrainConfig(**(CONFIG | overrides))
    result = fit(
        model,
        optimizer,
        train,
        loss_fn,
        run_dir=run_dir,
        config=config,
        val_dataset=val,
        scheduler=scheduler,
        preempt_after=preempt_after,
    )
    return model, result


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path: Path) -> None:
    reference, done = _train(tmp_path / "straight")
    assert done.status == "completed" and done.epoch == 4

    _, stopped = _train(tmp_path / "resumed", interrupt_at=11)  # 7 steps, 2 val calls, then
    assert stopped.status == "interrupted" and stopped.global_step == 9
    model, resumed = _train(tmp_path / "resumed")
    assert resumed.status == "completed" and resumed.global_step == done.global_step
    for (name, a), b in zip(
        reference.state_dict().items(), model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    assert _rows(tmp_path / "straight") == _rows(tmp_path / "resumed")
    assert resumed.history == done.history


def test_preempt_after_a_step_stops_there_and_the_resumed_run_matches(tmp_path: Path) -> None:
    reference, done = _train(tmp_path / "straight")
    _, stopped = _train(tmp_path / "resumed", preempt_after=6)
    assert stopped.status == "interrupted" and stopped.global_step == 6
    model, resumed = _train(tmp_path / "resumed", preempt_after=6)  # past step 6: no effect
    assert resumed.status == "completed" and resumed.global_step == done.global_step
    for (name, a), b in zip(
        reference.state_dict().items(), model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    assert _rows(tmp_path / "straight") == _rows(tmp_path / "resumed")
    _, unhandled = _train(tmp_path / "unhandled", preempt_after=2, handle_signals=False)
    assert unhandled.status == "interrupted" and unhandled.global_step == 2  # an explicit request
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="preempt_after must be an integer >= 1 or None"):
            _train(tmp_path / "bad", preempt_after=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "bad").exists()


def test_metrics_csv_and_best_checkpoint(tmp_path: Path) -> None:
    _, result = _train(tmp_path)
    rows = _rows(tmp_path)
    steps = [r for r in rows if r["split"] == "train_step"]
    assert len(steps) == result.global_step == 4 * 7  # 32 samples in batches of 5
    epochs = {(r["epoch"], r["metric"]) for r in rows if r["split"] == "epoch"}
    assert {("0", "train_loss"), ("0", "val_loss"), ("3", "lr")} <= epochs
    val = [float(r["value"]) for r in rows if r["metric"] == "val_loss"]
    assert result.best == min(val)
    assert (tmp_path / "checkpoints" / "best.pt").exists()
    assert [h["val_loss"] for h in result.history] == val


def test_early_stop_after_patience(tmp_path: Path) -> None:
    # val_loss falls every epoch, so in "max" mode it never improves after epoch 1
    _, result = _train(tmp_path, epochs=10, patience=2, mode="max")
    assert result.status == "early_stopped"
    assert result.epoch == 3


def test_sigterm_from_outside_checkpoints_and_resume_matches(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    subprocess.run([sys.executable, str(SCRIPT), str(straight)], check=True, timeout=120)
    resumed = tmp_path / "resumed"
    proc = subprocess.Popen(
        # slow enough that it still trains while this process tries the same run folder
        [sys.executable, str(SCRIPT), str(resumed), "--slow", "0.3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    metrics = resumed / "metrics.csv"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not metrics.exists() or len(_rows(resumed)) < 8):
        time.sleep(0.05)
    with pytest.raises(RunDirError, match=f"in use by another training run \\(pid {proc.pid} "):
        _train(resumed)  # a second process must not write the same run folder (checked below)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_REQUEUE, out
    assert "interrupted at step" in out
    subprocess.run([sys.executable, str(SCRIPT), str(resumed)], check=True, timeout=120)
    a = torch.load(straight / "final.pt", weights_only=True)
    b = torch.load(resumed / "final.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_non_finite_loss_is_reported(tmp_path: Path) -> None:
    model, train, _ = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(FloatingPointError, match="loss is nan at epoch 0, step 0"):
        fit(
            model,
            optimizer,
            train,
            lambda m, b: mse(m, b) * float("nan"),
            run_dir=tmp_path,
            config=TrainConfig(**CONFIG),
        )


def test_a_non_finite_validation_loss_stops_the_run_with_its_epoch_and_folder(
    tmp_path: Path,
) -> None:
    model, train, val = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    evaluations = {"n": 0}

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        loss = mse(model, batch)
        if not model.training:  # validation: finite at epoch 0, nan from epoch 1 on
            evaluations["n"] += 1
            if evaluations["n"] > 2:  # 8 validation samples in 2 batches of 5 per epoch
                return loss * float("nan")
        return loss

    run = tmp_path / "run"
    with pytest.raises(FloatingPointError) as caught:
        fit(
            model,
            optimizer,
            train,
            loss_fn,
            run_dir=run,
            config=TrainConfig(**CONFIG),
            val_dataset=val,
        )
    assert f"val_loss is nan at epoch 1 of the run in {run}" in str(caught.value)
    # the nan epoch is neither logged nor kept: best.pt is the finite epoch 0
    logged = [row for row in _rows(run) if row["metric"] == "val_loss"]
    assert [row["epoch"] for row in logged] == ["0"]
    best = torch.load(run / "checkpoints" / "best.pt", weights_only=True)["state"]
    assert best["epoch"] == 1 and best["best"] == float(logged[0]["value"])


def _train_ddp(run_dir: str) -> dict[str, torch.Tensor]:
    model, train, _ = make_problem()
    model[2].p = 0.0  # dropout draws differ between replicas; switch it off
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    fit(
        ddp,
        optimizer,
        train,
        mse,
        run_dir=run_dir,
        config=TrainConfig(**(CONFIG | {"batch_size": 4})),
    )
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_two_data_parallel_replicas_match_one_process(tmp_path: Path) -> None:
    model, train, _ = make_problem()
    model[2].p = 0.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    fit(
        model,
        optimizer,
        train,
        mse,
        run_dir=tmp_path / "single",
        config=TrainConfig(**(CONFIG | {"batch_size": 8})),
    )
    weights = spawn(_train_ddp, 2, str(tmp_path / "ddp"))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(weights[0][name], value, rtol=1e-5, atol=1e-6)
        assert torch.equal(weights[0][name], weights[1][name])


def test_tensorboard_events_when_installed(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    _train(tmp_path, epochs=1, tensorboard=True)
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 100


def _epoch_rows(run_dir: Path) -> list[dict[str, str]]:
    return [r for r in _rows(run_dir) if r["split"] == "epoch"]


#: Per (global step, rank) values whose epoch sum rounds differently when the ranks'
#: partial sums are added together at a checkpoint (step 8) and the rest later.
PROBE = {(7, 0): 1.0, (9, 0): 1.0, (7, 1): 2.0**-52, (9, 1): 3 * 2.0**-54}


def _train_ddp_interrupted(run_dir: str, interrupt_at: int | None, first_step: int = 1) -> str:
    """2-replica DDP run of 5 epochs of 6 steps; rank 0 gets SIGUSR1 at step ``interrupt_at``."""
    model, train, _ = make_problem()
    model[2].p = 0.0
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    calls = {"n": first_step - 1}

    def loss_fn(
        model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        calls["n"] += 1
        rank = torch.distributed.get_rank()
        if calls["n"] == interrupt_at and rank == 0:
            os.kill(os.getpid(), signal.SIGUSR1)
        probe = torch.tensor(PROBE.get((calls["n"], rank), 0.0), dtype=torch.float64)
        return {"loss": mse(model, batch), "probe": probe}

    config = TrainConfig(**(CONFIG | {"epochs": 5, "batch_size": 3}))
    return fit(ddp, optimizer, train, loss_fn, run_dir=run_dir, config=config).status


def _straight_interrupted_resumed(tmp: str) -> list[str]:
    # 16 samples per replica in batches of 3: step 8 is the second step of epoch 1
    statuses = [
        _train_ddp_interrupted(f"{tmp}/straight", None),
        _train_ddp_interrupted(f"{tmp}/resumed", 8),
        _train_ddp_interrupted(f"{tmp}/resumed", None, first_step=9),
    ]
    # then another process (rank 1 here) holds a run folder that rank 0 must lock
    lock = RunLock(Path(tmp))
    if torch.distributed.get_rank() == 1:
        lock.acquire()
    torch.distributed.barrier()
    try:
        _train_ddp_interrupted(f"{tmp}", None)
    except RunDirError as err:
        statuses.append(str(err))
    torch.distributed.barrier()
    lock.release()
    return statuses


def test_data_parallel_resume_mid_epoch_logs_the_uninterrupted_losses(tmp_path: Path) -> None:
    statuses = spawn(_straight_interrupted_resumed, 2, str(tmp_path))
    assert [s[:3] for s in statuses] == [["completed", "interrupted", "completed"]] * 2
    # every rank stops when rank 0 cannot lock the run folder (no hang in a collective)
    assert "in use by another training run (pid " in statuses[0][3]
    assert "rank 0 could not lock" in statuses[1][3]
    assert not (tmp_path / "metrics.csv").exists()
    assert len(_epoch_rows(tmp_path / "straight")) == 15  # train_loss, train_probe, lr x 5
    # each rank resumes its own running sums: the epoch's reduction rounds as without a stop
    assert _epoch_rows(tmp_path / "resumed") == _epoch_rows(tmp_path / "straight")
    assert _rows(tmp_path / "resumed") == _rows(tmp_path / "straight")


def test_monitor_that_is_never_logged_is_an_error_before_anything_is_written(
    tmp_path: Path,
) -> None:
    model, train, val = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    run = tmp_path / "run"
    # fit logs train_loss, not loss: the mistake that left a run without best.pt
    with pytest.raises(ValueError, match="monitor='loss' is never logged: fit logs 'train_<name>'"):
        fit(model, optimizer, train, mse, run_dir=run, config=TrainConfig(monitor="loss", **CONFIG))
    with pytest.raises(ValueError, match="monitor='val_loss' is never logged(.|\n)*no val_dataset"):
        fit(
            model,
            optimizer,
            train,
            mse,
            run_dir=run,
            config=TrainConfig(monitor="val_loss", **CONFIG),
        )
    assert not run.exists()
    # a plausible name that loss_fn never returns: caught at the end of the first epoch
    with pytest.raises(ValueError, match=r"'train_rmse' is not among(.|\n)*\['lr', 'train_loss'"):
        fit(
            model,
            optimizer,
            train,
            mse,
            run_dir=run,
            config=TrainConfig(monitor="train_rmse", **CONFIG),
        )
    assert not (run / "checkpoints" / "last.pt").exists()


def test_default_monitor_follows_the_validation_set(tmp_path: Path) -> None:
    _, with_val = _train(tmp_path / "val")
    assert with_val.best == min(h["val_loss"] for h in with_val.history)
    model, train, _ = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    result = fit(
        model, optimizer, train, mse, run_dir=tmp_path / "train", config=TrainConfig(**CONFIG)
    )
    assert result.best == min(h["train_loss"] for h in result.history)
    assert (tmp_path / "train" / "checkpoints" / "best.pt").exists()


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def test_resuming_with_another_configuration_is_refused_untouched(tmp_path: Path) -> None:
    _train(tmp_path, epochs=1)
    before = _snapshot(tmp_path)
    model, train, val = make_problem()

    def attempt(**changes: Any) -> None:
        net = changes.pop("model", model)
        optimizer = changes.pop("optimizer", None) or torch.optim.SGD(
            net.parameters(), lr=changes.pop("lr", 0.02), momentum=0.5
        )
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        fit(
            net,
            optimizer,
            changes.pop("train", train),
            mse,
            run_dir=tmp_path,
            config=TrainConfig(**(CONFIG | changes)),
            val_dataset=val,
            scheduler=scheduler,
        )

    cases = {
        "batch_size: 5 in the run, 8 now": dict(batch_size=8),
        "param_groups\\[0\\].lr: 0.02 in the run, 0.1 now": dict(lr=0.1),
        "optimizer: 'SGD' in the run, 'Adam' now": dict(
            optimizer=torch.optim.Adam(model.parameters(), lr=0.02)
        ),
        "train_samples: 32 in the run, 30 now": dict(
            train=torch.utils.data.Subset(train, range(30))
        ),
        "parameters.0.weight: \\[16, 6\\] in the run, \\[8, 6\\] now": dict(
            model=nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))
        ),
    }
    for message, changes in cases.items():
        with pytest.raises(RunDirError, match=f"another configuration(.|\n)*{message}"):
            attempt(**changes)
    with pytest.raises(RunDirError, match="nothing was written: give this run another run_dir"):
        attempt(batch_size=8)
    assert _snapshot(tmp_path) == before
    # more epochs is a resume, not a new run; resume=False starts over
    _, more = _train(tmp_path, epochs=2)
    assert more.epoch == 2 and len(more.history) == 2


def test_a_run_stopped_before_its_first_checkpoint_keeps_its_configuration(
    tmp_path: Path,
) -> None:
    """training_run.json is written before the first step: a folder without a checkpoint
    (a run killed in its first epoch) is not taken over by another configuration."""
    _train(tmp_path, epochs=1)
    for checkpoint in (tmp_path / "checkpoints").iterdir():
        checkpoint.unlink()
    before = _snapshot(tmp_path)
    assert read_run_record(tmp_path, TRAINING_RECORD)["config"]["batch_size"] == 5
    with pytest.raises(RunRecordError, match="batch_size: 5 in the run, 8 now(.|\n)*resume=False"):
        _train(tmp_path, epochs=1, batch_size=8)
    assert _snapshot(tmp_path) == before
    _train(tmp_path, epochs=1)  # the same configuration starts again
    model, train, _ = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    config = TrainConfig(**(CONFIG | {"batch_size": 8, "epochs": 1}))
    fit(model, optimizer, train, mse, run_dir=tmp_path, config=config, resume=False)
    assert read_run_record(tmp_path, TRAINING_RECORD)["config"]["batch_size"] == 8


def test_a_folder_with_the_callers_record_gets_none_from_fit_and_refuses_another_run(
    tmp_path: Path,
) -> None:
    model, train, _ = make_problem()
    config = TrainConfig(**(CONFIG | {"epochs": 1}))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    fit(model, optimizer, train, mse, run_dir=tmp_path, config=config, record=False)
    assert not (tmp_path / TRAINING_RECORD.file).exists()
    before = _snapshot(tmp_path)
    other = TrainConfig(**(CONFIG | {"epochs": 2, "batch_size": 8}))
    with pytest.raises(RunDirError, match="written by a run with another configuration"):
        fit(model, optimizer, train, mse, run_dir=tmp_path, config=other, record=False)
    assert _snapshot(tmp_path) == before


def test_resuming_a_checkpoint_not_written_by_fit_is_refused(tmp_path: Path) -> None:
    model, _, _ = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.5)
    save_checkpoint(
        tmp_path / "checkpoints" / "last.pt", model, optimizer=optimizer, state={"step": 3}
    )
    with pytest.raises(RunDirError, match="not written by sciml.training.fit"):
        _train(tmp_path)


def test_resuming_a_longer_run_with_fewer_epochs_is_refused(tmp_path: Path) -> None:
    _train(tmp_path, epochs=2)
    with pytest.raises(RunDirError, match="already trained 2 epochs, more than .*epochs=1"):
        _train(tmp_path, epochs=1)


def test_bad_fit_inputs_give_clear_errors_before_writing(tmp_path: Path) -> None:
    model, train, val = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    run = tmp_path / "run"
    config = TrainConfig(**CONFIG)

    def call(**kwargs: Any) -> None:
        args = dict(model=model, optimizer=optimizer, train_dataset=train, loss_fn=mse) | kwargs
        fit(
            args.pop("model"),
            args.pop("optimizer"),
            args.pop("train_dataset"),
            args.pop("loss_fn"),
            run_dir=run,
            **({"config": config} | args),
        )

    empty = torch.utils.data.Subset(train, [])
    with pytest.raises(ValueError, match="train_dataset is empty"):
        call(train_dataset=empty)
    with pytest.raises(ValueError, match="val_dataset is empty"):
        call(val_dataset=empty)
    with pytest.raises(TypeError, match="train_dataset must be a map-style dataset"):
        call(train_dataset=iter([]))
    with pytest.raises(ValueError, match="batch_size=64 with drop_last=True leaves no batch"):
        call(config=TrainConfig(**(CONFIG | {"batch_size": 64, "drop_last": True})))
    for bad in ((2, 2), (-1, 2), (0, 0), (0, 1, 2), (0.0, 1)):
        with pytest.raises(ValueError, match="replica must be \\(index, count\\)"):
            call(replica=bad)
    with pytest.raises(ValueError, match="the 2 replicas must divide the 1 ranks"):
        call(replica=(0, 2))
    other = nn.Linear(6, 1)
    with pytest.raises(ValueError, match="optimiser holds 2 parameter\\(s\\) that are not"):
        call(optimizer=torch.optim.SGD(other.parameters(), lr=0.1))
    stray = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(model.parameters()), step_size=1)
    with pytest.raises(ValueError, match="scheduler was built for another optimiser"):
        call(scheduler=stray)
    with pytest.raises(ValueError, match="has no parameters"):
        call(model=nn.ReLU())
    with pytest.raises(TypeError, match="config must be a TrainConfig"):
        call(config={"epochs": 1})
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        call(loss_fn="mse")
    assert not run.exists()
    with pytest.raises(ValueError, match="one-element tensors; got shapes"):
        call(loss_fn=lambda m, b: (m(b[0]) - b[1]) ** 2)
    with pytest.raises(TypeError, match="dict with a 'loss' entry, got \\['mse'\\]"):
        call(loss_fn=lambda m, b: {"mse": mse(m, b)})
    assert not (run / "checkpoints" / "last.pt").exists()


def test_batch_larger_than_the_dataset_is_one_short_batch(tmp_path: Path) -> None:
    model, train, _ = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    result = fit(
        model,
        optimizer,
        train,
        mse,
        run_dir=tmp_path,
        config=TrainConfig(**(CONFIG | {"batch_size": 100, "epochs": 2})),
    )
    assert result.global_step == 2


def test_loss_fn_must_return_the_same_names_every_batch(tmp_path: Path) -> None:
    model, train, val = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    calls = {"n": 0}

    def changing(
        model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        calls["n"] += 1
        return {"loss": mse(model, batch)} | (
            {"extra": torch.tensor(1.0)} if calls["n"] > 1 else {}
        )

    with pytest.raises(ValueError, match=r"returned \['extra', 'loss'\] at step 1 but \['loss'\]"):
        fit(model, optimizer, train, changing, run_dir=tmp_path, config=TrainConfig(**CONFIG))


def test_loss_fn_must_return_the_same_names_on_every_validation_batch(tmp_path: Path) -> None:
    model, train, val = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    calls = {"n": 0}

    def changing(
        model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        calls["n"] += 0 if model.training else 1
        extra = {"extra": torch.tensor(1.0)} if calls["n"] > 1 else {}
        return {"loss": mse(model, batch)} | extra

    with pytest.raises(
        ValueError, match=r"returned \['extra', 'loss'\] on a validation batch but \['loss'\]"
    ):
        fit(
            model,
            optimizer,
            train,
            changing,
            run_dir=tmp_path,
            config=TrainConfig(**CONFIG),
            val_dataset=val,
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_resume_on_a_gpu_equals_uninterrupted(tmp_path: Path) -> None:
    # read with map_location="cuda", the generator states used to land on the GPU
    def run(run_dir: Path, interrupt_at: int | None = None) -> tuple[nn.Module, TrainResult]:
        model, train, val = make_problem()
        model.cuda()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        calls = {"n": 0}

        def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            calls["n"] += 1
            if calls["n"] == interrupt_at:
                os.kill(os.getpid(), signal.SIGUSR1)
            assert batch[0].is_cuda
            return mse(model, batch)

        result = fit(
            model,
            optimizer,
            train,
            loss_fn,
            run_dir=run_dir,
            config=TrainConfig(**CONFIG),
            val_dataset=val,
        )
        return model, result

    reference, done = run(tmp_path / "straight")
    assert run(tmp_path / "resumed", interrupt_at=11)[1].status == "interrupted"
    model, resumed = run(tmp_path / "resumed")
    assert resumed.history == done.history
    for a, b in zip(reference.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
