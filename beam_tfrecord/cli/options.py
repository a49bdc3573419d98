"""`beam-tfrecord convert | demo | inspect | show | verify`.

Options this tool does not know are handed to Beam as pipeline options (--runner,
--direct_num_workers, --direct_running_mode, --project, --region, ...).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import sys
import threading
import time
import uuid
from typing import List, Optional, Sequence

from beam_tfrecord import __version__
from beam_tfrecord import config as config_mod
from beam_tfrecord.config import FORMATS, LAYOUTS, SCHEMAS, SINKS, ConvertConfig
from beam_tfrecord.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError
from beam_tfrecord.plan import naming, shard_plan
from beam_tfrecord.storage import files, paths
from beam_tfrecord.storage.files import DEFAULT_MAX_IMAGE_BYTES
from beam_tfrecord.write.images import (DEFAULT_JPEG_QUALITY,
                                        DEFAULT_MAX_PIXELS, IMAGE_FORMATS)
from beam_tfrecord.write.orientation import EXIF_FRAMES

DEMO_FORMATS = ("coco", "voc", "csv")

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
                      "XML's sub-folder, then directly); labelme, each JSON's folder (then its "
                      "imageData); cvat, the export's images/ (else the XML's folder); "
                      "labelbox, the NDJSON's folder; openimages, the folder named as the split "
                      "beside the CSV; yolo-keras, the text file's folder. yolo and folders "
                      "find their images themselves. File names may not leave this root")
  add(parser, "--output", required=True, metavar="DIR",
                      help="output directory (local or gs://): shards, label_map.pbtxt, "
                      "manifest.json, errors-*.jsonl")
  add(parser, "--classes", metavar="NAME,...",
                      help="keep only objects (and image-level labels) of these source classes; "
                      "the others are dropped and counted as excluded_class warnings. Images "
                      "left without objects are kept as background images. A name the source "
                      "does not have is an error (exit 2) listing the ones it has")
  add(parser, "--class-map", metavar="OLD=NEW,...",
                      help="rename or merge source classes before ids are assigned: "
                      "cat=pet,dog=pet gives one class pet. With --classes, OLD names refer "
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
                      "image_id; JPEG); tfds-detection, tfds-image-folder: TFDS coco/2017's "
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
                      "shards of the same name are an error before anything is written")
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
                      help="--layout tfds: the version directory (default 1.0.0)")
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
                      "annotated size, do not count. Default: never fail on bad input")
  add(policy, "--strict", action="store_true",
                      help="same as --max-error-rate 0: any rejected input fails the run")
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
                      "object, as the official converter's --include_masks does")
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
  add(parser, "--plan-from", metavar="DIR",
                      help="keep the shard boundaries of an earlier output of this tool (its "
                      "manifest's shard_plan): every image goes to the shard its place in the "
                      "shard order falls in, so an image keeps its shard across dataset "
                      "versions and unchanged shards keep their bytes. Splits it does not "
                      "have are planned with the shard-size options; a shard that would hold "
                      "more than twice its planned size makes the whole plan afresh (a "
                      "rebalance, said in the summary). Each shard gets an index, "
                      "shard-index-SPLIT-*.jsonl, for the next --incremental run")
  add(parser, "--incremental", action="store_true",
                      help="for scheduled runs: encode only what changed since the earlier "
                      "output (--plan-from DIR, else --output itself, with --overwrite), whose "
                      "plan it keeps. Images are compared by name, file stamp (size and "
                      "modification time; gs://: size and update time) and annotation, with "
                      "no image read; a shard whose images are all unchanged is kept as it is "
                      "(a hard link; gs://: a server-side copy), a changed shard copies the "
                      "records of its unchanged images. The output equals a full run with "
                      "--plan-from. Every image is encoded again, and the summary says why, "
                      "when the settings that shape records (schema, feature names, resizing, "
                      "masks, ...) or the label map changed, or the plan was made afresh; "
                      "without an earlier output it is a full run that writes the indexes")
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


def _beam_parser() -> argparse.ArgumentParser:
  """A parser that knows every Beam pipeline option (as PipelineOptions collects them)."""
  from apache_beam.options.pipeline_options import (PipelineOptions,
                                                    _BeamArgumentParser)
  parser = _BeamArgumentParser(allow_abbrev=False)
  seen, todo = set(), list(PipelineOptions.__subclasses__())
  while todo:
    cls = todo.pop()
    if cls in seen:
      continue
    seen.add(cls)
    todo.extend(cls.__subclasses__())
    try:
      cls._add_argparse_args(parser)
    except argparse.ArgumentError:
      pass  # an option two classes declare
  return parser


def check_beam_args(beam_args: Sequence[str]) -> None:
  """Options that neither this tool nor Beam knows are errors, with a 'did you mean'."""
  import difflib
  if not beam_args:
    return  # nothing to look up: --help and the read-only commands never import Beam
  try:
    known, unknown = _beam_parser().parse_known_args(list(beam_args))
  except SystemExit:
    raise UsageError(f"bad Beam pipeline option in {' '.join(beam_args)}") from None
  check_runner(getattr(known, "runner", None))
  flags = [a.split("=", 1)[0] for a in unknown if a.startswith("-")]
  if not flags and unknown:
    raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
  if not flags:
    return
  ours = sorted({o for a in convert_options() for o in a.option_strings if o.startswith("--")})
  flag = flags[0]
  close = difflib.get_close_matches(flag.replace("_", "-").lower(), ours, n=1, cutoff=0.6)
  hint = f"; did you mean {close[0]}?" if close else "; see `beam-tfrecord convert --help`"
  raise UsageError(f"unknown option {flag} (neither beam-tfrecord nor Apache Beam knows it)"
                   + hint)


def check_runner(name: Optional[str]) -> None:
  """A --runner Beam does not know is one line with a 'did you mean', before anything is
  written (Beam's Pipeline() raises a ValueError for it). Beam matches names ignoring case,
  with or without the 'Runner' suffix; dotted class names are left to Beam."""
  if not name or "." in name:
    return
  import difflib

  from apache_beam.options.pipeline_options import StandardOptions
  known = {path.rsplit(".", 1)[-1].lower(): path.rsplit(".", 1)[-1]
           for path in StandardOptions.ALL_KNOWN_RUNNERS}
  if name.lower() in known or name.lower() + "runner" in known:
    return
  # 0.8: a typo (DirectRuner), not any name ending in 'runner' (NoSuchRunner ~ SparkRunner)
  close = difflib.get_close_matches(name.lower(), list(known), n=1, cutoff=0.8)
  hint = (f"did you mean {known[close[0]]}?" if close else
          f"Beam knows {', '.join(sorted(known.values()))}")
  raise UsageError(f"unknown --runner {name}: {hint}")


@contextlib.contextmanager
def _private_tempdir():
  """Beam's temporary folders (beam-pipeline-temp*) go into a folder of this run's, removed
  on every exit path; folders of our runs that were killed outright are removed too."""
  import shutil
  import tempfile
  base = tempfile.gettempdir()
  for name in os.listdir(base):
    parts = name.split("-")
    if name.startswith("beam-tfrecord-tmp-") and len(parts) > 3 and parts[3].isdigit():
      try:
        os.kill(int(parts[3]), 0)
      except ProcessLookupError:
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
      except OSError:
        pass
  private = tempfile.mkdtemp(prefix=f"beam-tfrecord-tmp-{os.getpid()}-", dir=base)
  saved_env, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
  os.environ["TMPDIR"], tempfile.tempdir = private, private
  try:
    yield private
  finally:
    tempfile.tempdir = saved_dir
    if saved_env is None:
      os.environ.pop("TMPDIR", None)
    else:
      os.environ["TMPDIR"] = saved_env
    shutil.rmtree(private, ignore_errors=True)


@contextlib.contextmanager
def _terminate_as_exit():
  """SIGTERM (a scheduler's kill) unwinds like Ctrl-C, so cleanup code runs."""
  import signal
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.getsignal(signal.SIGTERM)
  signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


def _building_only(options) -> bool:
  """True when the run only builds a job (Dataflow --dry_run, a template): no input is read
  and no output written here."""
  from apache_beam.options.pipeline_options import (GoogleCloudOptions,
                                                    TestOptions)
  return bool(options.view_as(TestOptions).dry_run or
              options.view_as(GoogleCloudOptions).template_location)


def _run_manifest(output: str, run_id: str):
  """This run's manifest: in the output when it replaced it, else in its run directory."""
  from beam_tfrecord.finalize import output as outputs
  for uri in (paths.join(outputs.run_dir(output, run_id), outputs.MANIFEST),
              paths.join(output, outputs.MANIFEST)):
    try:
      manifest = outputs.read_json(uri)
    except Exception:
      continue
    if manifest.get("run_id") == run_id:
      return manifest
  return None


def run_convert(config: ConvertConfig, beam_args: Sequence[str], argv: Sequence[str],
                break_lock: bool = False) -> int:
  """Check, build and run the pipeline; print the summary. Returns the exit code.

  Order matters: everything that can be checked (options, inputs, label map, the output's
  ownership) is checked before the output directory is created; the lock is taken before
  anything in it changes; only a successful run replaces an earlier output.
  """
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions

  from beam_tfrecord import pipeline
  from beam_tfrecord.finalize import lock as locks
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.storage.progress import Progress
  from beam_tfrecord.sources import registry

  options = PipelineOptions(list(beam_args))
  standard = options.view_as(beam.options.pipeline_options.StandardOptions)
  direct = options.view_as(beam.options.pipeline_options.DirectOptions)
  if standard.runner is None:
    # The local default, measured (benchmarks/README.md): Beam's FnApiRunner in process. It is
    # what the DirectRunner falls back to offline, minus ~2 s spent trying to fetch Prism; on
    # 2 cores multi_processing was slower (worker start-up, data passed between processes)
    # and used 3x the memory.
    standard.runner = "FnApiRunner"
  if direct.direct_running_mode == "multi_threading":
    print("beam-tfrecord: warning: Beam's multi_threading mode lost records under load in our "
          "measurements; the run fails rather than finish incomplete if that happens",
          file=sys.stderr)
  building_only = _building_only(options)
  if not building_only:
    registry.check(config)
    outputs.check_ownership(config.output, config.overwrite,
                            config_mod.input_paths(config))
  run_id = uuid.uuid4().hex
  with _private_tempdir(), _terminate_as_exit():
    try:
      p = beam.Pipeline(options=options)
    except (ValueError, ImportError) as e:  # a runner Beam cannot make (a dotted name)
      raise UsageError(f"--runner {standard.runner}: {e}") from None
    try:
      pipeline.build(p, config, argv, run_id)
    except ValueError as e:
      raise UsageError(str(e)) from None
    if building_only:
      return _wait(p.run(), options) or EXIT_OK
    from apache_beam.io.filesystems import FileSystems
    created = not FileSystems.exists(config.output)
    if created and not paths.is_remote(config.output):
      try:
        os.makedirs(config.output, exist_ok=True)
      except OSError as e:  # a read-only parent or file system: one line, as for the lock
        print(f"beam-tfrecord: cannot create the output directory {config.output} "
              f"({e.strerror or e}); nothing was changed", file=sys.stderr)
        return EXIT_FAILED
    start = time.monotonic()
    lock = locks.OutputLock(config.output, run_id, break_lock)
    try:
      lock.acquire()
    except locks.LockNotWritten as e:  # a full disk: nothing left behind, one line
      print(f"beam-tfrecord: {config.output}: {e}", file=sys.stderr)
      if created and not paths.is_remote(config.output):
        with contextlib.suppress(OSError):
          os.rmdir(config.output)  # ours, and empty: the lock was removed
      return EXIT_FAILED
    with lock:
      repaired = outputs.recover(config.output)
      if repaired:
        print(f"beam-tfrecord: {config.output}: {repaired}", file=sys.stderr)
      outputs.check_ownership(config.output, config.overwrite,
                              config_mod.input_paths(config))
      outputs.remove_leftovers(config.output, keep=[outputs.LOCK])
      with Progress(outputs.run_dir(config.output, run_id)), _startup_frozen():
        try:
          result = p.run()  # local runners block here; remote ones return at once
        except Exception as e:  # a DoFn raised past our error handling: a runner failure
          first = str(e).strip().splitlines()[0] if str(e).strip() else ""
          print(f"beam-tfrecord: the pipeline failed ({type(e).__name__}: {first[:300]}); "
                f"{config.output} is unchanged", file=sys.stderr)
          return EXIT_FAILED
        state = _wait(result, options)
      if state is None:  # --no_wait_until_finish: the job goes on without us
        return EXIT_OK
      if str(state) not in ("DONE", "PipelineState.DONE"):
        print(f"beam-tfrecord: pipeline ended in state {state}; {config.output} is unchanged",
              file=sys.stderr)
        return EXIT_FAILED
      if config.source_fingerprint is not None:  # --if-changed: the workers may have skipped
        skipped = _skipped_line(result, config)
        if skipped:
          print(skipped)
          return EXIT_OK
    return _report(config, run_id, time.monotonic() - start, created)


@contextlib.contextmanager
def _startup_frozen():
  """The objects alive when the run starts (Beam's modules, the graph: ~190,000) are never
  garbage, yet each full collection walked them again, and the in-process runner allocates
  millions of records: freezing them (gc.freeze) saved ~1.5 s of CPU in 20,000 images. They
  are unfrozen after the run, so a process that runs several conversions keeps no garbage."""
  gc.freeze()
  try:
    yield
  finally:
    gc.unfreeze()


def _report(config: ConvertConfig, run_id: str, seconds: float, created: bool) -> int:
  """Print the summary and the outcome of a finished local run; its exit code."""
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.finalize.manifest import OUTCOMES
  manifest = _run_manifest(config.output, run_id)
  if manifest is None:
    print(f"beam-tfrecord: the pipeline finished without writing its manifest; "
          f"{config.output} is unchanged", file=sys.stderr)
    return EXIT_FAILED
  print(outputs.summary(manifest, config.output, seconds))
  code = OUTCOMES.get(manifest.get("outcome", ""), EXIT_FAILED)
  if code == EXIT_OK:
    return code
  report = outputs.run_dir(config.output, run_id)
  kept = ("no output was made" if created else f"the earlier output in {config.output} is "
          "unchanged")
  status = manifest["status"]
  if manifest.get("outcome") == "usage":  # read before the report may be removed below
    status = _usage_line(report, manifest) or status
  if code == EXIT_USAGE and created:  # nothing seen at all: leave no trace
    outputs.remove_leftovers(config.output)
    if not paths.is_remote(config.output):
      try:
        os.rmdir(config.output)
      except OSError:
        pass
    where = ""
  else:
    where = f"; this run's report (manifest, errors): {report}"
  print(f"beam-tfrecord: {status}; {kept}{where}", file=sys.stderr)
  return code


def _usage_line(report: str, manifest: dict) -> Optional[str]:
  """'FILE: what to do' from the first error whose reason only the command line fixes (the
  workers found it: the launcher reads no input whole), '(and N more)' when several; None
  when the run's error files cannot be read (the manifest's status is said instead)."""
  import json

  from apache_beam.io.filesystems import FileSystems

  from beam_tfrecord.finalize.manifest import USAGE_REASONS
  found: List[dict] = []
  try:
    for name in manifest["errors"]["files"]:
      with FileSystems.open(paths.child(report, name)) as f:
        for line in f:
          if b'"reason"' in line and any(r.encode() in line for r in USAGE_REASONS):
            record = json.loads(line)
            if record.get("reason") in USAGE_REASONS:
              found.append(record)
  except Exception:  # unreadable: the status still says what to do
    return None
  if not found:
    return None
  found.sort(key=lambda r: (str(r.get("key")), str(r.get("source"))))
  first = found[0]
  more = f" (and {len(found) - 1} more, see errors-*.jsonl)" if len(found) > 1 else ""
  return f"{first.get('key') or first.get('source')}: {first.get('message')}{more}"


def _wait(result, options):
  """Wait for the job; its final state, or None when there is no run to wait for.

  Dataflow: prints the job id in the form Airflow's Beam operator parses ("Created job with
  id: [ID]") and the console URL; a failed or cancelled job (Beam raises) is its final state;
  a template (--template_location, also how Flex Templates launch) or --dry_run only built
  the job, and --no_wait_until_finish submits without waiting.
  """
  from apache_beam.options.pipeline_options import (GoogleCloudOptions,
                                                    StandardOptions,
                                                    TestOptions)
  if getattr(result, "has_job", False):
    gcp = options.view_as(GoogleCloudOptions)
    print(f"Created job with id: [{result.job_id()}]\nDataflow console: "
          f"https://console.cloud.google.com/dataflow/jobs/{gcp.region}/{result.job_id()}"
          f"?project={gcp.project}", file=sys.stderr, flush=True)
  elif type(result).__name__ == "DataflowPipelineResult" or options.view_as(TestOptions).dry_run:
    print("beam-tfrecord: job built, not run (template or --dry_run)", file=sys.stderr)
    return None
  if options.view_as(StandardOptions).no_wait_until_finish and getattr(result, "has_job", False):
    print("beam-tfrecord: job submitted, not waiting for it (--no_wait_until_finish)",
          file=sys.stderr)
    return None
  try:
    return result.wait_until_finish()
  except (KeyboardInterrupt, SystemExit):
    raise
  except Exception as e:  # DataflowRuntimeException: the job ended FAILED or CANCELLED
    state = getattr(result, "state", None)
    print(f"beam-tfrecord: {type(e).__name__}: {e}", file=sys.stderr)
    return state if state is not None else "FAILED"


# convert options that say how to run, not what to convert: not ConvertConfig fields
RUN_OPTIONS = ("strict", "break_lock", "if_changed")


def convert_options() -> List[argparse.Action]:
  """The actions of `beam-tfrecord convert`'s own options, in --help order."""
  return _add_convert_options(_Parser(prog="beam-tfrecord convert"))


def _config(args: argparse.Namespace) -> ConvertConfig:
  """The ConvertConfig of parsed `convert` options: each option's dest is a field's name."""
  import dataclasses
  values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ConvertConfig)
            if hasattr(args, f.name)}
  if args.strict:
    values["max_error_rate"] = 0.0
  return ConvertConfig(**values)


