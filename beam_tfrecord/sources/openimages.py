"""Open Images box CSVs: `oidv6-train-annotations-bbox.csv`, `validation-annotations-bbox.csv`,
`test-annotations-bbox.csv` (V4 to V7), one file per split, with the class descriptions.

A box file has the header `ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,
IsTruncated,IsGroupOf,IsDepiction,IsInside` (V6's train file adds the eight extreme-click
columns XClick1X..XClick4Y, which are not read) and one row per box, coordinates as fractions
of the image size in the column order XMin, XMax, YMin, YMax. The image of a row is
`ImageID.jpg` under the image root (--images, or --images SPLIT=DIR; default the folder named
as the split beside the CSV, the layout of the official downloads: train/000002b66c9c498e.jpg,
else the CSV's folder). A file's split
is its SPLIT= prefix, else the word train, validation or test in its name, else train.

Class names come from the class descriptions (`LabelName,DisplayName`): --class-descriptions,
else the first of DESCRIPTION_FILES beside an input. V4 to V6's class-descriptions-boxable.csv
has no header, V7's oidv7-class-descriptions-boxable.csv has `LabelName,DisplayName`: a first
row whose LabelName is no machine id (/m/..., /g/...) is a header. An object's class is its
DisplayName ("Tortoise"); a DisplayName that two or more LabelNames share (V7's full
class-descriptions.csv has such names) stays distinct as `DisplayName (/m/...)`, for every
LabelName that has it, so that no two classes merge behind the user's back. The descriptions
are small (600 rows boxable, ~20,000 in V7's full list, capped at MAX_DESCRIPTIONS_BYTES):
they are read when the pipeline is built and travel with the DoFns.

Per row: IsGroupOf 1 -> is_crowd (0, -1: not); IsTruncated 1/0 -> truncated (-1: unknown, unset);
IsOccluded, IsDepiction, IsInside and Source have no field in the schemas and are not written.
A row of Confidence 0 (a verified absence, which the box files are not meant to hold) is no
box: its image is kept and the row reported as a 'negative_label' warning. A LabelName the
descriptions lack is an object-level 'unknown_class' error; an unusable value (a coordinate,
Confidence or flag that is no number, a row of the wrong width) an object-level error of its
row; a file that cannot be read or has no Open Images header a file-level error.

Reading is the csv format's (sources/csv/readers.py): a file over storage.lines.SPLIT_BYTES
(V6's 2.3 GB train file: 35 ranges) is read in byte ranges by any worker, one line a record
(csv read_range); the files are sorted by ImageID, but a range's edge may cut an image's rows,
so rows meet their image in a GroupByKey on (file, split, image root, ImageID); a line number
comes from the line counts of the ranges before it (a side input of one entry per range). On
the in-process runner one DoFn per file holds the rows by partition of ImageID in spill files
on local disk (csv HeldRows) and joins one partition at a time.

Largest element and memory, N rows in a file: plan, one header (13 or 21 columns); read, one
row (at most csv MAX_LINE_BYTES a line); group, one image's rows (Open Images: at most a few
hundred boxes; past sources.base.MAX_OBJECTS_PER_IMAGE rows the image is a too_many_objects
error, and neither path holds more of its rows than that); line offsets, one entry per range (N / 600,000 for 64 MB ranges); in-process,
~2 x 8 MB of buffers plus one partition (file size / 4 MB partitions).
"""
from __future__ import annotations

import collections
import math
import posixpath
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import (DEFAULT_SPLIT, Box, ErrorRecord,
                                         ImageAnnotation, InputError,
                                         ObjectAnnotation)
from beam_tfrecord.sources.base import SourceOutput
from beam_tfrecord.sources.csv.columns import WRONG_WIDTH
from beam_tfrecord.sources.csv.held import PARTITION_BYTES, SPILL_BUFFER_BYTES
from beam_tfrecord.sources.csv.readers import (JoinRows, PlanCsv, ReadRows,
                                               RowsOf, bounded, parsed_rows,
                                               too_many_rows)
from beam_tfrecord.storage import lines, paths
from beam_tfrecord.storage.files import exists, parent, read_text

