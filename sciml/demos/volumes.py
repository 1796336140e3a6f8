"""``sciml demo`` section: CosmoFlow and the 3D U-Net trained from sharded files on 2 processes.

Writes a small cosmology set and a segmentation set, trains CosmoFlow and the
U-Net on ``depth=2`` (2 gloo processes, :func:`sciml.volumes.train.train_volumes`),
shows the logged global losses (a table and ``volumes/losses.png``) and the throughput per
rank (``perf.csv``), and
the planner's grid for one 512^3 CosmoFlow sample on 2,048 H100s (the
DESIGN.md command line of ``sciml spatial plan``), planned while the
processes train.
"""

from __future__ import annotations

import csv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sciml.demos import stop_if_interrupted
from sciml.distributed import spawn
from sciml.training import TrainConfig, TrainResult
from sciml.volumes.config import VolumeTraining
from sciml.volumes.data import write_cosmology, write_segmentation
from sciml.volumes.train import train_volumes

#: Sizes of the quick and the full section.
SIZES = {
    True: {"samples": 6, "size": 8, "epochs": 1, "width": 2, "levels": 1, "workers": 0},
    False: {"samples": 16, "size": 16, "epochs": 2, "width": 4, "levels": 2, "workers": 2},
}
#: The DESIGN.md plan: ``sciml spatial plan --model cosmoflow --shape 4x512x512x512
#: --world 2048 --memory 80GiB --profile h100``.
PLAN_SHAPE, PLAN_WORLD = (1, 4, 512, 512, 512), 2048
PERF = ("samples_per_s", "step_seconds", "stall_fraction", "peak_memory_mib", "bytes_read")
#: What each model minimises (:mod:`sciml.volumes.train`), for the figure's y axes.
LOSS_LABELS = {
    "cosmoflow": "MSE of the 4 parameters\n(scaled to [-1, 1], no unit)",
    "unet3d": "cross-entropy per voxel (nats)",
}


def _train_both(
    files: dict[str, str], folder: str, options: dict[str, VolumeTraining]
) -> list[TrainResult]:
    """Rank function: train each model on ``depth=2``; rank 0's results."""
    return [train_volumes(files[m], options[m], Path(folder) / m) for m in options]


def _data(folder: Path, *, samples: int, size: int) -> dict[str, str]:
    """The two data sets (reused when a previous run of the section wrote them)."""
    files = {}
    for model, write in (("cosmoflow", write_cosmology), ("unet3d", write_segmentation)):
        path = folder / f"{model}.zarr"
        if not path.exists():
            write(path, samples=samples, size=size, seed=0)
        files[model] = str(path)
    return files


def _options(*, epochs: int, width: int, levels: int, workers: int) -> dict[str, VolumeTraining]:
    config = TrainConfig(
        epochs=epochs, batch_size=2, seed=0, num_workers=workers, progress=False, tensorboard=False
    )
    return {
        "cosmoflow": VolumeTraining(
            "cosmoflow", mesh={"depth": 2}, config=config, lr=0.01, width=width, levels=levels
        ),
        "unet3d": VolumeTraining(
            "unet3d", mesh={"depth": 2}, config=config, lr=0.002, width=width, levels=levels
        ),
    }


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _losses(run_dir: Path, metric: str) -> str:
    from sciml.io_utils import markdown_table

    rows = [r for r in _csv(run_dir / "metrics.csv") if r["split"] in ("train_step", "epoch")]
    steps: dict[int, dict[str, str]] = {}
    for row in rows:
        name = row["metric"] if row["split"] == "train_step" else f"epoch {row['metric']}"
        steps.setdefault(int(row["step"]), {})[name] = f"{float(row['value']):.4g}"
    names = ["loss", metric, "epoch train_loss", f"epoch train_{metric}"]
    return markdown_table(
        ["step", *names], [[s, *(v.get(n, "") for n in names)] for s, v in sorted(steps.items())]
    )


