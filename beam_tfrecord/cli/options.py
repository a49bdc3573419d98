"""The command line's parser: `beam-tfrecord convert | demo | inspect | show | verify`, every
option with its help (docs/options.md is generated from `convert_options()`).
"""
from __future__ import annotations

import argparse
from typing import List

from beam_tfrecord import __version__
from beam_tfrecord.cli.demo import DEMO_FORMATS
from beam_tfrecord.config import FORMATS, LAYOUTS, SCHEMAS, SINKS
from beam_tfrecord.errors import UsageError
from beam_tfrecord.plan import naming, shard_plan
from beam_tfrecord.storage import record_files
from beam_tfrecord.storage.files import DEFAULT_MAX_IMAGE_BYTES
from beam_tfrecord.write.images import (DEFAULT_JPEG_QUALITY,
                                        DEFAULT_MAX_PIXELS, IMAGE_FORMATS)
from beam_tfrecord.write.orientation import EXIF_FRAMES

# options --append superseded (issue 38): still parsed, to say so in one line and exit 2
RETIRED = {"--plan-from": "retired_plan_from", "--incremental": "retired_incremental"}

EPILOG = """\
Exit codes: 0 success (at least one example written); 1 runner or job failure; 2 usage or
input error found before running (nothing written); 3 the error-rate policy failed the run;
4 nothing was written (every image rejected). Only a successful run replaces an earlier output.

Apache Beam's own pipeline options pass through, for example
  --runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing
  --runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp --setup_file=./setup.py
Without --runner, Beam's local FnApiRunner runs in this process (what the DirectRunner
falls back to offline, without its attempt to fetch Prism first).
"""



