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

Scale: the file is cut into byte ranges of SPLIT_BYTES (a line belongs to the range it starts
in), each read by any worker, streaming: the largest element is one data row's
ImageAnnotation, a worker holds one line (at most MAX_LINE_BYTES; its parsed JSON ~10x that)
whatever the file's size. Nothing is grouped by image; error line numbers come from a side
input of one line count per range (O(file size / SPLIT_BYTES)). The launcher reads only the
head of each file (check, detect).
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import posixpath
from typing import (Any, Dict, Iterator, List, NamedTuple, Optional, Sequence,
                    Tuple, Union)
from urllib.parse import unquote, urlsplit

import apache_beam as beam

from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import SourceOutput, is_hidden
from beam_tfrecord.sources.csv import line_offsets, seek_line
from beam_tfrecord.storage import paths

# Budgets of one data row. A line holds one image's labels: 16 MB is ~500,000 polygon points
# (json.loads holds ~10x the line). Export v2 nests ~10 deep for a polygon point; nested
# classifications add ~3 levels each.
MAX_LINE_BYTES = 16 << 20
MAX_JSON_DEPTH = 64
# A file over SPLIT_BYTES is read in byte ranges of that size by any worker, as a big CSV is.
SPLIT_BYTES = 64 << 20
# The launcher reads at most this much of an export (check, detect): the first data row.
HEAD_BYTES = 4 << 20

EXTENSIONS = (".ndjson", ".jsonl", ".json")
BOX, POLYGON = "ImageBoundingBox", "ImagePolygon"
UNSUPPORTED = "unsupported_shape"


# ---------------------------------------------------------------------------------------------
# Pure functions: one line -> one data row


def load_line(raw: bytes) -> Dict[str, Any]:
  """One NDJSON line -> its JSON object. InputError: 'too_large' (over MAX_LINE_BYTES),
  'malformed_json' (not JSON, not UTF-8, not an object), 'too_deep' (over MAX_JSON_DEPTH)."""
  if len(raw) > MAX_LINE_BYTES:
    raise InputError("parse", "too_large", f"the line has {len(raw)} bytes, over the "
                     f"{MAX_LINE_BYTES} a data row may have")
  try:
    doc = json.loads(raw)
  except RecursionError:
    raise InputError("parse", "too_deep",
                     f"the JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
  except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
    raise InputError("parse", "malformed_json", f"{type(e).__name__}: {e}") from None
  if not isinstance(doc, dict):
    raise InputError("parse", "malformed_json",
                     f"the line is a JSON {type(doc).__name__}, not a data row object")
  if _deeper_than(doc, MAX_JSON_DEPTH):
    raise InputError("parse", "too_deep", f"the JSON nests deeper than {MAX_JSON_DEPTH} levels")
  return doc


def _deeper_than(doc: Any, limit: int) -> bool:
  stack = [(doc, 1)]
  while stack:
    node, depth = stack.pop()
    if depth > limit:
      return True
    if isinstance(node, dict):
      stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))
    elif isinstance(node, list):
      stack.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))
  return False


class DataRow(NamedTuple):
  """What one line says about its image: ids, the names it may have under the image root,
  its annotated size, its objects, and (object index, InputError, level) per object that was
  not kept (level 'object' or 'warning')."""
  id: str
  name: str                 # external_id, else global_key, else id: how errors name the row
  candidates: Tuple[Tuple[str, str], ...]  # (field, relative name), in lookup order
  row_data: Optional[str]
  width: Optional[int]
  height: Optional[int]
  objects: Tuple[ObjectAnnotation, ...]
  problems: Tuple[Tuple[int, InputError, str], ...]


def _text(value: Any) -> Optional[str]:
  return value.strip() if isinstance(value, str) and value.strip() else None