HEADER = ("ImageID", "Source", "LabelName", "Confidence", "XMin", "XMax", "YMin", "YMax",
          "IsOccluded", "IsTruncated", "IsGroupOf", "IsDepiction", "IsInside")
# V6's oidv6-train-annotations-bbox.csv: the four extreme clicks of each box, after HEADER
CLICK_COLUMNS = ("XClick1X", "XClick2X", "XClick3X", "XClick4X",
                 "XClick1Y", "XClick2Y", "XClick3Y", "XClick4Y")
HEADERS = (HEADER, HEADER + CLICK_COLUMNS)

# the csv format's fields -> Open Images columns; the extra fields are carried in each row's dict
COLUMN_MAP = {"filename": "ImageID", "class": "LabelName", "xmin": "XMin", "xmax": "XMax",
              "ymin": "YMin", "ymax": "YMax", "confidence": "Confidence",
              "truncated": "IsTruncated", "group_of": "IsGroupOf"}
COORDINATES = ("xmin", "ymin", "xmax", "ymax")  # Box's order (the file's is XMin, XMax, ...)

IMAGE_SUFFIX = ".jpg"  # every Open Images image is ImageID.jpg
FILE_SPLITS = ("train", "validation", "test")  # words of the official file names
DESCRIPTION_FILES = ("class-descriptions-boxable.csv", "oidv7-class-descriptions-boxable.csv",
                     "oidv6-class-descriptions-boxable.csv", "oidv7-class-descriptions.csv",
                     "class-descriptions.csv")
# V7's full class-descriptions.csv (~20,000 classes) has ~600 KB; 16 MB is far past any real one
MAX_DESCRIPTIONS_BYTES = 16 << 20
DETECT_HEAD_BYTES = 4096  # --format auto and check read only this much of a box CSV


# ---------------------------------------------------------------------------------------------
# Pure functions: header, splits, class descriptions, rows


def is_box_header(line: str) -> bool:
  """Whether a CSV's first line is an Open Images box header (13 columns, or V6 train's 21)."""
  fields = tuple(f.strip() for f in line.lstrip("\ufeff").strip().split(","))
  return fields in HEADERS


def first_line(data: bytes) -> str:
  return data.split(b"\n", 1)[0].decode("utf-8-sig", "replace").rstrip("\r")


def split_of(split: Optional[str], uri: str) -> str:
  """The SPLIT= prefix, else train/validation/test as a word of the file name, else train."""
  if split:
    return split
  words = re.split(r"[-_.]", posixpath.basename(uri.replace("\\", "/")).lower())
  return next((s for s in FILE_SPLITS if s in words), DEFAULT_SPLIT)


def parse_descriptions(text: str) -> Dict[str, str]:
  """{LabelName: class name} of a class descriptions CSV (`LabelName,DisplayName` rows, an
  optional header). A DisplayName shared by several LabelNames becomes `DisplayName (mid)`
  for each. ValueError for a row that is not two non-empty fields, a LabelName given two
  names, or no rows."""
  import csv
  import io
  names: Dict[str, str] = {}
  reader = csv.reader(io.StringIO(text))
  first = True
  try:
    for row in reader:
      if not row or all(not v.strip() for v in row):
        continue
      if len(row) != 2 or not row[0].strip() or not row[1].strip():
        raise ValueError(f"line {reader.line_num}: expected LabelName,DisplayName, got "
                         f"{','.join(row)[:200]!r}")
      mid, name = row[0].strip(), row[1].strip()
      if first and not mid.startswith("/"):  # V7's LabelName,DisplayName header
        first = False
        continue
      first = False
      if names.setdefault(mid, name) != name:
        raise ValueError(f"line {reader.line_num}: {mid} is named both {names[mid]!r} and "
                         f"{name!r}")
  except csv.Error as e:
    raise ValueError(f"line {reader.line_num}: {e}") from None
  if not names:
    raise ValueError("it names no classes")
  shared = collections.Counter(names.values())
  return {mid: f"{name} ({mid})" if shared[name] > 1 else name for mid, name in names.items()}


# (class name, (xmin, ymin, xmax, ymax) normalized, is_crowd, truncated): what crosses the
# shuffle for one box (plain values: cheaper to encode than dataclasses)
Values = Tuple[str, Tuple[float, float, float, float], bool, Optional[bool]]