def _add_convert_options(parser: argparse.ArgumentParser, with_format: bool = True
                         ) -> List[argparse.Action]:
  """Adds `convert`'s options to `parser`; returns their actions (the one definition of the
  options: ConvertConfig is built from their dests, and the Dataflow template's parameters and
  docs/options.md are checked against them by tests)."""
  actions: List[argparse.Action] = []

  def add(target, *args, **kwargs) -> None:
    actions.append(target.add_argument(*args, **kwargs))

  if with_format:
    add(parser, "--format", choices=FORMATS, default="auto",
                        help="annotation format. auto (default): decided from --input and "
                        "printed ('detected: yolo (data.yaml)'); coco (instances JSON), voc "
                        "(Pascal VOC directory or a folder of LabelImg XMLs), csv (TF Object "
                        "Detection CSV, one row per object, or a classification listing), "
                        "yolo (Ultralytics data.yaml or Darknet obj.data), folders (class "
                        "folders: ROOT/CLASS/IMAGE or ROOT/SPLIT/CLASS/IMAGE), labelme (a "
                        "folder of LabelMe JSONs), cvat (CVAT for images 1.1 annotations.xml), "
                        "labelbox (Labelbox export v2 NDJSON), openimages (Open Images box "
                        "CSV), yolo-keras (keras-yolo3 annotation text, with --classes-file). A "
                        "Roboflow export directory (train/ valid/ test/) gives one split per "
                        "folder")
  add(parser, "--input", dest="inputs", action="append", required=True, metavar="[SPLIT=]PATH",
                      help="annotation source; repeat for several. coco: an instances JSON file; "
                      "csv: a CSV file; voc: the VOC directory (Annotations/, JPEGImages/, "
                      "ImageSets/Main/) or a folder of XMLs (searched recursively); yolo: a "
                      "data.yaml, an obj.data, or the directory holding it; folders: the root "
                      "of the class folders; labelme: a folder of LabelMe JSONs; cvat: an "
                      "annotations.xml; labelbox: an .ndjson export; openimages: a box CSV "
                      "(e.g. train=oidv6-train-annotations-bbox.csv); yolo-keras: the "
                      "annotation .txt; auto: any of these, or an export directory. "
                      "Prefix SPLIT= to give the file's split, e.g. "
                      "val=annotations/instances_val2017.json. Local paths or gs:// URIs "
                      "(s3:// needs boto3: pip install 'apache-beam[aws]')")
  add(parser, "--images", action="append", default=[], metavar="[SPLIT=]DIR",
                      help="image root that file names in the annotations are relative to; "
                      "repeat with SPLIT= for a root per split. Default: coco/csv, the "
                      "annotation file's directory; voc, VOC/JPEGImages, or beside the XMLs "
                      "for a folder of XMLs (whose <filename> is looked up under DIR, in the "
                      "XML's sub-folder, then directly); labelme, each JSON's folder (used when its "
                      "imageData is null, as labelme does); cvat, the export's images/ (else the XML's folder); "
                      "labelbox, the NDJSON's folder; openimages, the folder named as the split "
                      "beside the CSV; yolo-keras, the text file's folder. yolo and folders "
                      "find their images themselves. File names may not leave this root")
  add(parser, "--output", required=True, metavar="DIR",
                      help="output directory (local or gs://): shards, label_map.pbtxt, "
                      "manifest.json, errors-*.jsonl")
  add(parser, "--classes", metavar="NAME,...",
                      help="keep only objects (and image-level labels) of these source classes; "
                      "the others are dropped and counted as excluded_class warnings. Images "
                      "left without objects are kept as background images (schemas of one class "
                      "per image, such as classification and tutorial, reject them: "
                      "not_one_class). A name the source "
                      "does not have is an error (exit 2) naming the closest ones it has: before "
                      "the run where the classes are declared (COCO categories in the file's "
                      "first 4 MB, a YOLO yaml's names, class folders, CVAT <meta> labels, Open "
                      "Images descriptions, a yolo-keras classes file; with --label-map, the "
                      "kept classes must be in it), else after reading the data")
  add(parser, "--class-map", metavar="OLD=NEW,...",
                      help="rename or merge source classes before ids are assigned: "
                      "cat=pet,dog=pet gives one class pet. The pairs apply at once, not one "
                      "after another: cat=dog,dog=person writes cats as dog and dogs as person "
                      "(never cat as person). With --classes, OLD names refer "
                      "to the kept source classes. Either option numbers the resulting "
                      "classes afresh, contiguous from the schema's first id, in the source's "
                      "class order (its ids, else sorted names), unless --label-map is given")
  add(parser, "--classes-file", metavar="FILE",
                      help="yolo-keras only (required there): the class names, one a line; "
                      "line i is class index i in the annotation text")
  add(parser, "--class-descriptions", metavar="CSV",
                      help="openimages only: the LabelName,DisplayName CSV "
                      "(class-descriptions-boxable.csv, or V7's oidv7-class-descriptions-"
                      "boxable.csv). Default: the one beside the box CSV")
  add(parser, "--label-map", metavar="PBTXT",
                      help="label_map.pbtxt to use for class ids (overrides COCO ids, YOLO's "
                      "index + 1 and the sorted-name default); objects of classes missing from "
                      "it are reported")
  add(parser, "--schema", choices=SCHEMAS,
                      help="record layout. od-api: TF Object Detection API keys (boxes), the "
                      "default for box sources; classification: image/encoded, "
                      "image/class/label (ids 0..N-1 in sorted name order, names in "
                      "labels.txt), image/class/text ..., the default for class folders and "
                      "classification CSV listings; tutorial: height, width, depth, label, "
                      "image_raw (the TF TFRecord tutorial; one class per image); coco-objects: "
                      "one record per object (image, path, area, bbox, category_id, id, "
                      "image_id; JPEG); deeplab: DeepLab's build_data.py keys, a class PNG "
                      "per image in image/segmentation/class/encoded (VOC's SegmentationClass/, "
                      "or polygons painted in order); tfds-detection, tfds-image-folder: TFDS coco/2017's "
                      "and image_folder's features, chosen by --layout tfds")
  add(parser, "--split", metavar="NAME=FRAC,...",
                      help="assign splits by a hash of each image's key, e.g. "
                      "train=0.8,val=0.1,test=0.1 (deterministic). Default: splits from the "
                      "source (SPLIT= prefixes, VOC ImageSets, a CSV split column), else 'train'")
  shards = parser.add_mutually_exclusive_group()
  add(shards, "--num-shards", type=int, metavar="N",
                      help="shards per split (capped at the number of images)")
  add(shards, "--shard-size-mb", type=float, metavar="MB",
                      help=f"target shard size; shards per split = ceil(image bytes / MB). "
                      f"Default {shard_plan.DEFAULT_SHARD_SIZE_MB:g}")
  add(shards, "--records-per-shard", type=int, metavar="N",
                      help="N records in every shard but the last, in shard order (records, "
                      "not images: per-object schemas write several per image; an image's "
                      "records stay in the shard of its first, so such a shard may hold a few "
                      "more or less)")
  add(parser, "--shard-name-template", metavar="TEMPLATE",
                      default=naming.DEFAULT_SHARD_NAME_TEMPLATE,
                      help="shard file names, a Python format string with {split}, {index} "
                      "(0-based), {num_shards} and {count} (records in the file). Default "
                      f"{naming.DEFAULT_SHARD_NAME_TEMPLATE.replace('%', '%%')!r}. Two "
                      "shards of the same name, or a name over 255 bytes (with the longest "
                      "split and the largest numbers the options allow), are an error before "
                      "anything is written")
  add(parser, "--file-format", choices=record_files.FILE_FORMATS, default=record_files.TFRECORD,
                      help="tfrecord (default): TFRecord shards, what tf.data reads; "
                      "array_record: ArrayRecord shards (as TFDS writes them), what JAX's Grain "
                      "and TFDS's as_data_source read by index. Same records, plan and "
                      "manifest; shard names end in .array_record. Not with --sink beam")
  add(parser, "--index-files", action="store_true",
                      help="write an index beside each TFRecord shard (SHARD.idx, a line "
                      "'OFFSET LENGTH' per record), the file NVIDIA DALI's TFRecord reader and "
                      "the `tfrecord` package need to shard and shuffle across workers; "
                      "listed in the manifest and checked by `verify`")
  add(parser, "--layout", choices=LAYOUTS, default="flat",
                      help="flat (default): shards, label map and manifest in --output; tfds: "
                      "the directory TensorFlow Datasets reads, --output/NAME/VERSION/ with "
                      "NAME-SPLIT.tfrecord-00000-of-0000N shards, dataset_info.json and "
                      "features.json (TFDS coco/2017's features for boxes, image_folder's for "
                      "class folders; ClassLabel ids 0..N-1 in the source's class order), so "
                      "that tfds.builder_from_directory('OUT/NAME/VERSION') or "
                      "tfds.load('NAME', data_dir='OUT') load it")
  add(parser, "--dataset-name", metavar="NAME",
                      help="--layout tfds: the dataset's TFDS name (lower case, digits, '_')")
  add(parser, "--dataset-version", default="1.0.0", metavar="X.Y.Z",
                      help="--layout tfds: the version directory (default 1.0.0), "
                      "MAJOR.MINOR.PATCH without leading zeros, as TFDS loads it")
  add(parser, "--sink", choices=SINKS, default="shards",
                      help="shards (default): our writer, flat memory and deterministic "
                      "output; beam: Beam's WriteToTFRecord, for runners with a cheap shuffle")
  add(parser, "--csv-columns", metavar="FIELD=COLUMN,...",
                      help="csv only: map the expected fields (filename, width, height, class, "
                      "xmin, ymin, xmax, ymax, split) to the CSV's own column names, e.g. "
                      "filename=path,class=label. A CSV without box columns is a "
                      "classification listing (one image-level label per row)")
  add(parser, "--csv-normalized", action="store_true",
                      help="csv only: xmin, ymin, xmax, ymax are fractions of the image's width "
                      "and height (0..1), not pixels. Without it, a CSV file whose coordinates "
                      "all lie within [0, 1.5] is read as pixels with a warning "
                      "(looks_normalized) naming this option")
  add(parser, "--bbox-policy", choices=("clip", "drop", "error"), default="clip",
                      help="boxes partly outside the image: clip them (counted), drop the box, "
                      "or reject the image. Empty, non-finite or fully outside boxes are "
                      "always dropped and reported")
  add(parser, "--allow-absolute-paths", action="store_true",
                      help="accept absolute paths / URIs (gs://...) as file names in the "
                      "annotations instead of rejecting them")
  add(parser, "--follow-symlinks", action="store_true",
                      help="accept images that are symlinks to readable files outside the "
                      "image root, and walk symlinked class folders (symlink farms, exports "
                      "assembled with ln -s); without it such images are rejected as "
                      "symlink_escape and symlinked class folders are refused")
  policy = parser.add_mutually_exclusive_group()
  add(policy, "--max-error-rate", type=float, metavar="R",
                      help="fail (exit code 3, after writing the error report) when rejected "
                      "inputs per image seen exceed R (0..1). Warnings, such as a wrong "
                      "annotated size, do not count, except copies: each image with the same "
                      "bytes as an image of another split (leaked_across_splits) or as another "
                      "file of its own split (duplicate_content) counts as one rejected input, "
                      "though it is written; an annotation file rejected at file "
                      "level counts as one. Default: rejected images and objects do not fail "
                      "the run, a file-level rejection does (exit code 4: what the file held "
                      "is missing in an unknown amount)")
  add(policy, "--strict", action="store_true",
                      help="same as --max-error-rate 0: any rejected input, and any copy "
                      "(leaked_across_splits, duplicate_content), fails the run (exit code 3)")
  add(parser, "--max-pixels", type=int, default=DEFAULT_MAX_PIXELS, metavar="N",
                      help="reject images whose header declares more pixels than N, before "
                      f"decoding anything (decompression bombs). Default {DEFAULT_MAX_PIXELS}")
  add(parser, "--exif-frame", choices=EXIF_FRAMES, default="auto",
                      help="photos with an EXIF orientation are written upright; this says which "
                      "frame their boxes are in: displayed (as viewers show it), stored (raw "
                      "pixels), or auto: stored when the annotated width/height match the raw "
                      "size only, else displayed")
  add(parser, "--verify-images", action="store_true",
                      help="fully decode every JPEG/PNG to reject corrupt ones (slower); by "
                      "default only the header and the end marker are checked")
  add(parser, "--feature-names", metavar="OLD=NEW,...",
                      help="rename keys of the schema, e.g. depth=channels,image_raw=image "
                      "(the TF1 writers' names); manifest.json records the final names")
  add(parser, "--include-masks", action="store_true",
                      help="coco, yolo: rasterize each object's segmentation (COCO polygons or "
                      "RLE, crowd regions included; YOLO segmentation polygons) into "
                      "image/object/mask (od-api), one PNG of 0/1 at the image's size per "
                      "object, as the official converter's --include_masks does; --schema "
                      "deeplab paints the segmentations it keeps into one class mask")
  size = parser.add_mutually_exclusive_group()
  add(size, "--max-side", type=int, metavar="N",
                    help="scale images down (aspect ratio kept) so that the longest side is at "
                    "most N pixels; smaller images are left as they are")
  add(size, "--resize", metavar="WxH",
                    help="stretch every image to W x H pixels (like Roboflow's resize). Boxes "
                    "stay correct: normalized ones are unchanged, pixel values are scaled")
  add(parser, "--image-format", choices=IMAGE_FORMATS, default="keep",
                      help="keep (default: JPEG/PNG as they are, other formats as PNG), jpeg or "
                      "png. Images already in the format and within the size limits are "
                      "copied byte for byte")
  add(parser, "--jpeg-quality", type=int, default=DEFAULT_JPEG_QUALITY, metavar="Q",
                      help=f"quality of JPEGs this tool encodes (1-100, default "
                      f"{DEFAULT_JPEG_QUALITY}); copied JPEGs keep theirs")
  add(parser, "--max-image-bytes", type=int, default=DEFAULT_MAX_IMAGE_BYTES,
                      metavar="N", help="reject image files larger than N bytes (checked with a "
                      f"stat, before reading). Default {DEFAULT_MAX_IMAGE_BYTES} (256 MB)")
  add(parser, "--writer-processes", type=int, default=0, metavar="N",
                      help="processes that write shards (each shard by one, so the output "
                      "bytes do not depend on N). Default 0: when Beam runs in this process (the "
                      "default local runner) and the images are local, one per core, but no "
                      "more than one per 1,000 images or per shard; else 1 (distributed runners "
                      "and Beam's multi-worker modes spread shards over their own workers). A "
                      "number given is used as given, up to one per shard")
  add(parser, "--image-sets", metavar="SET,...",
                      help="voc only: the ImageSets/Main lists to use as splits, e.g. "
                      "train,val,test. Default: every list; a union list (trainval) is not a "
                      "split when its parts are there, and with only train and trainval, "
                      "val = trainval - train")
  add(parser, "--overwrite", action="store_true",
                      help="replace an earlier run in the output directory, once the new run "
                      "has succeeded. Only files that run's manifest.json lists are replaced; "
                      "a directory holding anything else is refused (exit 2)")
  add(parser, "--break-lock", action="store_true",
                      help="take over the output's lock (.beam-tfrecord-lock) left by a run "
                      "that died; a live run's lock on this host is never broken")
  # retired: --append does what they did (convert_config.build says so)
  for option, dest in RETIRED.items():
    parser.add_argument(option, dest=dest, nargs="?", const=True, help=argparse.SUPPRESS)
  add(parser, "--append", action="store_true",
                      help="for scheduled runs: make or extend a versioned output. --output "
                      "DEST gets DEST/versions/<V>/ (each an ordinary output) and DEST/LATEST "
                      "(a one-line file naming the latest version), written last and only "
                      "after the new version checked out. A run compares the sources with "
                      "LATEST's version (names, file stamps: size, modification and change "
                      "time, inode; annotations) without reading an image: added images go "
                      "into new delta shards, shards holding changed or removed images are "
                      "rewritten (their unchanged records copied), every other shard is the "
                      "earlier file itself (a hard link; gs://: a server-side copy). Nothing "
                      "changed: nothing published, exit 0. A full version (a fresh plan) is "
                      "made the first time, on --compact, when delta shards hold more than "
                      "10%% of a split or number more than 64, or when a setting that shapes "
                      "records changed; the summary says why. Readers (reader.load, verify, "
                      "inspect, show) given DEST read LATEST's version")
  add(parser, "--compact", action="store_true",
                      help="with --append: make the new version in full with a fresh plan "
                      "(delta shards merged), even when few images changed")
  add(parser, "--keep", type=int, default=0, metavar="K",
                      help="with --append: keep the newest K versions (always the one LATEST "
                      "names) and delete older ones; a file is deleted only when no kept "
                      "version uses it (default 0: keep every version). A version that was "
                      "LATEST less than --retain-hours ago is kept too. Applied on every run, "
                      "also when nothing changed, so a lowered K takes effect. Removing a "
                      "version's links changes its shards' change time: the next run then "
                      "checks the CRCs of the shards it keeps")
  add(parser, "--retain-hours", type=float, default=24.0, metavar="H",
                      help="with --keep: never delete a version that was LATEST less than H "
                      "hours ago (default 24): a reader (reader.load, a training job) that "
                      "opened LATEST before a newer version was published keeps reading the "
                      "files it resolved, as Delta Lake's VACUUM spares recent files. 0 "
                      "deletes at once")
  add(parser, "--if-changed", action="store_true",
                      help="for scheduled runs: skip (exit 0) when the sources (annotation files, "
                      "image listing: names, sizes, modification times) and settings equal the "
                      "fingerprint in the output's last successful manifest.json; otherwise "
                      "convert, replacing that earlier run. The workers list and compare the "
                      "sources, so the job runs either way")
  return actions



