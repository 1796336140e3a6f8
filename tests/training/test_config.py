"""sciml.training.config.TrainConfig: every field checked when the configuration is made."""

import dataclasses

import pytest

from sciml.training.config import TrainConfig


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("epochs", 0, "epochs must be an integer >= 1"),
        ("epochs", 2.5, "epochs must be an integer"),
        ("batch_size", True, "batch_size must be an integer"),
        ("seed", -1, "seed must be an integer >= 0"),
        ("seed", 2**40, "seed must be < 2\\*\\*32"),
        ("num_workers", -1, "num_workers must be an integer >= 0"),
        ("checkpoint_every", 0, "checkpoint_every must be an integer >= 1 or None"),
        ("patience", 0, "patience must be an integer >= 1 or None"),
        ("shuffle", "yes", "shuffle must be True or False"),
        ("monitor", "", "monitor must be a metric name or None"),
        ("mode", "best", "mode must be one of \\('min', 'max'\\)"),
        ("min_delta", -0.1, "min_delta must be a finite number >= 0"),
        ("min_delta", float("nan"), "min_delta must be a finite number >= 0"),
        ("grad_clip", 0.0, "grad_clip must be a finite number > 0 or None"),
        ("scheduler_interval", "bogus", "scheduler_interval must be one of \\('epoch', 'step'\\)"),
    ],
)
def test_train_config_rejects_bad_values(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"TrainConfig.{message}"):
        TrainConfig(**{field: value})
    with pytest.raises(ValueError, match=f"TrainConfig.{message}"):
        dataclasses.replace(TrainConfig(), **{field: value})
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(TrainConfig(), field, value)  # would skip the checks