def _number(value, column: str) -> float:
  try:
    number = float(value)
  except (TypeError, ValueError):
    number = math.nan
  if not math.isfinite(number):
    raise InputError("parse", "wrong_type", f"{column} is {value!r}, not a number")
  return number


def _flag(value, column: str) -> Optional[bool]:
  """1 -> True, 0 -> False, -1 or empty (unknown) -> None."""
  text = (value or "").strip()
  if text in ("", "-1"):
    return None
  if text in ("0", "1"):
    return text == "1"
  raise InputError("parse", "wrong_type", f"{column} is {value!r}, not 1, 0 or -1")


def parse_row(row: Mapping[str, Optional[str]], classes: Mapping[str, str]
              ) -> Tuple[str, Optional[Values]]:
  """(ImageID, its box's Values) of one row as csv read_rows / read_range give it (fields of
  COLUMN_MAP); Values None for a row of Confidence 0 (no box). InputError for an unusable
  row: malformed_row, missing_field, wrong_type, unknown_class."""
  image_id = (row.get("filename") or "").strip()
  if row.get(WRONG_WIDTH):
    fields, expected = row[WRONG_WIDTH]
    raise InputError("parse", "malformed_row",
                     f"row for {image_id!r} has {fields} fields, the header {expected}")
  if not image_id:
    raise InputError("parse", "missing_field", "row has no ImageID")
  mid = (row.get("class") or "").strip()
  if not mid:
    raise InputError("parse", "missing_field", f"row for {image_id!r} has no LabelName")
  label = classes.get(mid)
  if label is None:
    raise InputError("validate", "unknown_class",
                     f"LabelName {mid} is not in the class descriptions")
  confidence = row.get("confidence")
  if confidence is not None and confidence.strip() != "":
    if _number(confidence, "Confidence") == 0:
      return image_id, None
  coords = tuple(_number(row.get(f), COLUMN_MAP[f]) for f in COORDINATES)
  group_of = _flag(row.get("group_of"), "IsGroupOf")
  truncated = _flag(row.get("truncated"), "IsTruncated")
  return image_id, (label, coords, bool(group_of), truncated)


def negative_label(uri: str, key: str, mid_or_label: str) -> ErrorRecord:
  return ErrorRecord(
      source=uri, stage="parse", reason="negative_label", key=key, level="warning",
      message=f"Confidence 0: a verified absence of {mid_or_label}, not a box; the image is "
      "kept without it")


def to_image(uri: str, split: str, image_root: str, image_id: str,
             values: Sequence[Optional[Values]], follow_symlinks: bool = False
             ) -> ImageAnnotation:
  """One image of its rows' Values (None: a Confidence 0 row, no object), in file order.
  InputError when ImageID.jpg is no safe name under the image root."""
  key, uri_of_image = paths.resolve(image_root, image_id + IMAGE_SUFFIX, False, follow_symlinks)
  objects = tuple(ObjectAnnotation(label=label, box=Box(*coords, normalized=True),
                                   is_crowd=crowd, truncated=truncated)
                  for label, coords, crowd, truncated in filter(None, values))
  return ImageAnnotation(key=key, uri=uri_of_image, source_id=image_id, source=uri,
                         objects=objects, split=split)


def _image_name(row) -> str:
  name = (row.get("filename") or "").strip()
  return name + IMAGE_SUFFIX if name else ""


# ---------------------------------------------------------------------------------------------
# The transform


def _group(element, follow_symlinks: bool,
           offsets: Optional[Mapping[Tuple[str, int], int]] = None):
  """((uri, split, image root, ImageID), [((start, n), Values or None), ...]) -> the image, or
  its error at the line of its first row (`offsets`: a big file's range lines -> file lines)."""
  (uri, split, image_root, image_id), rows = element
  rows, too_many = bounded(rows)
  start, n = rows[0][0]
  source = f"{uri}:{(offsets or {}).get((uri, start), 0) + n}"
  if too_many:
    yield beam.pvalue.TaggedOutput("errors", too_many_rows(source, image_id + IMAGE_SUFFIX))
    return
  try:
    yield to_image(uri, split, image_root, image_id, [v for _, v in rows], follow_symlinks)
  except InputError as e:
    yield beam.pvalue.TaggedOutput("errors", e.record(source, image_id + IMAGE_SUFFIX))


