"""The driver of the training loop: K >= 1 runs trained to their end in lockstep.

:func:`drive` trains its runs (:class:`Run`), each a :class:`~sciml.training.trainer.RunTrainer`
(its named steps) with its status and, among several, its own random state (Python's,
NumPy's, torch's), swapped in around everything it does so that a dataset's random draws
are those of the separate run. Epoch after epoch, the runs still training take their steps
in lockstep; the step's forward and backward pass is the seam (:data:`Step`): a run's own
:class:`~sciml.training.step.StepRunner` (:func:`own_step`, :func:`sciml.training.fit`'s
K = 1) or one batched pass for all (:func:`~sciml.training.fused.fused_backward`,
:func:`sciml.training.fit_fused`). A run that ended before a resume (its last epoch done,
or stopped early) stays ended; a run that stops early leaves the others training; a
signal stops every run after the same step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sciml.distributed import PreemptionFlag
from sciml.training.checkpoint import get_rng_state, set_rng_state
from sciml.training.setup import Status, TrainResult
from sciml.training.trainer import RunTrainer, SharedStop

__all__ = ["Run", "Step", "drive", "own_step"]

#: The seam of the driver: given the runs training this epoch, the step that
#: back-propagates each run's batch parts (and their sizes) and returns each run's values.
Step = Callable[
    [Sequence[RunTrainer], Sequence[tuple[list[Any], list[int]]]], list[dict[str, float]]
]


def own_step(active: list[RunTrainer]) -> Step:
    """One run's step, its own :class:`~sciml.training.step.StepRunner` (``fit``)."""

    def step(
        trainers: Sequence[RunTrainer], steps: Sequence[tuple[list[Any], list[int]]]
    ) -> list[dict[str, float]]:
        (trainer,), ((parts, sizes),) = trainers, steps
        return [trainer.runner.backward(parts, sizes, where=trainer.where())]

    return step


class Run:
    """One run of the driver: its trainer, its status and (among several) its own random state."""

    def __init__(self, trainer: RunTrainer, *, swap: bool) -> None:
        """``trainer``, just built (seeded or resumed); ``swap``: keep its own random state."""
        self.trainer = trainer
        self.rng = get_rng_state() if swap else None  # as the trainer just left it
        self.status: Status | None = trainer.ended()  # a run that ended stays ended

    @contextmanager
    def own_rng(self) -> Iterator[None]:
        """Run the block with this run's random state, and keep what it leaves."""
        if self.rng is None:
            yield
            return
        set_rng_state(self.rng)
        try:
            yield
        finally:
            self.rng = get_rng_state()


def _train_epoch(runs: list[Run], step: Step, stop: SharedStop) -> bool:
    """The runs' current epoch in lockstep; false if a signal stopped them."""
    pending, steps, finished = {}, {}, {}
    for k, run in enumerate(runs):
        with run.own_rng():
            pending[k] = run.trainer.epoch_steps(stop)
            try:
                steps[k] = next(pending[k])
            except StopIteration as done:  # resumed at the end of its epoch
                finished[k] = bool(done.value)
    while steps and not finished:
        if len({tuple(sizes) for _, sizes in steps.values()}) != 1:
            raise RuntimeError("fused runs reached steps of different sizes")
        values = step([run.trainer for run in runs], [steps[k] for k in range(len(runs))])
        stop.next_step()
        for k, run in enumerate(runs):
            with run.own_rng():
                try:
                    steps[k] = pending[k].send(values[k])
                except StopIteration as done:
                    finished[k] = bool(done.value)
                    del steps[k]
    if steps:
        raise RuntimeError("fused runs ended an epoch at different steps")
    return all(finished.values())


def drive(
    runs: list[Run],
    make_step: Callable[[list[RunTrainer]], Step],
    *,
    handle_signals: bool,
) -> list[TrainResult]:
    """Train K >= 1 runs to their end (the module docstring); what each did.

    Args:
        runs: The runs, each built (seeded, resumed) and its folder held.
        make_step: The seam: makes the step of the runs training an epoch.
        handle_signals: Checkpoint and return on SIGTERM/SIGUSR1.
    """
    places = {(r.trainer.state.epoch, r.trainer.state.step_in_epoch) for r in runs if not r.status}
    if len(places) > 1:
        raise ValueError(
            f"the runs' checkpoints are at different steps ({sorted(places)} as (epoch, step)): "
            "fused runs resume together; resume each with fit"
        )
    for run in runs:
        with run.own_rng():
            run.trainer.started()
    try:
        with PreemptionFlag(handle_signals) as flag:
            stop = SharedStop(flag)
            while active := [run for run in runs if run.status is None]:
                if active[0].trainer.state.epoch >= active[0].trainer.s.config.epochs:
                    for run in active:
                        run.status = "completed"
                elif not _train_epoch(active, make_step([r.trainer for r in active]), stop):
                    for run in active:
                        run.status = "interrupted"
                else:
                    for run in active:
                        with run.own_rng():
                            if run.trainer.end_of_epoch():
                                run.status = "early_stopped"
    finally:
        for run in runs:
            run.trainer.close()
    return [run.trainer.finished(run.status or "interrupted") for run in runs]