DEMO_MARKER = ".beam-tfrecord-demo"  # in the folders the demo made: its own, to write again
DEMO_ENTRIES = (DEMO_MARKER, "data", "tfrecords", "show.png")


def claim_demo_folder(path: str) -> None:
  """Make `path` the demo's folder, or refuse with UsageError. The demo writes DIR/data,
  DIR/tfrecords and DIR/show.png over whatever is there, so it writes only into a folder that
  does not exist yet, an empty one, or its own earlier output (DEMO_MARKER, nothing else
  beside the demo's entries, none of them a link leading elsewhere)."""
  if os.path.lexists(path) and not os.path.isdir(path):
    raise UsageError(f"demo --output {path} exists and is not a folder; choose a new folder")
  entries = sorted(os.listdir(path)) if os.path.isdir(path) else []
  if entries and DEMO_MARKER not in entries:
    raise UsageError(f"demo --output {path} already holds files the demo did not write "
                     f"({', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''}); the "
                     "demo writes only into a new or empty folder or its own earlier output: "
                     "choose another --output")
  others = [e for e in entries if e not in DEMO_ENTRIES or os.path.islink(os.path.join(path, e))]
  if others:
    raise UsageError(f"demo --output {path} holds {', '.join(others[:3])} besides the demo's "
                     f"own files (or as a link); the demo writes nothing there: move "
                     f"{'it' if len(others) == 1 else 'them'} or choose another --output")
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, DEMO_MARKER), "w", encoding="utf-8") as f:
    f.write("made by `beam-tfrecord demo`: its next runs may replace data/, tfrecords/ and "
            "show.png here\n")