def _number(value: Any, what: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
    raise InputError("parse", "wrong_type", f"{what} is {value!r:.80}, not a finite number")
  return float(value)


def _size(value: Any) -> Optional[int]:
  """A media_attributes width/height: a positive whole number, else None (unknown)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  if not math.isfinite(value) or value <= 0 or value != int(value):
    return None
  return int(value)


def row_data_name(row_data: Optional[str]) -> Optional[str]:
  """The file name of a row_data URL or path (percent-decoded, query left out)."""
  if not row_data:
    return None
  if paths.is_remote(row_data):
    name = unquote(posixpath.basename(urlsplit(row_data).path))
  else:
    name = posixpath.basename(row_data.replace("\\", "/"))
  return name or None


def parse_object(obj: Any, include_masks: bool = False) -> Optional[ObjectAnnotation]:
  """One entry of annotations.objects -> an ObjectAnnotation (pixel box), or None for a kind
  that has no box (the caller reports it: unsupported_shape). InputError for a box or polygon
  that cannot be read."""
  if not isinstance(obj, dict):
    raise InputError("parse", "wrong_type", f"an object is {obj!r:.80}, not a JSON object")
  kind = annotation_kind(obj)
  if kind not in (BOX, POLYGON):
    return None
  label = _text(obj.get("name"))
  if label is None:
    raise InputError("parse", "missing_field", f"an {kind} has no `name` (its class)")
  if kind == BOX:
    bbox = obj.get("bounding_box")
    if not isinstance(bbox, dict):
      raise InputError("parse", "missing_field", f"{kind} {label!r} has no `bounding_box`")
    missing = [k for k in ("top", "left", "height", "width") if k not in bbox]
    if missing:
      raise InputError("parse", "missing_field",
                       f"{kind} {label!r}: bounding_box lacks {', '.join(missing)}")
    top, left, height, width = (_number(bbox[k], f"{kind} {label!r} bounding_box.{k}")
                                for k in ("top", "left", "height", "width"))
    if height < 0 or width < 0:
      raise InputError("validate", "bad_bbox",
                       f"{kind} {label!r} has a negative size {width}x{height}")
    return ObjectAnnotation(label=label, box=Box(left, top, left + width, top + height))
  points = obj.get("polygon")
  if not isinstance(points, list) or len(points) < 3:
    raise InputError("parse", "bad_polygon", f"{kind} {label!r}: `polygon` must be a list of "
                     "3 or more {x, y} points")
  flat: List[float] = []
  for i, point in enumerate(points):
    if not isinstance(point, dict) or "x" not in point or "y" not in point:
      raise InputError("parse", "bad_polygon", f"{kind} {label!r}: point {i} is "
                       f"{point!r:.80}, not {{x, y}}")
    flat += [_number(point["x"], f"{kind} {label!r} point {i} x"),
             _number(point["y"], f"{kind} {label!r} point {i} y")]
  xs, ys = flat[0::2], flat[1::2]
  segmentation = _polygon_mask(flat) if include_masks else None
  return ObjectAnnotation(label=label, box=Box(min(xs), min(ys), max(xs), max(ys)),
                          segmentation=segmentation)


def _polygon_mask(flat: Sequence[float]) -> str:
  from beam_tfrecord.records import masks
  return masks.to_json([list(flat)])


def annotation_kind(obj: Dict[str, Any]) -> str:
  """The object's annotation_kind; without one (hand-made files), what its geometry says."""
  kind = obj.get("annotation_kind")
  if isinstance(kind, str) and kind:
    return kind
  for key, inferred in (("bounding_box", BOX), ("polygon", POLYGON), ("point", "ImagePoint"),
                        ("line", "ImagePolyline"), ("mask", "ImageSegmentationMask")):
    if key in obj:
      return inferred
  return "unknown"


def _the_label(projects: Any) -> Dict[str, Any]:
  """The one label of a data row, over all its projects (InputError otherwise)."""
  if not isinstance(projects, dict):
    raise InputError("parse", "missing_field", "the data row has no `projects` object (export "
                     "v2 of a project, or of Catalog with its projects)")
  found = []
  for project_id, project in projects.items():
    labels = project.get("labels") if isinstance(project, dict) else None
    if not isinstance(labels, list):
      raise InputError("parse", "wrong_type", f"project {project_id}: `labels` is not a list")
    found += [(project_id, label) for label in labels]
  if not found:
    raise InputError("parse", "no_label", "the data row has no label in the export (not "
                     "labeled yet?): it is not converted")
  if len(found) > 1:
    where = sorted({p for p, _ in found})
    raise InputError("parse", "several_labels", f"the data row has {len(found)} labels (in "
                     f"project{'s' if len(where) > 1 else ''} {', '.join(where)}); one label "
                     "per data row is converted: export one project, without consensus labels")
  label = found[0][1]
  if not isinstance(label, dict):
    raise InputError("parse", "wrong_type", "a label is not a JSON object")
  performance = label.get("performance_details")
  if isinstance(performance, dict) and performance.get("skipped") is True:
    raise InputError("parse", "skipped_label", "the label was skipped by its labeler: the "
                     "image is not converted")
  return label


def parse_data_row(doc: Dict[str, Any], include_masks: bool = False,
                   source: str = "the export") -> DataRow:
  """One data row (load_line) -> DataRow. InputError for what costs the whole image: no
  data_row, not an image, no label or several, a skipped label, objects that are no list.
  Objects that cannot be read, and kinds without a box, are in DataRow.problems (`source`
  names the file in their messages)."""
  data_row = doc.get("data_row")
  if not isinstance(data_row, dict):
    raise InputError("parse", "missing_field", "the line has no `data_row` object: not a "
                     "Labelbox export v2 data row")
  row_id = _text(data_row.get("id")) or ""
  external_id, global_key = _text(data_row.get("external_id")), _text(data_row.get("global_key"))
  row_data = _text(data_row.get("row_data"))
  name = row_name(doc)
  if not name:
    raise InputError("parse", "missing_field", "the data row has no id, external_id or "
                     "global_key")
  media = doc.get("media_attributes")
  media = media if isinstance(media, dict) else {}
  mime = media.get("mime_type")
  if isinstance(mime, str) and mime and not mime.lower().startswith("image/"):
    raise InputError("parse", "unsupported_media", f"the data row is {mime}, not an image")
  label = _the_label(doc.get("projects"))
  annotations = label.get("annotations")
  annotations = annotations if isinstance(annotations, dict) else {}
  if "frames" in annotations:
    raise InputError("parse", "unsupported_media", "the label has `frames`: a video, not an "
                     "image")
  items = annotations.get("objects", [])
  if not isinstance(items, list):
    raise InputError("parse", "wrong_type", "annotations.objects is not a list")
  objects, problems = [], []
  for i, obj in enumerate(items):
    try:
      parsed = parse_object(obj, include_masks)
    except InputError as e:
      problems.append((i, e, "object"))
      continue
    if parsed is None:
      problems.append((i, InputError(
          "parse", UNSUPPORTED, f"object {i} of {source} is an {annotation_kind(obj)}, which "
          "has no box: only ImageBoundingBox and ImagePolygon are converted"), "warning"))
      continue
    objects.append(parsed)
  candidates = [(field, value) for field, value in (
      ("external_id", external_id), ("global_key", global_key),
      ("row_data file name", row_data_name(row_data))) if value]
  unique = tuple((field, value) for i, (field, value) in enumerate(candidates)
                 if value not in [v for _, v in candidates[:i]])  # global_key == external_id
  return DataRow(row_id or name, name, unique, row_data, _size(media.get("width")),
                 _size(media.get("height")), tuple(objects), tuple(problems))


def row_name(doc: Dict[str, Any]) -> Optional[str]:
  """How errors name a data row: its external_id, else its global_key, else its id."""
  data_row = doc.get("data_row")
  if not isinstance(data_row, dict):
    return None
  return next((t for t in map(_text, (data_row.get(k) for k in ("external_id", "global_key",
                                                                  "id"))) if t), None)


def is_url(text: str) -> bool:
  return text.lower().startswith(("http://", "https://"))


def locate(row: DataRow, image_root: str, allow_absolute: bool = False,
           follow_symlinks: bool = False, exists=None) -> Tuple[str, str]:
  """(key, uri) of a data row's image: the first of its candidate names that exists under
  `image_root`; else its row_data when that is a gs://, s3:// or local absolute path (with
  allow_absolute). InputError: missing_image, unreachable_url (an http(s) row_data: never
  fetched), absolute_path (row_data outside the root without allow_absolute)."""
  if exists is None:
    from beam_tfrecord.storage.files import exists
  tried, refused = [], []
  for field, name in row.candidates:
    try:
      key, uri = paths.resolve(image_root, name, False, follow_symlinks)
    except InputError as e:  # absolute, '..', a symlink out: never read, said below
      refused.append(f"{field} {name!r} ({e.reason})")
      continue
    if exists(uri):
      return key, uri
    tried.append(f"{field} {name!r}")
  looked = (f"none of {', '.join(tried)} is under {image_root}" if tried else
            f"it names no file to look for under {image_root}")
  if refused:
    looked += f" (not looked up: {', '.join(refused)})"
  data = row.row_data
  if data and is_url(data):
    raise InputError("locate", "unreachable_url", f"row_data {data} is a URL this tool does not "
                     f"fetch, and {looked}: download the images and give their folder as "
                     "--images")
  if data and (paths.is_remote(data) or os.path.isabs(data)):
    if not allow_absolute:
      raise InputError("locate", "absolute_path", f"{looked}; row_data {data} lies outside "
                       "the image root and is read only with --allow-absolute-paths")
    return paths.resolve(image_root, data, True, follow_symlinks)
  raise InputError("locate", "missing_image", f"{looked}; give --images DIR, the folder "
                   "holding the images")


# ---------------------------------------------------------------------------------------------
# Lines of a byte range


def read_range(fileobj, start: int, end: int, limit: Optional[int] = None
               ) -> Iterator[Tuple[int, Union[bytes, InputError]]]:
  """(n, line) for the n-th line (from 1) that starts in [start, end) of a file opened in
  binary: its bytes without the line break, or InputError 'too_large' for a line over `limit`
  (MAX_LINE_BYTES) bytes, skipped as it is read. A line that starts before `start` belongs to
  the range before. Memory: one line."""
  limit = MAX_LINE_BYTES if limit is None else limit
  at = seek_line(fileobj, start, end)
  number = 0
  while at < end:
    raw = fileobj.readline(limit + 2)  # the line, its \r\n, and one byte to see it is over
    if not raw:
      return
    at += len(raw)
    number += 1
    if at == len(raw) and raw.startswith(b"\xef\xbb\xbf"):  # a BOM at the start of the file
      raw = raw[3:]
    line = raw.rstrip(b"\r\n")
    if len(line) > limit:
      while raw[-1:] != b"\n":  # the rest of the line, dropped as it is read
        raw = fileobj.readline(1 << 20)
        if not raw:
          break
        at += len(raw)
      yield number, InputError("parse", "too_large", f"the line is longer than {limit} bytes, "
                               "the most a data row may have")
      continue
    yield number, line


# ---------------------------------------------------------------------------------------------
# The transform


def _file_size(uri: str) -> Optional[int]:
  from apache_beam.io.filesystems import FileSystems
  try:
    return FileSystems.get_filesystem(uri).size(uri)
  except Exception:  # missing or unreadable: reading it reports that
    return None


def _plan(task, split_bytes: int):
  """(split, uri, image root) -> (split, uri, image root, start, end) per byte range."""
  split, uri, image_root = task
  size = _file_size(uri)
  if size is None:
    yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
        source=uri, stage="read", reason="unreadable", key=uri, level="file",
        message="the export file cannot be read (missing, or no access)"))
    return
  for start in range(0, max(size, 1), split_bytes):
    yield split, uri, image_root, start, min(size, start + split_bytes)


