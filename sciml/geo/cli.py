"""``sciml geo ...``: road masks, tree labels, training and scene-wide prediction.

Handlers parse, check the numeric options against each other before any
work (tile and overlap, tile and U-Net depth, bounds; ``geo train``'s options are
generated from :class:`~sciml.geo.config.SegmenterConfig`, which checks them), refuse output paths
that are (or lie inside) one of the command's inputs, and existing outputs
without ``--overwrite`` (:func:`sciml.geo.outputs.check_outputs`), call the
library and print. ``geo train`` seeds every generator before it builds the
model, so that ``--seed`` reproduces a run, and records the training image's
pixel scaling in the run folder; ``geo predict`` reads the image in those
units or refuses it. ``geo train`` checkpoints and exits with
:data:`sciml.training.EXIT_REQUEUE` on SIGTERM/SIGUSR1; the same command
run again resumes (a run folder is never refused for existing).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from sciml.cli_args import (
    Subparsers,
    add_config_arguments,
    config_from_args,
    finite_float,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from sciml.geo.config import SegmenterConfig, check_tiles


def _width(text: str) -> float | str:
    if text == "osm":
        return text
    try:
        return positive_float(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"width must be 'osm' or metres (a number > 0), got {text!r}"
        ) from None


def _classes(text: str) -> list[str] | str:
    if text == "all":
        return text
    classes = [c.strip() for c in text.split(",") if c.strip()]
    if not classes:
        raise argparse.ArgumentTypeError(f"expected highway classes or 'all', got {text!r}")
    return classes


def _cmd_mask(args: argparse.Namespace) -> int:
    from sciml.geo import ROAD_CLASSES, load_roads, write_road_mask
    from sciml.geo.outputs import check_outputs

    check_outputs(
        {"out": args.out}, {"roads": args.roads, "like": args.like}, overwrite=args.overwrite
    )
    if args.classes is None:
        classes: Sequence[str] | None = ROAD_CLASSES
    else:
        classes = None if args.classes == "all" else args.classes
    roads = load_roads(args.roads, classes=classes)
    path = write_road_mask(
        roads,
        args.like,
        args.out,
        width=args.width,
        margin=args.margin,
        all_touched=args.all_touched,
        num_workers=args.workers,
        progress=True,
    )
    print(f"road mask ({len(roads)} roads): {path}")
    return 0


def _cmd_labels(args: argparse.Namespace) -> int:
    import numpy as np

    from sciml.geo.outputs import check_outputs
    from sciml.geo.rasters import read_mask, write_geotiff
    from sciml.geo.trees import IGNORE_INDEX, load_trees, tree_labels

    inputs = {"trees": args.trees, "like": args.like, "--mask": args.mask}
    check_outputs({"out": args.out}, inputs, overwrite=args.overwrite)
    mask = None if args.mask is None else read_mask(args.mask, like=args.like)
    trees = load_trees(args.trees, crs=args.crs, like=args.like)
    labels = tree_labels(trees, args.like, mask=mask)
    path = write_geotiff(labels, args.out, nodata=IGNORE_INDEX if mask is not None else None)
    print(f"tree labels ({len(trees)} trees, {int(np.sum(labels.values == 1))} crown px): {path}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from sciml.distributed import PreemptionFlag
    from sciml.geo.outputs import check_outputs

    config = config_from_args(SegmenterConfig, args)
    inputs = {"image": args.image, "mask": args.mask, "labels": args.labels}
    check_outputs({"--run-dir": args.run_dir}, inputs, overwrite=None)
    with PreemptionFlag():  # a signal while the data load stops training after its first step
        return _train(args, config)


def _train(args: argparse.Namespace, config: SegmenterConfig) -> int:
    from sciml.geo.rasters import read_image, read_labels, read_mask
    from sciml.geo.tiles import SceneTiles
    from sciml.geo.training import train_segmenter
    from sciml.training import EXIT_REQUEUE

    image = read_image(args.image)
    mask = read_mask(args.mask, like=image)
    labels = read_labels(args.labels, like=image)
    try:
        dataset = SceneTiles(image, mask, labels, tile=config.tile, overlap=config.overlap)
    except ValueError as err:
        raise ValueError(
            f"image {args.image}, mask {args.mask}, labels {args.labels}: {err}"
        ) from None
    result = train_segmenter(dataset, config, args.run_dir, progress=True)
    if result.status == "interrupted":
        print(
            f"interrupted at epoch {result.epoch + 1}, step {result.global_step}; checkpoint "
            f"{result.checkpoint}: run the same command again to resume"
        )
        return EXIT_REQUEUE
    print(f"trained {result.epoch} epoch(s) on {len(dataset)} tiles: {result.run_dir}")
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    from sciml.geo.outputs import check_outputs
    from sciml.geo.rasters import read_image, read_mask, write_geotiff
    from sciml.geo.tiles import predict_scene
    from sciml.geo.training import load_segmenter, run_pixel_scaling

    inputs = {"image": args.image, "--mask": args.mask, "--run-dir": args.run_dir}
    check_outputs({"out": args.out}, inputs, overwrite=args.overwrite)
    model = load_segmenter(args.run_dir, checkpoint=args.checkpoint)
    check_tiles(
        args.tile, args.overlap, model.config["depth"], depth_from="the depth of --run-dir's U-Net"
    )
    scaling = run_pixel_scaling(args.run_dir)
    image = read_image(args.image)
    scaling.conform(image, name=f"image {args.image}")  # refused here, naming the file
    if image.attrs.get("nodata") is None and scaling.nodata is not None:
        print(
            f"image {args.image} declares no nodata: using the training image's {scaling.nodata:g}"
        )
    mask = None if args.mask is None else read_mask(args.mask, like=image)
    probability = predict_scene(
        model, image, mask, tile=args.tile, overlap=args.overlap, scaling=scaling
    )
    path = write_geotiff(probability, args.out, nodata=float("nan"))
    print(f"tree probability: {path}")
    return 0


def _cmd_scene(args: argparse.Namespace) -> int:
    from sciml.datasets import sample_path
    from sciml.geo.outputs import check_outputs
    from sciml.geo.rasters import write_geotiff, write_vector
    from sciml.geo.scene import synthesize_scene

    bounds = tuple(args.bounds) if args.bounds else None
    if bounds and (bounds[0] >= bounds[2] or bounds[1] >= bounds[3]):
        raise ValueError(f"--bounds needs L < R and B < T, got {bounds}")
    osm = sample_path("helsinki_osm") if args.osm is None else Path(args.osm)
    out = Path(args.out)
    files = {f"out/{name}": out / name for name in _SCENE_FILES}
    check_outputs({"out": out}, {"--osm": osm}, overwrite=None)
    check_outputs(files, {"--osm": osm}, overwrite=args.overwrite)
    scene = synthesize_scene(osm, resolution=args.resolution, bounds=bounds, seed=args.seed)
    write_geotiff(scene.image, out / "image.tif")
    write_geotiff(scene.truth, out / "truth.tif")
    write_vector(scene.trees, out / "trees.gpkg", layer="trees")
    write_vector(scene.inventory, out / "inventory.gpkg", layer="inventory")
    print(
        f"scene {scene.image.shape[1:]} px, {len(scene.trees)} trees "
        f"({len(scene.inventory)} in the inventory): {out}"
    )
    return 0


#: Files that ``geo scene`` writes into its output folder.
_SCENE_FILES = ("image.tif", "truth.tif", "trees.gpkg", "inventory.gpkg")


def _add_overwrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite", action="store_true", help="replace existing outputs (never an input)"
    )


def _add_mask(sub: Subparsers) -> None:
    mask = sub.add_parser("mask", help="road mask GeoTIFF on a reference raster's grid")
    mask.add_argument("roads", help="roads: .osm, .osm.bz2, .osm.pbf, .gpkg or .geojson")
    mask.add_argument("like", help="reference raster (its grid and CRS)")
    mask.add_argument("out", help="output GeoTIFF (1 = road)")
    mask.add_argument("--width", type=_width, default="osm", help="'osm' (from the tags) or metres")
    mask.add_argument(
        "--margin", type=non_negative_float, default=0.0, help="extra metres each side"
    )
    mask.add_argument("--all-touched", action="store_true", help="burn every touched pixel")
    mask.add_argument(
        "--classes",
        type=_classes,
        help="comma-separated highway classes, or 'all'; unset: sciml.geo.ROAD_CLASSES",
    )
    mask.add_argument("--workers", type=positive_int, help="threads; unset: all cores")
    _add_overwrite(mask)
    mask.set_defaults(func=_cmd_mask)


def _add_labels(sub: Subparsers) -> None:
    labels = sub.add_parser("labels", help="tree-crown label GeoTIFF (255 off the mask)")
    labels.add_argument("trees", help="inventory: .csv, .geojson, .gpkg or OSM natural=tree")
    labels.add_argument("like", help="reference raster")
    labels.add_argument("out", help="output GeoTIFF")
    labels.add_argument("--mask", help="road-mask GeoTIFF on the raster's grid; 255 outside it")
    labels.add_argument("--crs", help="CRS of CSV coordinates, or 'pixel' for the raster's")
    _add_overwrite(labels)
    labels.set_defaults(func=_cmd_labels)


def _add_train(sub: Subparsers) -> None:
    train = sub.add_parser(
        "train",
        help="train the masked U-Net on image, mask and labels (exit 3 after a checkpoint "
        "on SIGTERM/SIGUSR1; rerun to resume)",
    )
    train.add_argument("image", help="image GeoTIFF")
    train.add_argument("mask", help="mask GeoTIFF on the image's grid (1 = labels complete)")
    train.add_argument("labels", help="label GeoTIFF on the image's grid (0, 1, 255 = unknown)")
    train.add_argument(
        "--run-dir", required=True, help="run folder; an existing run resumes if its settings match"
    )
    add_config_arguments(train, SegmenterConfig)
    train.set_defaults(func=_cmd_train)


def _add_predict(sub: Subparsers) -> None:
    predict = sub.add_parser(
        "predict", help="tree probability GeoTIFF of a whole image (NaN on no-data pixels)"
    )
    predict.add_argument("image", help="image GeoTIFF")
    predict.add_argument("out", help="output GeoTIFF")
    predict.add_argument("--run-dir", required=True, help="training run folder")
    predict.add_argument("--mask", help="mask GeoTIFF on the image's grid; unset: everywhere")
    predict.add_argument(
        "--checkpoint",
        default="last",
        choices=["last", "best"],
        help="last epoch, or the one with the lowest training loss",
    )
    predict.add_argument("--tile", type=positive_int, default=256, help="tile side in pixels")
    predict.add_argument(
        "--overlap", type=non_negative_int, default=32, help="blended overlap in pixels"
    )
    _add_overwrite(predict)
    predict.set_defaults(func=_cmd_predict)


def _add_scene(sub: Subparsers) -> None:
    scene = sub.add_parser("scene", help="synthesise an aerial-like scene from OSM")
    scene.add_argument("out", help="output folder")
    scene.add_argument("--osm", help="OSM extract; unset: the bundled Helsinki extract")
    scene.add_argument("--resolution", type=positive_float, default=0.5, help="metres per pixel")
    scene.add_argument(
        "--bounds",
        type=finite_float,
        nargs=4,
        metavar=("L", "B", "R", "T"),
        help="UTM bounds; unset: the roads' extent",
    )
    scene.add_argument("--seed", type=non_negative_int, default=0, help="random seed")
    _add_overwrite(scene)
    scene.set_defaults(func=_cmd_scene)


def register(subparsers: Subparsers) -> None:
    """Add ``sciml geo mask|labels|train|predict|scene``."""
    geo = subparsers.add_parser("geo", help="OSM road masks and tree segmentation")
    sub = geo.add_subparsers(dest="geo_command", metavar="COMMAND", required=True)
    for add in (_add_mask, _add_labels, _add_train, _add_predict, _add_scene):
        add(sub)