class _BoxRows(RowsOf):
  """A row: (None: the file's split, ImageID, (Values or None,)); a Confidence 0 row gives its
  image and then a negative_label warning."""

  def rows(self, rows, uri: str, state):
    for n, item in parsed_rows(rows, uri, lambda row: (parse_row(row, self.classes), row),
                               _image_name):
      if type(item) is not tuple:
        yield n, item
        continue
      (image_id, values), row = item
      yield n, (None, image_id, (values,))
      if values is None:
        mid = (row.get("class") or "").strip()
        yield n, negative_label(uri, image_id + IMAGE_SUFFIX, f"{mid} ({self.classes[mid]})")


class _ReadBoxes(_BoxRows, ReadRows):
  """csv ReadRows for box rows: a part from PlanCsv, (split, uri, image root, header or None,
  start, end) -> ((uri, split, image root, ImageID), ((start, n), Values or None)) per row."""

  def __init__(self, classes: Mapping[str, str]):
    super().__init__(COLUMN_MAP)
    self.classes = dict(classes)


class _JoinBoxes(_BoxRows, JoinRows):
  """csv JoinRows for box rows (the in-process runner's path): rows held by partition of
  ImageID (spilled to local disk past `buffer_bytes`), joined one partition at a time."""

  def __init__(self, classes: Mapping[str, str], follow_symlinks: bool, split_bytes: int,
               partition_bytes: int = PARTITION_BYTES, buffer_bytes: int = SPILL_BUFFER_BYTES):
    super().__init__(COLUMN_MAP, split_bytes, partition_bytes, buffer_bytes)
    self.classes, self.follow_symlinks = dict(classes), follow_symlinks

  def group(self, element):
    return _group(element, self.follow_symlinks)


class ReadOpenImages(beam.PTransform):
  """Open Images box CSVs -> SourceOutput.

  In: `inputs`, a list of (split, box CSV uri, image root), and `classes`, {LabelName: class
  name} (parse_descriptions).
  Out: one ImageAnnotation per ImageID per file (key ImageID.jpg under its root, source_id
  ImageID, normalized boxes in file order with is_crowd and truncated), and ErrorRecords for
  unusable rows (object level, at their file line), unknown classes, Confidence 0 rows
  (warnings), unsafe ImageIDs (image level) and unreadable files (file level).

  A file over `split_bytes` is read by many workers: its header by one (csv PlanCsv), its
  byte ranges by any (_ReadBoxes), its rows grouped by image in a GroupByKey. `in_process`:
  one DoFn per file joins its rows through spill files instead (_JoinBoxes), same results.
  """

  def __init__(self, inputs: Sequence[Tuple[str, str, str]], classes: Mapping[str, str],
               follow_symlinks: bool = False, in_process: bool = False,
               split_bytes: int = lines.SPLIT_BYTES):
    super().__init__()
    self.inputs, self.classes = list(inputs), dict(classes)
    self.follow_symlinks = follow_symlinks
    self.in_process, self.split_bytes = in_process, split_bytes

  def expand(self, root):
    files = root | "Files" >> beam.Create(self.inputs)
    if self.in_process:
      joined = files | "Join" >> beam.ParDo(_JoinBoxes(
          self.classes, self.follow_symlinks, self.split_bytes)).with_outputs(
              "errors", main="images")
      return SourceOutput(images=joined.images, errors=joined.errors)
    planned = (files
               | "SpreadFiles" >> beam.Reshuffle()
               | "Plan" >> beam.ParDo(PlanCsv(COLUMN_MAP, self.split_bytes))
               .with_outputs("rows", "errors", main="parts"))
    rows = (planned.parts
            | "SpreadParts" >> beam.Reshuffle()
            | "Parse" >> beam.ParDo(_ReadBoxes(self.classes)).with_outputs(
                "row_errors", "lines", "errors", main="rows"))
    offsets, row_errors = lines.line_numbers(rows.lines, rows.row_errors)
    grouped = (rows.rows
               | "GroupByImage" >> beam.GroupByKey()
               | "ToImage" >> beam.FlatMap(_group, self.follow_symlinks, offsets)
               .with_outputs("errors", main="images"))
    errors = ((planned.errors, rows.errors, row_errors, grouped.errors)
              | "Errors" >> beam.Flatten())
    return SourceOutput(images=grouped.images, errors=errors)