class _ReadRange(beam.DoFn):
  """(split, uri, image root, start, end) -> an ImageAnnotation per data row that starts in
  the range. Tagged:
    line_errors (uri, start, n, ErrorRecord): a line's problems, its line number to complete;
    lines       (uri, (start, lines read, 0)): one per range, for line_offsets;
    errors      the file's ErrorRecord when it cannot be read.
  Largest element: one data row; memory: one line."""

  def __init__(self, allow_absolute: bool, follow_symlinks: bool, include_masks: bool):
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def process(self, part):
    from apache_beam.io.filesystems import FileSystems
    split, uri, image_root, start, end = part
    last = 0
    try:
      with FileSystems.open(uri, compression_type="uncompressed") as f:
        for n, line in read_range(f, start, end):
          last = n
          if isinstance(line, bytes) and not line.strip():
            continue
          yield from self._line(split, uri, image_root, start, n, line)
    except OSError as e:
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="read", reason="unreadable", key=uri, level="file",
          message=f"{type(e).__name__}: {e}"))
    yield beam.pvalue.TaggedOutput("lines", (uri, (start, last, 0)))

  def _line(self, split, uri, image_root, start, n, line):
    def error(e: InputError, key: str, level: str = "image"):
      return beam.pvalue.TaggedOutput("line_errors", (uri, start, n, e.record(uri, key, level)))

    doc = None
    try:
      if isinstance(line, InputError):
        raise line
      doc = load_line(line)
      row = parse_data_row(doc, self.include_masks, uri)
      key, image_uri = locate(row, image_root, self.allow_absolute, self.follow_symlinks)
    except Exception as e:  # the line's image is lost; a line that names no row: the file
      if not isinstance(e, InputError):  # unforeseen: report it, never kill the job
        e = InputError("parse", "unexpected_error", f"{type(e).__name__}: {e}")
      yield error(e, (row_name(doc) if doc is not None else None) or uri)
      return
    for _, problem, level in row.problems:
      yield error(problem, key, level)
    yield ImageAnnotation(key=key, uri=image_uri, source_id=row.id, source=uri,
                          objects=row.objects, split=split, width=row.width, height=row.height)


