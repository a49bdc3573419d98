"""The formats this tool reads: one line each. Adding a format is one module or folder in
sources/, one test file (tests/sources/test_NAME.py) and one line here.

A format's module (sources/NAME.py or the package sources/NAME/, '-' in NAME as '_')
implements the source protocol, looked up through get(). `options` is its SourceOptions
(sources/options.py): the inputs, their image roots, the path rules and the settings the
module declares in OPTIONS, never the whole config:
  OPTIONS                               the ConvertConfig settings it reads beyond COMMON
  detect(path) -> reason or None        --format auto: does this path look like the format?
  check(options)                        before running: UsageError when the inputs are wrong
  possible_splits(options) -> set|None  splits known before reading the data (None: unknown)
  read(root, options, *, first_id, local) -> (SourceOutput, split names known up front);
                                        local: a local runner (every worker on this machine,
                                        and its shuffles hold what they group in memory): join
                                        annotation files in one worker through spill files
  fingerprint_patterns(options) -> ([(kind, glob)], implied image roots)   --if-changed
  MASKS                                 True when its objects carry segmentations
  IMAGES (optional, default True)       False when it finds its images itself: --images is
                                        refused (ConvertConfig.check_resolved), never ignored
and optionally image_level(options) -> bool (the classification schema by default),
EXPORT_FILE / EXPORT_WHAT (what one split folder of a Roboflow-style export holds).

The modules are imported on first use: they import Apache Beam, and the commands that only
read an output (--help, inspect, verify, show) must not pay for it.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import List, Optional, Tuple

from beam_tfrecord.sources import options as source_options
from beam_tfrecord.sources.checks import check_directory, check_label_map
from beam_tfrecord.storage import paths

# name -> what it reads; the order of --format's choices and of --format auto's candidates
FORMATS = {
    "coco": "COCO instances JSON",
    "voc": "Pascal VOC directory or a folder of LabelImg XMLs",
    "csv": "TF Object Detection CSV, or a classification listing",
    "yolo": "Ultralytics data.yaml or Darknet obj.data with YOLO label files",
    "folders": "class folders: ROOT/CLASS/IMAGE or ROOT/SPLIT/CLASS/IMAGE",
    "labelme": "a folder of LabelMe JSON files (searched recursively)",
    "cvat": "CVAT for images 1.1 XML (annotations.xml of a task, job or project)",
    "labelbox": "Labelbox export v2 NDJSON",
    "openimages": "Open Images box CSV (ImageID,Source,LabelName,...) and class descriptions",
    "yolo-keras": "keras-yolo3 annotation text (path x1,y1,x2,y2,class ...), --classes-file",
}


def names() -> List[str]:
  return list(FORMATS)


def get(name: str) -> ModuleType:
  """The module of format `name` (ValueError for an unknown one)."""
  if name not in FORMATS:
    raise ValueError(f"unknown format {name!r}; one of {', '.join(FORMATS)}")
  return importlib.import_module(f"beam_tfrecord.sources.{name.replace('-', '_')}")


def options_of(config) -> source_options.SourceOptions:
  """What the config's format gets of it: COMMON and the settings its module declares."""
  return source_options.of(config, get(config.format).OPTIONS)


def image_level(config) -> bool:
  """True when the source labels whole images (the classification schema is its default)."""
  check = getattr(get(config.format), "image_level", None)
  return bool(check and check(options_of(config)))


def possible_splits(config) -> Optional[set]:
  return get(config.format).possible_splits(options_of(config))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  return get(config.format).fingerprint_patterns(options_of(config))


def check(config) -> None:
  """Every pre-run check of a resolved ConvertConfig: the label map, the image roots, then
  the format's own (UsageError, one line, before the output directory is created)."""
  if config.label_map:
    check_label_map(config.label_map, config.first_id())
  for split, root in map(paths.parse_assignment, config.images):
    check_directory(root, f"--images {split + '=' if split else ''}".rstrip())
  get(config.format).check(options_of(config))


def read(root, config, *, first_id: int, local: bool):
  """(SourceOutput, split names known before running) of the config's format, its images in
  batches of at most base.BATCH_IMAGES (PCollection[records.batches.ImageBatch]): those of a
  source that gives one per element are batched here, within each bundle."""
  out, splits = get(config.format).read(root, options_of(config), first_id=first_id,
                                        local=local)
  if not out.batched:
    from beam_tfrecord.sources.base import batch_images
    out = out._replace(batched=True, images=out.images | "BatchImages" >> batch_images())
  return out, splits
