"""A small training run for the resume tests: python train_job.py RUN_DIR [--slow S].

Trains a tiny dropout MLP with ``sciml.training.fit`` and saves the final
weights to ``RUN_DIR/final.pt``. ``--slow`` sleeps in every step so that a
test can send SIGTERM mid-run. Exits with ``EXIT_REQUEUE`` when interrupted.
"""

import argparse
import sys
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

from sciml.training import EXIT_REQUEUE, TrainConfig, fit


def make_problem(seed: int = 0) -> tuple[nn.Module, TensorDataset, TensorDataset]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(40, 6, generator=generator)
    y = x @ torch.randn(6, 1, generator=generator) + 0.1 * torch.randn(40, 1, generator=generator)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
    return model, TensorDataset(x[:32], y[:32]), TensorDataset(x[32:], y[32:])


def mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--slow", type=float, default=0.0)
    args = parser.parse_args()
    model, train, val = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.5)

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        time.sleep(args.slow)
        return mse(model, batch)

    config = TrainConfig(epochs=6, batch_size=5, progress=False, tensorboard=False)
    result = fit(
        model, optimizer, train, loss_fn, run_dir=args.run_dir, config=config, val_dataset=val
    )
    if result.status == "interrupted":
        print(f"interrupted at step {result.global_step}", flush=True)
        sys.exit(EXIT_REQUEUE)
    torch.save(model.state_dict(), f"{args.run_dir}/final.pt")
