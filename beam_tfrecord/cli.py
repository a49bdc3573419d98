"""`beam-tfrecord convert | demo | inspect | verify`.

Options this tool does not know are handed to Beam as pipeline options (--runner,
--direct_num_workers, --direct_running_mode, --project, --region, ...).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from typing import Optional, Sequence

from beam_tfrecord import __version__, sharding
from beam_tfrecord.encode import DEFAULT_SCHEMA, SCHEMAS
from beam_tfrecord.errors import UsageError
from beam_tfrecord.images import DEFAULT_JPEG_QUALITY, DEFAULT_MAX_PIXELS, IMAGE_FORMATS
from beam_tfrecord.orientation import EXIF_FRAMES
from beam_tfrecord.pipeline import FORMATS, SINKS, ConvertConfig
from beam_tfrecord.progress import Progress

EPILOG = """\
Any option not listed above is passed to Apache Beam as a pipeline option, for example
  --runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing
  --runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp --setup_file=./setup.py
Without --runner, Beam's local FnApiRunner runs in this process (what the DirectRunner
falls back to offline, without its attempt to fetch Prism first).
"""


def _add_convert_options(parser: argparse.ArgumentParser, with_format: bool = True) -> None:
  if with_format:
    parser.add_argument("--format", required=True, choices=FORMATS,
                        help="annotation format: coco (instances JSON), voc (Pascal VOC "
                        "directory), csv (TF Object Detection CSV, one row per object)")
  parser.add_argument("--input", action="append", required=True, metavar="[SPLIT=]PATH",
                      help="annotation source; repeat for several. coco: an instances JSON file; "
                      "csv: a CSV file; voc: the VOC directory (Annotations/, JPEGImages/, "
                      "ImageSets/Main/). Prefix SPLIT= to give the file's split, e.g. "
                      "val=annotations/instances_val2017.json. Local paths or gs://, s3:// URIs")
  parser.add_argument("--images", action="append", default=[], metavar="[SPLIT=]DIR",
                      help="image root that file names in the annotations are relative to; "
                      "repeat with SPLIT= for a root per split. Default: coco/csv, the "
                      "annotation file's directory; voc, VOC/JPEGImages. File names may not "
                      "leave this root")
  parser.add_argument("--output", required=True, metavar="DIR",
                      help="output directory (local or gs://): shards, label_map.pbtxt, "
                      "manifest.json, errors-*.jsonl")
  parser.add_argument("--label-map", metavar="PBTXT",
                      help="label_map.pbtxt to use for class ids (overrides COCO ids and the "
                      "sorted-name default); objects of classes missing from it are reported")
  parser.add_argument("--split", metavar="NAME=FRAC,...",
                      help="assign splits by a hash of each image's key, e.g. "
                      "train=0.8,val=0.1,test=0.1 (deterministic). Default: splits from the "
                      "source (SPLIT= prefixes, VOC ImageSets, a CSV split column), else 'train'")
  shards = parser.add_mutually_exclusive_group()
  shards.add_argument("--num-shards", type=int, metavar="N",
                      help="shards per split (capped at the number of images)")
  shards.add_argument("--shard-size-mb", type=float, metavar="MB",
                      help=f"target shard size; shards per split = ceil(image bytes / MB). "
                      f"Default {sharding.DEFAULT_SHARD_SIZE_MB:g}")
  shards.add_argument("--records-per-shard", type=int, metavar="N",
                      help="fill shards in key order with at most N records each (records, not "
                      "images: per-object schemas write several per image, never split "
                      "across shards)")
  parser.add_argument("--shard-name-template", metavar="TEMPLATE",
                      default=sharding.DEFAULT_SHARD_NAME_TEMPLATE,
                      help="shard file names, a Python format string with {split}, {index} "
                      "(0-based), {num_shards} and {count} (records in the file). Default "
                      f"{sharding.DEFAULT_SHARD_NAME_TEMPLATE.replace('%', '%%')!r}. Two "
                      "shards of the same name are an error before anything is written")
  parser.add_argument("--sink", choices=SINKS, default="shards",
                      help="shards (default): our writer, flat memory and deterministic "
                      "output; beam: Beam's WriteToTFRecord, for runners with a cheap shuffle")
  parser.add_argument("--csv-columns", metavar="FIELD=COLUMN,...",
                      help="csv only: map the expected fields (filename, width, height, class, "
                      "xmin, ymin, xmax, ymax, split) to the CSV's own column names")
  parser.add_argument("--bbox-policy", choices=("clip", "drop", "error"), default="clip",
                      help="boxes partly outside the image: clip them (counted), drop the box, "
                      "or reject the image. Empty, non-finite or fully outside boxes are "
                      "always dropped and reported")
  parser.add_argument("--allow-absolute-paths", action="store_true",
                      help="accept absolute paths / URIs (gs://...) as file names in the "
                      "annotations instead of rejecting them")
  policy = parser.add_mutually_exclusive_group()
  policy.add_argument("--max-error-rate", type=float, metavar="R",
                      help="fail (exit code 3, after writing the error report) when rejected "
                      "inputs per image seen exceed R (0..1). Warnings, such as a wrong "
                      "annotated size, do not count. Default: never fail on bad input")
  policy.add_argument("--strict", action="store_true",
                      help="same as --max-error-rate 0: any rejected input fails the run")
  parser.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS, metavar="N",
                      help="reject images whose header declares more pixels than N, before "
                      f"decoding anything (decompression bombs). Default {DEFAULT_MAX_PIXELS}")
  parser.add_argument("--exif-frame", choices=EXIF_FRAMES, default="auto",
                      help="photos with an EXIF orientation are written upright; this says which "
                      "frame their boxes are in: displayed (as viewers show it), stored (raw "
                      "pixels), or auto: stored when the annotated width/height match the raw "
                      "size only, else displayed")
  parser.add_argument("--verify-images", action="store_true",
                      help="fully decode every JPEG/PNG to reject corrupt ones (slower); by "
                      "default only the header and the end marker are checked")
  parser.add_argument("--schema", choices=list(SCHEMAS), default=DEFAULT_SCHEMA,
                      help="record layout: od-api (TF Object Detection API keys, default), "
                      "tutorial (height, width, depth, label, image_raw: the TF TFRecord "
                      "tutorial), coco-objects (one record per object: image, path, area, "
                      "bbox, category_id, id, image_id)")
  parser.add_argument("--feature-names", metavar="OLD=NEW,...",
                      help="rename keys of the schema, e.g. depth=channels,image_raw=image "
                      "(the TF1 writers' names); manifest.json records the final names")
  parser.add_argument("--include-masks", action="store_true",
                      help="coco: rasterize each object's segmentation (polygons or RLE, crowd "
                      "regions included) into image/object/mask, one PNG of 0/1 at the image's "
                      "size per object, as the official converter's --include_masks does")
  size = parser.add_mutually_exclusive_group()
  size.add_argument("--max-side", type=int, metavar="N",
                    help="scale images down (aspect ratio kept) so that the longest side is at "
                    "most N pixels; smaller images are left as they are")
  size.add_argument("--resize", metavar="WxH",
                    help="stretch every image to W x H pixels (like Roboflow's resize). Boxes "
                    "stay correct: normalized ones are unchanged, pixel values are scaled")
  parser.add_argument("--image-format", choices=IMAGE_FORMATS, default="keep",
                      help="keep (default: JPEG/PNG as they are, other formats as PNG), jpeg or "
                      "png. Images already in the format and within the size limits are "
                      "copied byte for byte")
  parser.add_argument("--jpeg-quality", type=int, default=DEFAULT_JPEG_QUALITY, metavar="Q",
                      help=f"quality of JPEGs this tool encodes (1-100, default "
                      f"{DEFAULT_JPEG_QUALITY}); copied JPEGs keep theirs")
  parser.add_argument("--overwrite", action="store_true",
                      help="write into a non-empty output directory, removing the files of an "
                      "earlier run first")
  parser.add_argument("--if-changed", action="store_true",
                      help="for scheduled runs: skip (exit 0) when the sources (annotation files, "
                      "image listing: names, sizes, modification times) and settings equal the "
                      "fingerprint in the output's last successful manifest.json; otherwise "
                      "convert, replacing that earlier run")


def make_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="beam-tfrecord",
      description="Convert labelled image datasets (COCO, Pascal VOC, TF OD CSV) into sharded "
      "TFRecords of tf.train.Example (TF Object Detection API keys) with Apache Beam.")
  parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
  sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
  convert = sub.add_parser("convert", help="convert a dataset to TFRecords",
                           description="Convert a dataset to sharded TFRecords.",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
  _add_convert_options(convert)
  demo = sub.add_parser("demo", help="make a small sample dataset and convert it",
                        description="Generate a small sample dataset of real JPEG/PNG images "
                        "with COCO, VOC and CSV annotations, convert it on the DirectRunner and "
                        "verify the output.", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
  demo.add_argument("--output", default="demo-output", metavar="DIR",
                    help="where to write the sample data (DIR/data) and the TFRecords "
                    "(DIR/tfrecords). Default: demo-output")
  demo.add_argument("--format", choices=FORMATS, default="coco",
                    help="which of the sample's annotation formats to convert (default coco)")
  demo.add_argument("--images", type=int, default=24, help="sample images to make (default 24)")
  inspect = sub.add_parser("inspect", help="print the summary of a finished output directory")
  inspect.add_argument("output", metavar="DIR")
  verify = sub.add_parser("verify", help="read every shard back with TensorFlow and check it "
                          "against manifest.json")
  verify.add_argument("output", metavar="DIR")
  return parser


def run_convert(config: ConvertConfig, beam_args: Sequence[str], argv: Sequence[str]) -> int:
  """Build and run the pipeline; print the summary. Returns the exit code."""
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions
  from beam_tfrecord import output as outputs
  from beam_tfrecord import pipeline as pipeline_mod

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
  try:
    outputs.prepare(config.output, config.overwrite)
  except outputs.OutputNotEmpty as e:
    print(f"beam-tfrecord: {e}", file=sys.stderr)
    return 2
  start = time.monotonic()
  p = beam.Pipeline(options=options)
  run_id = uuid.uuid4().hex
  pipeline_mod.build(p, config, argv, run_id)
  with Progress(pipeline_mod.staging_dir(config.output, run_id)):
    result = p.run()  # local runners block here; remote ones return at once
    state = _wait(result, options)
  if state is None:  # nothing to wait for: a template, --dry_run or --no_wait_until_finish
    return 0
  seconds = time.monotonic() - start
  if str(state) not in ("DONE", "PipelineState.DONE"):
    print(f"beam-tfrecord: pipeline ended in state {state}", file=sys.stderr)
    return 1
  manifest = outputs.read_manifest(config.output)
  print(outputs.summary(manifest, config.output, seconds))
  if manifest["status"] != "ok":
    print(f"beam-tfrecord: {manifest['status']}", file=sys.stderr)
    return 3
  return 0


def _wait(result, options):
  """Wait for the job; its final state, or None when there is no run to wait for.

  Dataflow: prints the job id in the form Airflow's Beam operator parses ("Created job with
  id: [ID]") and the console URL; a failed or cancelled job (Beam raises) is its final state;
  a template (--template_location, also how Flex Templates launch) or --dry_run only built
  the job, and --no_wait_until_finish submits without waiting.
  """
  from apache_beam.options.pipeline_options import (GoogleCloudOptions, StandardOptions,
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
  except Exception as e:  # DataflowRuntimeException: the job ended FAILED or CANCELLED
    state = getattr(result, "state", None)
    print(f"beam-tfrecord: {type(e).__name__}: {e}", file=sys.stderr)
    return state if state is not None else "FAILED"


def _config(args: argparse.Namespace) -> ConvertConfig:
  return ConvertConfig(
      format=args.format, inputs=args.input, output=args.output, images=args.images,
      label_map=args.label_map, split=args.split, num_shards=args.num_shards,
      shard_size_mb=args.shard_size_mb, sink=args.sink, csv_columns=args.csv_columns,
      bbox_policy=args.bbox_policy, allow_absolute_paths=args.allow_absolute_paths,
      overwrite=args.overwrite, max_error_rate=0.0 if args.strict else args.max_error_rate,
      max_pixels=args.max_pixels, exif_frame=args.exif_frame, verify_images=args.verify_images,
      include_masks=args.include_masks, max_side=args.max_side, resize=args.resize,
      image_format=args.image_format, jpeg_quality=args.jpeg_quality,
      records_per_shard=args.records_per_shard, shard_name_template=args.shard_name_template,
      schema=args.schema, feature_names=args.feature_names)


def _demo(args, beam_args: Sequence[str]) -> int:
  from beam_tfrecord import sample
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
    from beam_tfrecord import output as outputs
    code = outputs.verify(config.output)
  return code


def _unchanged(config: ConvertConfig) -> bool:
  """--if-changed: True (skip) when the sources match the output's last successful run; else
  record the fingerprint in config (for manifest.json) and let the run replace that output."""
  from beam_tfrecord import fingerprint
  current = fingerprint.compute(config)
  manifest, last = fingerprint.recorded(config.output)
  if fingerprint.same(current, last):
    print(f"beam-tfrecord: skipped, sources unchanged since the run of "
          f"{manifest.get('created')} in {config.output} ({current['files']} files, "
          f"fingerprint {current['sha256'][:12]})")
    return True
  config.source_fingerprint = current
  if manifest is not None or fingerprint.holds_only_own_files(config.output):
    config.overwrite = True  # an earlier run of ours (finished or interrupted): replace it
  return False


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  parser = make_parser()
  args, beam_args = parser.parse_known_args(argv)
  if args.command not in ("convert", "demo") and beam_args:
    parser.error(f"unrecognized arguments: {' '.join(beam_args)}")
  # A bare word is fine as the value of a preceding "--flag" (Beam accepts "--runner X").
  bad = [a for i, a in enumerate(beam_args) if not a.startswith("--") and not (
      i > 0 and beam_args[i - 1].startswith("--") and "=" not in beam_args[i - 1])]
  if bad:
    parser.error(f"unrecognized arguments: {' '.join(bad)}")
  logging.getLogger("apache_beam").setLevel(logging.WARNING)
  if args.command == "convert":
    config = _config(args)
    try:
      config.validate()
    except (ValueError, UsageError) as e:
      parser.error(str(e))
    if args.if_changed and _unchanged(config):
      return 0
    return run_convert(config, beam_args, argv)
  if args.command == "demo":
    return _demo(args, beam_args)
  from beam_tfrecord import output as outputs
  if args.command == "inspect":
    print(outputs.summary(outputs.read_manifest(args.output), args.output))
    return 0
  return outputs.verify(args.output)


if __name__ == "__main__":
  sys.exit(main())