def _with_line(item, offsets) -> ErrorRecord:
  uri, start, n, record = item
  return dataclasses.replace(record, source=f"{uri}:{offsets.get((uri, start), 0) + n}")


class ReadLabelbox(beam.PTransform):
  """Labelbox export v2 NDJSON files -> SourceOutput.

  In: `inputs`, (split or None, ndjson uri, image root) each. Out: one ImageAnnotation per
  data row (pixel boxes, media_attributes' size as the annotated size, the data row id as
  source_id, the input's split), and ErrorRecords: per line (source FILE:LINE) for rows that
  cannot be converted, objects that cannot be read, and kinds without a box (warnings); per
  file when it cannot be read. Files are cut into byte ranges of `split_bytes`, each read by
  any worker; nothing is grouped.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]],
               allow_absolute: bool = False, follow_symlinks: bool = False,
               include_masks: bool = False, split_bytes: int = SPLIT_BYTES):
    super().__init__()
    self.inputs = list(inputs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks, self.split_bytes = include_masks, split_bytes

  def expand(self, root):
    planned = (root
               | "Files" >> beam.Create(self.inputs)
               | "Ranges" >> beam.FlatMap(_plan, self.split_bytes).with_outputs(
                   "errors", main="ranges"))
    read = (planned.ranges
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRows" >> beam.ParDo(_ReadRange(
                self.allow_absolute, self.follow_symlinks, self.include_masks)).with_outputs(
                    "line_errors", "lines", "errors", main="images"))
    offsets = beam.pvalue.AsSingleton(
        read.lines
        | "AllLines" >> beam.combiners.ToList()
        | "LineOffsets" >> beam.Map(line_offsets))
    numbered = read.line_errors | "LineNumbers" >> beam.Map(_with_line, offsets)
    errors = (planned.errors, read.errors, numbered) | "Errors" >> beam.Flatten()
    return SourceOutput(images=read.images, errors=errors)


# ---------------------------------------------------------------------------------------------
# Before running: the export file, detect and check (the launcher reads heads only)


def _candidate_files(folder: str) -> List[str]:
  from beam_tfrecord.storage.files import list_dir
  return sorted(name for name in list_dir(folder)[1]
                if name.lower().endswith((".ndjson", ".jsonl")) and not is_hidden(name))


def export_file(uri: str) -> str:
  """The NDJSON an input names: the file itself, or the one .ndjson/.jsonl file in a folder
  (UsageError when it holds none or several)."""
  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.storage.files import is_dir
  if not is_dir(uri):
    return uri
  found = _candidate_files(uri)
  if len(found) != 1:
    raise UsageError(f"--input {uri} is a folder holding {len(found) or 'no'} .ndjson files"
                     + (f" ({', '.join(found[:4])})" if found else "")
                     + ": give the Labelbox export file itself")
  return paths.join(uri, found[0])


def head_keys(uri: str, limit: int = HEAD_BYTES) -> Tuple[str, set]:
  """(kind, top-level keys) of the first JSON value of a file, reading at most `limit` bytes:
  kind 'object', 'array' or '' (not JSON); keys of an object (of an array's first object),
  streaming, up to where the head ends."""
  import ijson
  from apache_beam.io.filesystems import FileSystems
  kind, keys, depth = "", set(), 0
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    data = f.read(limit)
  data = data.lstrip(b"\xef\xbb\xbf")
  try:
    events = ijson.basic_parse(io.BytesIO(data), multiple_values=True)
    for n, (event, value) in enumerate(events):
      if n == 0:
        kind = {"start_map": "object", "start_array": "array"}.get(event, "")
        if not kind:
          break
      if event in ("start_map", "start_array"):
        depth += 1
      elif event in ("end_map", "end_array"):
        depth -= 1
        if depth == 0 or (kind == "array" and depth == 1):
          break
      elif event == "map_key" and depth == (1 if kind == "object" else 2):
        keys.add(value)
        if {"data_row", "projects"} <= keys or value in ("images", "annotations"):
          break  # enough to tell (a COCO file's first value is all of it)
  except Exception:  # not JSON, or the head ends inside the first value
    pass
  return kind, keys


def _is_export(uri: str) -> bool:
  kind, keys = head_keys(uri)
  return kind == "object" and {"data_row", "projects"} <= keys


def detect(path: str) -> Optional[str]:
  """--format auto: an .ndjson/.jsonl/.json file whose first data row has `data_row` and
  `projects`, or a folder holding exactly one such .ndjson/.jsonl file."""
  from beam_tfrecord.storage.files import is_dir
  if is_dir(path):
    found = _candidate_files(path)
    if len(found) == 1 and _is_export(paths.join(path, found[0])):
      return f"Labelbox export v2 {found[0]}"
    return None
  if path.lower().endswith(EXTENSIONS) and _is_export(path):
    return "Labelbox export v2 NDJSON"
  return None


def check_input(uri: str) -> None:
  """Before running: the export is a file whose first line is a Labelbox export v2 data row
  (what the head tells: a bad line further on is the workers' to report)."""
  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.sources.checks import check_file
  check_file(uri, "--input")
  try:
    kind, keys = head_keys(uri)
  except Exception as e:
    raise UsageError(f"--input {uri}: cannot read ({type(e).__name__}: {e})") from None
  if kind == "object" and "data_row" in keys:
    return
  if kind == "array" and ("data_row" in keys or {"Labeled Data", "Label"} & keys):
    old = "data_row" not in keys
    raise UsageError(f"--input {uri} is a JSON array" + (
        " (Labelbox's legacy export v1): export with export v2, one data row per line"
        if old else " of data rows (an export's result saved with json.dump): write one data "
        "row per line (NDJSON), as the export file has them"))
  what = ("a COCO JSON; use --format coco" if {"images", "annotations", "categories"} & keys
          else f"a JSON object with {', '.join(sorted(keys)[:6]) or 'no keys'}"
          if kind == "object" else "not JSON")
  raise UsageError(f"--input {uri} is not a Labelbox export v2 NDJSON (each line a data row "
                   f"with `data_row` and `projects`): it is {what}")


# --- the source protocol (sources/registry.py) ---

MASKS = True  # ImagePolygon: --include-masks rasterizes it
EXPORT_WHAT = "a Labelbox export v2 NDJSON"  # what each split folder of an export holds


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


def check(config) -> None:
  for item in config.inputs:
    check_input(export_file(paths.parse_assignment(item)[1]))


def possible_splits(config) -> Optional[set]:
  from beam_tfrecord.records.model import DEFAULT_SPLIT
  return {split or DEFAULT_SPLIT for split, _ in map(paths.parse_assignment, config.inputs)}


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  """The same path for every runner: no join, so nothing for the in-process runner to hold."""
  files = export_inputs(config)
  return (root | "ReadLabelbox" >> ReadLabelbox(files, config.allow_absolute_paths,
                                                config.follow_symlinks, config.include_masks),
          sorted({s for s, _, _ in files if s}))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each export file; the image roots (default: each export's folder). Images read from an
  absolute row_data are not listed."""
  files = export_inputs(config)
  return [("file", uri) for _, uri, _ in files], [image_root for _, _, image_root in files]