# ---------------------------------------------------------------------------------------------
# The launcher: inputs, class descriptions, checks


def inputs_of(config) -> List[Tuple[str, str, str]]:
  """(split, box CSV, image root) of each --input (split_of; root: --images, else the folder
  named as the split beside the CSV when there is one, as the official downloads lay the
  images out (validation/), else the CSV's folder)."""
  from beam_tfrecord.storage.files import is_dir
  result = []
  for split, uri, root in config.input_image_roots():
    split = split_of(split, uri)
    if root is None:
      beside = paths.join(parent(uri), split)
      root = beside if is_dir(beside) else parent(uri)
    result.append((split, uri, root))
  return result


def find_descriptions(config) -> str:
  """--class-descriptions, else the first of DESCRIPTION_FILES beside an input (in --input
  order); UsageError when there is none."""
  if config.class_descriptions:
    return config.class_descriptions
  folders = list(dict.fromkeys(parent(uri) for _, uri, _ in config.file_inputs()))
  for folder in folders:
    for name in DESCRIPTION_FILES:
      candidate = paths.join(folder, name)
      if exists(candidate):
        return candidate
  raise UsageError(f"no class descriptions ({DESCRIPTION_FILES[0]} or "
                   f"{DESCRIPTION_FILES[1]}) beside {', '.join(folders)}: give "
                   "--class-descriptions CSV (LabelName,DisplayName rows)")


def load_descriptions(uri: str) -> Dict[str, str]:
  """parse_descriptions of a file read with a budget; UsageError naming --class-descriptions."""
  from beam_tfrecord.sources.checks import check_file
  check_file(uri, "--class-descriptions")
  try:
    text = read_text(uri, MAX_DESCRIPTIONS_BYTES).decode("utf-8-sig")
    return parse_descriptions(text)
  except (InputError, ValueError, OSError) as e:  # UnicodeDecodeError is a ValueError
    message = e.message if isinstance(e, InputError) else str(e)
    raise UsageError(f"--class-descriptions {uri}: {message}") from None


def check_input(uri: str) -> None:
  """Before running: `uri` is a file whose first line is an Open Images box header (reads its
  first DETECT_HEAD_BYTES only)."""
  from beam_tfrecord.sources.checks import check_file
  from beam_tfrecord.storage.files import head
  check_file(uri, "--input")
  line = first_line(head(uri, DETECT_HEAD_BYTES))
  if not is_box_header(line):
    raise UsageError(f"--input {uri} is not an Open Images box CSV: its header is "
                     f"{line[:200]!r}, not {','.join(HEADER)}")


def detect(path: str) -> Optional[str]:
  """--format auto: a .csv whose first line is exactly an Open Images box header."""
  if not path.lower().endswith(".csv"):
    return None
  from beam_tfrecord.storage.files import head
  if is_box_header(first_line(head(path, DETECT_HEAD_BYTES))):
    return "Open Images box CSV"
  return None


# --- the source protocol (sources/registry.py) ---

OPTIONS = ("class_descriptions",)  # LabelName,DisplayName CSV
MASKS = False  # boxes only: Open Images' segmentations are PNG masks of their own, not read


def check(config) -> None:
  for _, uri, _ in config.file_inputs():
    check_input(uri)
  load_descriptions(find_descriptions(config))


def possible_splits(config) -> Optional[set]:
  return {split for split, _, _ in inputs_of(config)}


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  inputs = inputs_of(config)
  classes = load_descriptions(find_descriptions(config))
  return (root | "ReadOpenImages" >> ReadOpenImages(inputs, classes, config.follow_symlinks,
                                                    in_process=local),
          sorted({split for split, _, _ in inputs}))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each box CSV and the class descriptions; the image roots (inputs_of)."""
  inputs = inputs_of(config)
  patterns = [("file", uri) for _, uri, _ in inputs]
  patterns.append(("file", find_descriptions(config)))
  return patterns, list(dict.fromkeys(root for _, _, root in inputs))
