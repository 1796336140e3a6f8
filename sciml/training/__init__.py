"""The one training loop, :func:`fit`, and its parts.

Config, setup, batches, step, performance, checkpoints, the run log and the run
folder; :func:`fit_fused` trains several runs of one small model as one
(:class:`FusedModels`).
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.training.config import TrainConfig
    from sciml.training.fused import FusedModels
    from sciml.training.fused_loop import fit_fused
    from sciml.training.loop import EXIT_REQUEUE, epoch_batches, fit, seed_everything
    from sciml.training.runs.record import RESUMABLE_FIELDS, RunDirError
    from sciml.training.setup import TrainResult

#: The module of each public name (imported on first use).
_HOMES = {
    "EXIT_REQUEUE": "loop",
    "FusedModels": "fused",
    "RESUMABLE_FIELDS": "runs.record",
    "RunDirError": "runs.record",
    "TrainConfig": "config",
    "TrainResult": "setup",
    "epoch_batches": "loop",
    "fit": "loop",
    "fit_fused": "fused_loop",
    "seed_everything": "loop",
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