def _figure(folder: Path) -> str:
    """The training loss of each model per step and per epoch -> ``folder/losses.png``."""
    from matplotlib.figure import Figure  # here: the training ranks import this module
    from matplotlib.ticker import MaxNLocator

    from sciml.demos.report import save_figure

    fig = Figure(figsize=(10, 3.6), layout="constrained")
    axes = fig.subplots(1, len(LOSS_LABELS))
    for ax, (model, label) in zip(axes, LOSS_LABELS.items(), strict=True):
        rows = _csv(folder / model / "metrics.csv")
        for split, metric, style, name in (
            ("train_step", "loss", ".-", "per step"),
            ("epoch", "train_loss", "o--", "epoch mean"),
        ):
            points = [
                (int(r["step"]), float(r["value"]))
                for r in rows
                if r["split"] == split and r["metric"] == metric
            ]
            ax.plot(*zip(*points, strict=True), style, label=f"train loss, {name}")
        ax.set(title=model, xlabel="optimiser step", ylabel=label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, folder, "losses.png")


def _perf(run_dir: Path) -> str:
    from sciml.io_utils import markdown_table

    rows = _csv(run_dir / "perf.csv")
    last = max(int(r["epoch"]) for r in rows)
    by_rank: dict[int, dict[str, float]] = {}
    for row in rows:
        if int(row["epoch"]) == last and row["metric"] in PERF:
            by_rank.setdefault(int(row["rank"]), {})[row["metric"]] = float(row["value"])
    return markdown_table(
        ["rank", *PERF],
        [[rank, *(f"{v[m]:.4g}" for m in PERF)] for rank, v in sorted(by_rank.items())],
    )


def _plan() -> str:
    from sciml.spatial_parallel.planner.plan import recommend

    plan = recommend("cosmoflow", PLAN_SHAPE, world=PLAN_WORLD, memory="80GiB", profile="h100")
    return plan.table(top=3)


def demo(outdir: Path, *, quick: bool = False) -> str:
    """Train both models on 2 processes under ``outdir/volumes``; return the Markdown section."""
    folder = Path(outdir) / "volumes"
    folder.mkdir(parents=True, exist_ok=True)
    size = SIZES[quick]
    files = _data(folder, samples=size["samples"], size=size["size"])
    options = _options(
        epochs=size["epochs"], width=size["width"], levels=size["levels"], workers=size["workers"]
    )
    with ThreadPoolExecutor(1) as pool:
        planned = pool.submit(_plan)  # the planner traces on the meta device meanwhile
        results: list[TrainResult] = spawn(_train_both, 2, files, str(folder), options)[0]
        table = planned.result()
    for result in results:
        stop_if_interrupted(result, "volumes")
    steps = results[0].global_step
    figure = _figure(folder)
    lines = [
        "## CosmoFlow and a 3D U-Net from sharded files",
        "",
        f"{size['samples']} volumes of {size['size']}^3 voxels per model (`sciml cosmoflow data`, "
        f"`sciml unet3d data`), each sample split along depth over 2 gloo processes (`--mesh "
        f"depth=2`): each rank reads only its block from the Zarr store. {steps} steps of 2 "
        "samples; the logged losses are the global ones (the U-Net's per-voxel loss summed "
        "over the two halves), as one process would log them.",
        "",
        f"![training losses](volumes/{figure})",
        "",
    ]
    _, channels, edge, _, _ = PLAN_SHAPE
    for model, metric in (("cosmoflow", "mae"), ("unet3d", "accuracy")):
        run_dir = folder / model
        lines += [f"**{model}** (`{run_dir.relative_to(outdir)}`)", "", _losses(run_dir, metric)]
        lines += ["", "Last epoch per rank (`perf.csv`):", "", _perf(run_dir), ""]
    lines += [
        f"The grid the planner recommends for one {edge}^3 CosmoFlow sample ({channels} "
        f"channels) on {PLAN_WORLD:,} H100s with 80 GiB each (`sciml spatial plan --model "
        f"cosmoflow --shape {'x'.join(map(str, PLAN_SHAPE[1:]))} --world {PLAN_WORLD} --memory "
        "80GiB --profile h100`; with one sample no grid with data > 1 can split the batch); "
        "`sciml cosmoflow train --mesh auto` trains on such a choice:",
        "",
        "```",
        table,
        "```",
    ]
    return "\n".join(lines)
