"""COCO instances JSON (images, annotations, categories), parsed on workers.

A COCO file can be ~450 MB (train2017), so the launcher reads at most its first
LAUNCH_HEAD_BYTES: the pipeline starts from a list of (file, section) tasks, and each worker
streams one section of one file, emitting small records. Images and their annotations meet
in a CoGroupByKey. On the in-process runner one worker reads each file once and joins it
through partitioned spill files on local disk, in bounded memory.

Two parse paths, each chosen by a measurement (benchmarks/coco_parse.py): the strict one,
ijson's event stream (stream.py: what it accepts and how it fails is what COCO reads), and
the fast one, json's C scanner over windows of the file (scan.py), which gives the same
entries or hands the file back to the strict one.

  entries.py    the checks of one entry of `images`, `annotations`, `categories`
  stream.py     the strict path: ijson's events, a depth limit
  scan.py       the fast path, and its checks of what ijson would refuse
  head.py       what the launcher reads: check_input, --format auto's top-level keys
  buffer.py     the in-worker join's spill buffer, by partition of image id
  join.py       an image's entries and objects to an ImageAnnotation; category id 0
  workers.py    the DoFns: one section of one file, or a whole file joined in a worker
  transform.py  ReadCoco, the Beam transform (imported when the pipeline is built)
This module is the source protocol (sources/registry.py) and imports no Beam: the names of
the submodules that other code knows as `coco.NAME` are looked up on first use.
"""
from __future__ import annotations

import importlib
from typing import Any, List, Optional, Tuple

from beam_tfrecord.records.model import DEFAULT_SPLIT
from beam_tfrecord.sources.coco.entries import (annotation_extras, annotation_fields,
                                                parse_annotation, parse_category, parse_image)
from beam_tfrecord.sources.coco.head import LAUNCH_HEAD_BYTES, check_input, top_keys
from beam_tfrecord.sources.coco.stream import (MAX_DEPTH, SECTIONS, missing_section,
                                               stream_section, stream_sections)
from beam_tfrecord.storage import paths

__all__ = ["MASKS", "EXPORT_FILE", "detect", "check", "possible_splits", "read",
           "fingerprint_patterns", "annotation_extras", "annotation_fields",
           "parse_annotation", "parse_category", "parse_image", "LAUNCH_HEAD_BYTES",
           "check_input", "top_keys", "MAX_DEPTH", "SECTIONS", "missing_section",
           "stream_section", "stream_sections", "ReadCoco", "join_image", "category_zero",
           "CATEGORY_ZERO_USED", "fast_sections"]

MASKS = True  # segmentations: --include-masks rasterizes them
OPTIONS = ("label_map",)  # a given label map: category id 0 may then be used
EXPORT_FILE = "_annotations.coco.json"  # the file in each split folder of a Roboflow export


def detect(path: str) -> Optional[str]:
  """--format auto: a COCO JSON (a .json with `images`/`annotations`), or a folder holding
  Roboflow's _annotations.coco.json."""
  from beam_tfrecord.storage.files import list_dir
  if path.lower().endswith(".json"):
    return "COCO JSON" if top_keys(path) & {"images", "annotations"} else None
  if EXPORT_FILE in list_dir(path)[1]:
    return EXPORT_FILE
  return None


def check(config) -> None:
  """Only what the head of each file tells (check_input); category id 0 in use without
  --label-map is found by the workers (join.category_zero), and fails the run before the
  output is replaced."""
  for item in config.inputs:
    check_input(paths.parse_assignment(item)[1])


def possible_splits(config) -> Optional[set]:
  return {split or DEFAULT_SPLIT for split, _, _ in config.file_inputs()}


def read(root, config, *, first_id: int, local: bool) -> Tuple[Any, List[str]]:
  """(SourceOutput, split names): ReadCoco over every input, joined in one worker when local;
  on the in-process runner with a core to spare, a large file's partitions are joined by a
  worker process (join_pool) while the runner's thread goes on with what was joined."""
  from beam_tfrecord import runners
  from beam_tfrecord.sources.coco.transform import ReadCoco
  inputs = config.file_inputs()
  join_processes = 1 if local and runners.in_process(root) and runners.local_cores() > 1 else 0
  return (root | "ReadCoco" >> ReadCoco(inputs, config.allow_absolute_paths,
                                        config.follow_symlinks,
                                        drop_background=not config.label_map,
                                        include_masks=config.include_masks,
                                        join_in_worker=local,
                                        join_processes=join_processes),
          sorted({s for s, _, _ in inputs if s}))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each annotation file; the image roots (default: each annotation file's directory)."""
  inputs = config.file_inputs()
  return [("file", uri) for _, uri, _ in inputs], [root for _, _, root in inputs]


# names of the submodules that import Beam, imported when first asked for
_LAZY = {
    "ReadCoco": "transform",
    "join_image": "join", "category_zero": "join", "CATEGORY_ZERO_USED": "join",
    "_zero_verdict": "join",
    "_ParseSection": "workers", "_JoinFile": "workers",
    "OBJECT_BUFFER": "workers",
    "_JoinBuffer": "buffer", "_MIX": "buffer", "_MASK": "buffer",
    "fast_sections": "scan",
    "_checked_image": "entries", "_checked_annotation": "entries",
}


def __getattr__(name: str) -> Any:
  module = _LAZY.get(name)
  if module is None:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  return getattr(importlib.import_module(f"{__name__}.{module}"), name)