def _demo(args, beam_args: Sequence[str]) -> int:
  from beam_tfrecord import sample
  claim_demo_folder(args.output)
  data = os.path.join(args.output, "data")
  images = sample.make_dataset(data, count=args.images)
  print(f"sample dataset: {len(images)} images, "
        f"{sum(len(i.boxes) for i in images)} boxes in {data}")
  inputs = {
      "coco": [f"{s}={os.path.join(data, f'instances_{s}.json')}" for s in ("train", "val")],
      "csv": [f"{s}={os.path.join(data, f'{s}_labels.csv')}" for s in ("train", "val")],
      "voc": [os.path.join(data, "voc")],
  }[args.format]
  config = ConvertConfig(format=args.format, inputs=inputs, images=[os.path.join(data, "images")],
                         output=os.path.join(args.output, "tfrecords"), num_shards=2,
                         overwrite=True)
  code = run_convert(config, beam_args, ["demo", "--format", args.format])
  if code == 0:
    from beam_tfrecord.readback import verify
    code = verify.run(config.output)
  if code == 0:
    from beam_tfrecord.readback import show
    picture = os.path.join(args.output, "show.png")
    grid = show.show(config.output, n=12)
    grid.save(picture)
    print(f"{picture}: {len(grid.info['tiles'])} examples drawn from the train records; "
          f"dataset card: {os.path.join(config.output, 'README.md')}")
  return code


