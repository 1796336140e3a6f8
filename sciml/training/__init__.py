"""The one training loop, :func:`fit`, and its parts.

Config, setup, batches, step, performance, checkpoints, the run log, the run folder
and its record (:mod:`sciml.training.runs`); :func:`fit_fused` trains several runs of one
small model as one (:class:`FusedModels`, a sweep: :mod:`sciml.training.sweeps`), with
the driver that :func:`fit` runs for one.
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.training.config import TrainConfig
    from sciml.training.fused import FusedModels
    from sciml.training.loop import EXIT_REQUEUE, fit, fit_fused
    from sciml.training.runs.record import RESUMABLE_FIELDS, RunDirError
    from sciml.training.setup import TrainResult
    from sciml.training.trainer import epoch_batches, seed_everything

#: The module of each public name (imported on first use).
_HOMES = {
    "EXIT_REQUEUE": "loop",
    "FusedModels": "fused",
    "RESUMABLE_FIELDS": "runs.record",
    "RunDirError": "runs.record",
    "TrainConfig": "config",
    "TrainResult": "setup",
    "epoch_batches": "trainer",
    "fit": "loop",
    "fit_fused": "loop",
    "seed_everything": "trainer",
}

__all__ = [
    "EXIT_REQUEUE",
    "RESUMABLE_FIELDS",
    "FusedModels",
    "RunDirError",
    "TrainConfig",
    "TrainResult",
    "epoch_batches",
    "fit",
    "fit_fused",
    "seed_everything",
]

make_lazy(__name__, _HOMES)
