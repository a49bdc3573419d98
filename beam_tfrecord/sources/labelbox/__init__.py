"""Labelbox export v2: NDJSON, one data row per line, read line by line on workers.

Each line is `{"data_row": {"id", "external_id", "global_key", "row_data", ...},
"media_attributes": {"width", "height", "mime_type"}, ..., "projects": {"<project id>":
{"name", "labels": [{"id", "annotations": {"objects": [...], "classifications": [],
"relationships": []}, "performance_details": {...}}], "project_details": {...}}}}`.

Objects: `ImageBoundingBox` (`bounding_box` {top, left, height, width} in pixels) and
`ImagePolygon` (`polygon` [{x, y}, ...] in pixels: its bounding box, and with --include-masks
the polygon as the object's mask). Any other kind (ImagePoint, ImagePolyline,
ImageSegmentationMask...) is an `unsupported_shape` warning naming the kind and the file. The
class is the object's `name` (the feature name the Labelbox UI shows), not `value` (the
ontology's snake_case form of it). Classifications and relationships are not read.

One label per data row: a row whose labels (over all its projects) are not exactly one is an
image-level error (`no_label`, `several_labels`: a Catalog export of two projects, or a
consensus project, would otherwise mix or double the boxes), as is a skipped label
(`skipped_label`) and a video or other non-image row (`unsupported_media`). Export v2 has no
splits: an input is 'train' unless given as SPLIT=FILE (or split by --split).

The image is found under the image root (--images, default the export's folder) by the data
row's `external_id`, else its `global_key`, else the file name of its `row_data`; each is a
relative name under the root (paths.resolve). Failing those, a `row_data` that is a gs://, s3://
or local absolute path is read from there, through Beam's file systems, with
--allow-absolute-paths only (an annotation file must not make the tool read files outside
the image root unasked: `absolute_path`); an http(s) URL is never fetched (no network):
`unreachable_url`, naming --images. `media_attributes` width and height are the annotated
size: the writer warns (`size_mismatch`) when the image header differs.

Scale: the file is cut into byte ranges of 64 MB (storage.lines; a line belongs to the range it starts
in), each read by any worker, streaming: the largest element is one data row's
ImageAnnotation, a worker holds one line (at most MAX_LINE_BYTES; its parsed JSON ~10x that)
whatever the file's size. Nothing is grouped by image; error line numbers come from a side
input of one line count per range (O(file size / SPLIT_BYTES)). The launcher reads only the
head of each file (check, detect).

  ndjson.py     the lines of a byte range; one line as its JSON object (the budgets)
  data_row.py   one data row -> DataRow: ids, candidate names, size, objects
  locate.py     where a data row's image is
  transform.py  ReadLabelbox, the Beam transform (imported when the pipeline is built)
  detection.py  which NDJSON an --input means, the head of an export, --format auto
  checks.py     the pre-run check
This module is the source protocol (sources/registry.py) and imports no Beam.
"""
from __future__ import annotations

import os
import posixpath
from typing import TYPE_CHECKING, List, Optional, Tuple

from beam_tfrecord.sources.labelbox.checks import check, check_input
from beam_tfrecord.sources.labelbox.data_row import (DataRow, parse_data_row,
                                                     row_data_name)
from beam_tfrecord.sources.labelbox.detection import detect, export_file
from beam_tfrecord.sources.labelbox.locate import locate
from beam_tfrecord.sources.labelbox.ndjson import load_line, read_range
from beam_tfrecord.storage import paths

if TYPE_CHECKING:
  from beam_tfrecord.sources.base import SourceOutput

__all__ = [
    "EXPORT_WHAT", "MASKS", "DataRow", "check", "check_input", "detect", "export_file",
    "export_inputs", "fingerprint_patterns", "load_line", "locate", "parse_data_row",
    "possible_splits", "read", "read_range", "row_data_name"]

MASKS = True  # ImagePolygon: --include-masks rasterizes it
OPTIONS = ()  # only the common settings (sources/options.COMMON)
EXPORT_WHAT = "a Labelbox export v2 NDJSON"  # what each split folder of an export holds


def __getattr__(name: str):
  if name == "ReadLabelbox":  # Beam: only when asked for
    from beam_tfrecord.sources.labelbox.transform import ReadLabelbox
    return ReadLabelbox
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def export_inputs(config) -> List[Tuple[Optional[str], str, str]]:
  """(split, export file, image root) of each --input: the root is its --images, else the
  export file's folder."""
  result = []
  for split, uri, image_root in config.input_image_roots():
    uri = export_file(uri)
    if image_root is None:
      image_root = posixpath.dirname(uri) if paths.is_remote(uri) else (
          os.path.dirname(uri) or ".")
    result.append((split, uri, image_root))
  return result


def possible_splits(config) -> Optional[set]:
  from beam_tfrecord.records.model import DEFAULT_SPLIT
  return {split or DEFAULT_SPLIT for split, _ in map(paths.parse_assignment, config.inputs)}


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  """The same path for every runner: no join, so nothing for the in-process runner to hold."""
  from beam_tfrecord.sources.labelbox.transform import ReadLabelbox
  files = export_inputs(config)
  return (root | "ReadLabelbox" >> ReadLabelbox(files, config.allow_absolute_paths,
                                                config.follow_symlinks, config.include_masks),
          sorted({s for s, _, _ in files if s}))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each export file; the image roots (default: each export's folder). Images read from an
  absolute row_data are not listed."""
  files = export_inputs(config)
  return [("file", uri) for _, uri, _ in files], [image_root for _, _, image_root in files]