def _show(args) -> int:
  from beam_tfrecord.finalize.output import IncompleteOutput
  from beam_tfrecord.readback import show
  if args.n < 1:
    print("beam-tfrecord: -n must be at least 1", file=sys.stderr)
    return 2
  try:
    picture = show.show(args.output, split=args.split, n=args.n, seed=args.seed)
  except (KeyError, ValueError) as e:
    print(f"beam-tfrecord: {e.args[0] if e.args else e}", file=sys.stderr)
    return 2
  except IncompleteOutput as e:  # one line naming verify --repair, exit 2
    raise UsageError(str(e)) from None
  except OSError as e:  # no manifest.json: not a finished output
    print(f"beam-tfrecord: {args.output} has no readable manifest.json ({e}); is it a "
          "finished beam-tfrecord output?", file=sys.stderr)
    return 2
  picture.save(args.picture)
  print(f"{args.picture}: {len(picture.info['tiles'])} examples of {args.output}")
  return 0


def _if_changed(config: ConvertConfig) -> ConvertConfig:
  """--if-changed: the config asking pipeline.build for the fingerprint, computed and compared
  on workers (the launcher lists nothing), set to replace an earlier run of ours in the output
  (once this one succeeds). Reads only the output's manifest.json, as the ownership check does."""
  import dataclasses

  from beam_tfrecord.finalize import fingerprint
  manifest, _ = fingerprint.recorded(config.output)
  return dataclasses.replace(config, source_fingerprint=dict(fingerprint.REQUESTED),
                             overwrite=config.overwrite or manifest is not None)


