"""The one training loop, :func:`fit`, and its parts.

Config, setup, batches, step, performance, checkpoints, the run log and the run
folder.
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.training.config import RESUMABLE_FIELDS, TrainConfig
    from sciml.training.loop import EXIT_REQUEUE, epoch_batches, fit, seed_everything
    from sciml.training.run_dir import RunDirError
    from sciml.training.setup import TrainResult

#: The module of each public name (imported on first use).
_HOMES = {
    "EXIT_REQUEUE": "loop",
    "RESUMABLE_FIELDS": "config",
    "RunDirError": "run_dir",
    "TrainConfig": "config",
    "TrainResult": "setup",
    "epoch_batches": "loop",
    "fit": "loop",
    "seed_everything": "loop",
}

__all__ = [
    "EXIT_REQUEUE",
    "RESUMABLE_FIELDS",
    "RunDirError",
    "TrainConfig",
    "TrainResult",
    "epoch_batches",
    "fit",
    "seed_everything",
]

make_lazy(__name__, _HOMES)