def make_parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog="beam-tfrecord",
      description="Convert labelled image datasets (COCO, Pascal VOC / LabelImg, TF OD CSV, "
      "YOLO, class folders, Roboflow exports) into sharded TFRecords of tf.train.Example (TF "
      "Object Detection API or classification keys) with Apache Beam.")
  parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
  sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
  convert = sub.add_parser("convert", help="convert a dataset to TFRecords",
                           description="Convert a dataset to sharded TFRecords.",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
  _add_convert_options(convert)
  demo = sub.add_parser("demo", help="make a small sample dataset and convert it",
                        description="Generate a small sample dataset of real JPEG/PNG images "
                        "with COCO, VOC and CSV annotations, convert it on the DirectRunner, "
                        "verify the output and draw DIR/show.png from its records.",
                        epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
  demo.add_argument("--output", default="demo-output", metavar="DIR",
                    help="where to write the sample data (DIR/data) and the TFRecords "
                    "(DIR/tfrecords). Default: demo-output")
  demo.add_argument("--format", choices=DEMO_FORMATS, default="coco",
                    help="which of the sample's annotation formats to convert (default coco)")
  demo.add_argument("--images", type=int, default=24, help="sample images to make (default 24)")
  inspect = sub.add_parser("inspect", help="status, summary and statistics of an output "
                           "directory (one pass over its records)")
  inspect.add_argument("output", metavar="DIR")
  inspect.add_argument("--json", action="store_true", help="print one JSON document instead")
  inspect.add_argument("--plot", metavar="PNG", help="also draw the class histogram and the "
                       "box-size distribution (needs matplotlib: pip install beam-tfrecord[plots])")
  show = sub.add_parser("show", help="draw a grid of examples read from the records",
                        description="Draw a grid of examples read back from the TFRecords: "
                        "boxes with class names, masks, classification captions.")
  show.add_argument("output", metavar="DIR")
  show.add_argument("--split", help="which split (default: train, else the first)")
  show.add_argument("-n", type=int, default=16, help="examples to draw (default 16)")
  show.add_argument("--seed", type=int, default=0, help="which examples: a random choice made "
                    "with this seed (default 0)")
  show.add_argument("--output", dest="picture", required=True, metavar="PNG",
                    help="where to write the picture")
  verify = sub.add_parser("verify", help="check an output against its manifest.json: status, "
                          "every shard's size, CRCs and record count, every record parsed "
                          "with TensorFlow, no stray shard, the label map")
  verify.add_argument("output", metavar="DIR")
  verify.add_argument("--repair", action="store_true",
                      help="complete a replacement that a killed run left half done, with the "
                      "output's lock held (a dead run's lock is taken over and released)")
  verify.add_argument("--break-lock", action="store_true",
                      help="with --repair: take over a lock that cannot be judged (another "
                      "host's, or empty and fresh); a live run's lock on this host is never "
                      "broken")
  return parser


class _Parser(argparse.ArgumentParser):
  """Usage errors become UsageError: one line and exit 2, printed by main()."""

  def error(self, message: str):
    raise UsageError(f"{message} (see `{self.prog} --help`)")


# convert options that say how to run, not what to convert: not ConvertConfig fields
RUN_OPTIONS = ("strict", "break_lock", "if_changed")


def convert_options() -> List[argparse.Action]:
  """The actions of `beam-tfrecord convert`'s own options, in --help order."""
  return _add_convert_options(_Parser(prog="beam-tfrecord convert"))