def _skipped_line(result, config: ConvertConfig) -> Optional[str]:
  """--if-changed, after the job: the line to print when its finalize skipped the run (the
  sources unchanged: it counts the skip in a Beam counter), else None. A runner that reports
  no metrics is not taken for a skip: the run's report then says what happened."""
  from apache_beam.metrics.metric import MetricsFilter

  from beam_tfrecord.finalize import fingerprint
  try:
    counters = result.metrics().query(MetricsFilter()
                                      .with_namespace(fingerprint.SKIPPED_NAMESPACE)
                                      .with_name(fingerprint.SKIPPED_NAME))["counters"]
  except Exception:  # no metrics from this runner
    return None
  if not any(max(c.committed or 0, c.attempted or 0) > 0 for c in counters):
    return None
  # the run it was compared with (unchanged: the output, under our lock)
  manifest, last = fingerprint.recorded(config.output)
  return fingerprint.skipped_line(config.output, (manifest or {}).get("created"), last or {})


def _resolve(config: ConvertConfig) -> ConvertConfig:
  """--format auto decided (and printed) and the schema chosen before anything runs; raises
  UsageError for what is wrong with the input."""
  import dataclasses
  if config.format == "auto":
    from beam_tfrecord.sources import detect
    found = detect.detect(config.inputs)
    print(found.line(), flush=True)
    config = dataclasses.replace(config, format=found.format, inputs=list(found.inputs))
  return config_mod.resolve(config)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The console script. Every usage or input error is one line on stderr and exit 2."""
  try:
    return _main(argv)
  except UsageError as e:
    print(f"beam-tfrecord: error: {e}", file=sys.stderr)
    return EXIT_USAGE
  except KeyboardInterrupt:
    print("beam-tfrecord: interrupted; the earlier output is unchanged", file=sys.stderr)
    return 130
  except OSError as e:  # a read-only or full disk where a command writes: one line, exit 1
    where = f"{e.filename}: " if e.filename else ""
    print(f"beam-tfrecord: error: {where}{e.strerror or e}", file=sys.stderr)
    return EXIT_FAILED


def _main(argv: Optional[Sequence[str]]) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  files.forget_listings()  # one command, one run: object-store listings are cached for it
  parser = make_parser()
  args, beam_args = parser.parse_known_args(argv)
  if any("gs://" in a for a in argv):
    from beam_tfrecord.storage import gcs
    gcs.check_credentials()  # one line, at once, when there are none (not Beam's 30 s)
  if args.command not in ("convert", "demo") and beam_args:
    parser.error(f"unrecognized arguments: {' '.join(beam_args)}")
  check_beam_args(beam_args)
  logging.getLogger("apache_beam").setLevel(logging.WARNING)
  if args.command == "convert":
    config = _config(args)
    try:
      config.validate()
    except ValueError as e:
      raise UsageError(str(e)) from None
    config = _resolve(config)
    if args.if_changed:
      config = _if_changed(config)
    return run_convert(config, beam_args, argv, break_lock=args.break_lock)
  if args.command == "demo":
    return _demo(args, beam_args)
  from beam_tfrecord.readback import verify
  if args.command == "inspect":
    from beam_tfrecord.readback import stats
    return stats.inspect_command(args.output, as_json=args.json, plot_path=args.plot)
  if args.command == "show":
    return _show(args)
  return verify.run(args.output, repair=args.repair, break_lock=args.break_lock)


def console() -> None:
  """The `beam-tfrecord` command: main(), then exit without tearing the interpreter down.
  Freeing Beam's modules and the run's objects one by one took 0.65 s after a run of 20,000
  images had written and reported everything; streams and logging are flushed first, and no
  thread or child process of a finished command is still working."""
  code = main()
  if not isinstance(code, int):  # None or a message: as sys.exit treats them
    sys.exit(code)
  logging.shutdown()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):  # a closed pipe: nothing more to say there
      pass
  os._exit(code)


if __name__ == "__main__":
  console()
