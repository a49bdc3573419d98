"""TF Object Detection CSV: `filename,width,height,class,xmin,ymin,xmax,ymax`, one row per object.

That is the layout `xml_to_csv.py` writes. Other layouts are read through a column mapping
(`filename=path,class=label`); a `split` column, when mapped or present, gives each image its
split. A row whose class and box are all empty stands for an image without objects. A file
without any box column is a classification listing (path and label columns, optional split):
its rows give image-level labels. Files are streamed on workers; rows meet their image in a
GroupByKey.
"""
from __future__ import annotations

import math
import os
import posixpath
from typing import (Any, Dict, Iterator, List, Mapping, Optional, Sequence,
                    Tuple, Union)

import apache_beam as beam

from beam_tfrecord.prepare.splitting import check_split_name
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import SourceOutput
from beam_tfrecord.storage import paths

FIELDS = ("filename", "width", "height", "class", "xmin", "ymin", "xmax", "ymax", "split")
REQUIRED = ("filename", "class", "xmin", "ymin", "xmax", "ymax")
LISTING_REQUIRED = ("filename", "class")  # a classification listing: no box columns
BOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")
WRONG_WIDTH = "__width__"  # marks a row whose field count differs from the header's
LISTING = "__listing__"    # marks a row of a classification listing (no box columns)


def parse_column_map(text: Optional[str]) -> Dict[str, str]:
  """'filename=path,class=label' -> {field: column}; unmapped fields keep their own name."""
  mapping = {field: field for field in FIELDS}
  if not text:
    return mapping
  for part in text.split(","):
    field, sep, column = part.partition("=")
    field, column = field.strip(), column.strip()
    if not sep or field not in FIELDS or not column:
      raise ValueError(f"bad column mapping {part!r}: expected FIELD=COLUMN with FIELD one of "
                       f"{', '.join(FIELDS)}")
    mapping[field] = column
  return mapping


def _empty(value: Any) -> bool:
  return value is None or (isinstance(value, float) and math.isnan(value)) or (
      isinstance(value, str) and not value.strip())


def _float(value: Any, field: str) -> float:
  try:
    return float(value)
  except (TypeError, ValueError, OverflowError):
    raise InputError("parse", "wrong_type", f"{field} is {value!r}, not a number") from None


def _int(value: Any, field: str) -> Optional[int]:
  if _empty(value):
    return None
  number = _float(value, field)
  if not math.isfinite(number) or number != int(number):
    raise InputError("parse", "wrong_type", f"{field} is {value!r}, not a whole number")
  return int(number)


def parse_row(row: Mapping[str, Any], normalized: bool = False
              ) -> Tuple[str, Optional[int], Optional[int], Union[ObjectAnnotation, str, None],
                         Optional[str]]:
  """(filename, width, height, object or None, split or None) of one row, keyed by field.
  In a classification listing (a row read_rows marked LISTING) the object is the class name.
  `normalized` (--csv-normalized): the box is in fractions of the image size, not pixels."""
  filename = row.get("filename")
  if row.get(WRONG_WIDTH):
    fields, expected = row[WRONG_WIDTH]
    raise InputError("parse", "malformed_row",
                     f"row for {filename!r} has {fields} fields, the header {expected}")
  if _empty(filename):
    raise InputError("parse", "missing_field", "row has no filename")
  filename = str(filename)
  width, height = _int(row.get("width"), "width"), _int(row.get("height"), "height")
  split = None if _empty(row.get("split")) else str(row["split"]).strip()
  if split is not None:
    try:
      check_split_name(split)
    except ValueError as e:
      raise InputError("parse", "bad_split", f"row for {filename!r}: {e}") from None
  label = row.get("class")
  if row.get(LISTING):
    if _empty(label):
      raise InputError("parse", "missing_field", f"row for {filename!r} has no class")
    return filename, width, height, str(label).strip(), split
  coords = [row.get(f) for f in BOX_FIELDS]
  if _empty(label) and all(_empty(c) for c in coords):
    return filename, width, height, None, split
  if _empty(label):
    raise InputError("parse", "missing_field", f"row for {filename!r} has a box but no class")
  missing = [f for f, c in zip(BOX_FIELDS, coords) if _empty(c)]
  if missing:
    raise InputError("parse", "missing_field", f"row for {filename!r} lacks {', '.join(missing)}")
  box = Box(*(_float(c, f) for f, c in zip(BOX_FIELDS, coords)), normalized=normalized)
  return filename, width, height, ObjectAnnotation(label=str(label), box=box), split


# A file whose box coordinates all lie within [0, NORMALIZED_LIMIT] most likely holds fractions
# of the image size (1, plus the slack of boxes drawn past the edge), not pixels.
NORMALIZED_LIMIT = 1.5


class CoordinateRange:
  """The range of a file's finite box coordinates, followed row by row (constant memory)."""

  def __init__(self) -> None:
    self.boxes, self.low, self.high = 0, math.inf, -math.inf

  def add(self, box: Box) -> None:
    finite = [c for c in (box.xmin, box.ymin, box.xmax, box.ymax) if math.isfinite(c)]
    if finite:
      self.boxes += 1
      self.low, self.high = min(self.low, *finite), max(self.high, *finite)

  def looks_normalized(self) -> bool:
    return self.boxes > 0 and 0 <= self.low and self.high <= NORMALIZED_LIMIT


def looks_normalized_warning(uri: str, boxes: int) -> ErrorRecord:
  return ErrorRecord(
      source=uri, stage="parse", reason="looks_normalized", key=uri, level="warning",
      message=f"all {boxes} boxes have coordinates within [0, {NORMALIZED_LIMIT:g}]: they look "
      "normalized (fractions of the image size) but were read as pixels; if they are "
      "fractions, convert again with --csv-normalized")


# The longest line a CSV may have (TF-OD rows are under 200 characters): a file without line
# breaks would otherwise be read whole into one string, and split into as many fields.
MAX_LINE_CHARS = 1 << 20


def _bounded_lines(text, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
  """The lines of `text`, each read at most `limit` + 1 characters at a time; InputError
  'too_large' for a longer one."""
  number = 0
  while True:
    line = text.readline(limit + 1)
    if not line:
      return
    number += 1
    if len(line) > limit and line[-1] not in "\r\n":
      raise InputError("parse", "too_large", f"line {number} is longer than {limit} characters:"
                       " not a CSV of annotations")
    yield line


def read_rows(fileobj, column_map: Mapping[str, str]) -> Iterator[Tuple[int, Dict[str, Any]]]:
  """(line number, {field: value}) for every data row, streaming.

  Python's csv module rather than pandas: pandas parses in chunks and one malformed row fails
  the whole chunk, while here a row with too many or too few fields is handed on marked
  (parse_row then rejects just that row). Raises InputError for a missing column, an empty or
  undecodable file, or a syntax error (rows before it have been yielded).
  """
  import csv
  import io
  text = io.TextIOWrapper(fileobj, encoding="utf-8-sig", newline="")
  reader = csv.reader(_bounded_lines(text), skipinitialspace=True, strict=True)  # strict: an
  # open quote at the end of the file is an error, not one huge field (and a field is at most
  # csv.field_size_limit(), 128 kB unless raised)
  try:
    header = next(reader, None)
    if not header:
      raise InputError("parse", "malformed_csv", "the CSV file is empty")
    header = [h.strip() for h in header]
    listing = not any(column_map[f] in header for f in BOX_FIELDS)
    required = LISTING_REQUIRED if listing else REQUIRED
    missing = [column_map[f] for f in required if column_map[f] not in header]
    if missing:
      raise InputError("parse", "missing_column",
                       f"CSV has no column(s) {missing}; columns are {header}")
    index = {f: header.index(c) for f, c in column_map.items() if c in header}
    for values in reader:
      if not values or (len(values) == 1 and not values[0].strip()):
        continue  # blank line
      row: Dict[str, Any] = {f: values[i] if i < len(values) else None for f, i in index.items()}
      if len(values) != len(header):
        row[WRONG_WIDTH] = (len(values), len(header))
      if listing:
        row[LISTING] = True
      yield reader.line_num, row
  except (csv.Error, UnicodeDecodeError) as e:
    raise InputError("parse", "malformed_csv",
                     f"line {reader.line_num}: {type(e).__name__}: {e}") from None
  finally:
    text.detach()  # leave the underlying file to its owner


def check_input(uri: str, column_map: Mapping[str, str]) -> None:
  """Before running: `uri` is a CSV whose header has the mapped columns and a first row."""
  from apache_beam.io.filesystems import FileSystems

  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.sources.checks import check_file, sniff_text
  from beam_tfrecord.storage.files import head
  check_file(uri, "--input")
  kind = sniff_text(head(uri))
  if kind in ("json", "xml"):
    raise UsageError(f"--input {uri} is not a CSV file: it looks like "
                     + ("JSON; use --format coco" if kind == "json" else "XML; use --format voc"))
  try:
    with FileSystems.open(uri, compression_type="uncompressed") as f:
      if next(read_rows(f, column_map), None) is None:
        raise UsageError(f"--input {uri} has a header but no rows: no images to convert")
  except InputError as e:
    if e.reason == "missing_column":
      raise UsageError(f"--input {uri}: {e.message}; map your column names with --csv-columns "
                       "FIELD=COLUMN,... (fields: " + ", ".join(FIELDS) + ")") from None
    if e.reason == "malformed_csv" and "empty" in e.message:
      raise UsageError(f"--input {uri} is empty") from None
    # a syntax error later in the file: the pipeline reports it and keeps the rows before it


class _ParseCsv(beam.DoFn):
  """(split, csv_uri, image_root) -> ((split, image_root, filename), row) and errors."""

  def __init__(self, column_map: Mapping[str, str], normalized: bool = False):
    self.column_map = dict(column_map)
    self.normalized = normalized

  def process(self, task):
    from apache_beam.io.filesystems import FileSystems
    split, uri, image_root = task
    coordinates = CoordinateRange()  # decided per file here: no pass over the whole CSV
    try:
      with FileSystems.open(uri, compression_type="uncompressed") as f:
        for line, row in read_rows(f, self.column_map):
          try:
            filename, width, height, obj, row_split = parse_row(row, self.normalized)
          except InputError as e:
            name = row.get("filename")  # the row's image when it names one, else the file
            yield beam.pvalue.TaggedOutput("errors", e.record(
                f"{uri}:{line}", name.strip() if name and name.strip() else uri,
                level="object"))
            continue
          if isinstance(obj, ObjectAnnotation):
            coordinates.add(obj.box)
          yield (uri, row_split or split, image_root, filename), (line, width, height, obj)
      if not self.normalized and coordinates.looks_normalized():
        yield beam.pvalue.TaggedOutput("errors", looks_normalized_warning(uri, coordinates.boxes))
      for filename in unlisted_candidates(uri, image_root):
        yield (uri, split, image_root, filename), (BESIDE, None, None, None)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level="file"))
    except OSError as e:
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="read", reason="unreadable", message=str(e), key=uri, level="file"))


# Roboflow's CSV export has rows only for images with boxes; its background images sit beside
# `_annotations.csv` with no row. They are kept as images without objects, as the same export
# in COCO, VOC or YOLO form keeps them; "line" BESIDE marks them (after every real row).
ROBOFLOW_CSV = "_annotations.csv"
BESIDE = 1 << 62


def unlisted_candidates(uri: str, image_root: str) -> Iterator[str]:
  """Image files beside a Roboflow `_annotations.csv` whose images are in its own folder:
  every one is a candidate; group_image keeps those that no row names as backgrounds."""
  from beam_tfrecord.sources.base import image_extensions
  from beam_tfrecord.storage.files import list_dir, parent
  if posixpath.basename(uri.replace("\\", "/")) != ROBOFLOW_CSV:
    return
  same = (parent(uri).rstrip("/") == image_root.rstrip("/") if paths.is_remote(uri) else
          os.path.normpath(parent(uri)) == os.path.normpath(image_root))
  if not same:
    return
  extensions = image_extensions()
  for name in list_dir(image_root)[1]:
    if not name.startswith(".") and "." + name.rsplit(".", 1)[-1].lower() in extensions:
      yield name


def group_image(element, allow_absolute: bool, follow_symlinks: bool = False):
  """Rows of one image -> ImageAnnotation (objects in file order) or an error."""
  (uri, split, image_root, filename), rows = element
  rows = sorted(rows, key=lambda r: r[0])
  source = uri if rows[0][0] == BESIDE else f"{uri}:{rows[0][0]}"
  try:
    key, image_uri = paths.resolve(image_root, filename, allow_absolute, follow_symlinks)
  except InputError as e:
    yield beam.pvalue.TaggedOutput("errors", e.record(source, filename))
    return
  sizes = {(w, h) for _, w, h, _ in rows if w is not None or h is not None}
  if len(sizes) > 1:
    yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
        source=source, stage="parse", reason="inconsistent_size", key=key, level="warning",
        message=f"rows of {filename!r} give different sizes {sorted(sizes, key=repr)}; "
        "the image header decides"))
  width, height = sorted(sizes, key=repr)[0] if len(sizes) == 1 else (None, None)
  objects = tuple(obj for _, _, _, obj in rows if isinstance(obj, ObjectAnnotation))
  labels = tuple(dict.fromkeys(obj for _, _, _, obj in rows if isinstance(obj, str)))
  yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri, objects=objects,
                        split=split, width=width, height=height, labels=labels)


class ReadCsv(beam.PTransform):
  """TF OD CSV files -> SourceOutput.

  In: `inputs`, a list of (split or None, csv_uri, image_root), and a column mapping.
  Out: one ImageAnnotation per distinct filename per file (rows grouped by image), with split
  from the split column or the input, and ErrorRecords for unusable rows.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]],
               column_map: Optional[Mapping[str, str]] = None, allow_absolute: bool = False,
               follow_symlinks: bool = False, normalized: bool = False):
    super().__init__()
    self.inputs = list(inputs)
    self.column_map = dict(column_map or parse_column_map(None))
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.normalized = normalized  # --csv-normalized

  def expand(self, root):
    rows = (root
            | "Files" >> beam.Create(self.inputs)
            | "Spread" >> beam.Reshuffle()
            | "Parse" >> beam.ParDo(_ParseCsv(self.column_map, self.normalized)).with_outputs(
                "errors", main="rows"))
    grouped = (rows.rows
               | "GroupByImage" >> beam.GroupByKey()
               | "ToImage" >> beam.FlatMap(group_image, self.allow_absolute,
                                            self.follow_symlinks).with_outputs(
                   "errors", main="images"))
    errors = (rows.errors, grouped.errors) | "Errors" >> beam.Flatten()
    return SourceOutput(images=grouped.images, errors=errors)


def is_listing(uri: str, column_map: Mapping[str, str]) -> bool:
  """True when the CSV's header has no box column: a classification listing."""
  import csv
  import io

  from apache_beam.io.filesystems import FileSystems
  try:
    with FileSystems.open(uri, compression_type="uncompressed") as f:
      first = f.readline().decode("utf-8-sig")
  except Exception:  # unreadable or not text: the source reports it
    return False
  header = [h.strip() for h in next(csv.reader(io.StringIO(first)), [])]
  return bool(header) and not any(column_map[f] in header for f in BOX_FIELDS)


def detect(path: str) -> Optional[str]:
  """--format auto: a .csv file, or a folder holding Roboflow's _annotations.csv."""
  from beam_tfrecord.storage.files import list_dir
  if path.lower().endswith(".csv"):
    return "CSV file"
  if "_annotations.csv" in list_dir(path)[1]:
    return "_annotations.csv"
  return None


# --- the source protocol (sources/registry.py) ---

MASKS = False
EXPORT_FILE = "_annotations.csv"  # the file in each split folder of a Roboflow export


def check(config) -> None:
  for item in config.inputs:
    check_input(paths.parse_assignment(item)[1], parse_column_map(config.csv_columns))


def possible_splits(config) -> Optional[set]:
  return None  # a split column can name any


def image_level(config) -> bool:
  """Classification listings (no box columns) are image-level: the classification schema."""
  columns = parse_column_map(config.csv_columns)
  return all(is_listing(uri, columns) for _, uri, _ in config.file_inputs())


def read(root, config, *, first_id: int, in_process: bool) -> Tuple[SourceOutput, List[str]]:
  inputs = config.file_inputs()
  return (root | "ReadCsv" >> ReadCsv(inputs, parse_column_map(config.csv_columns),
                                      config.allow_absolute_paths, config.follow_symlinks,
                                      config.csv_normalized),
          sorted({s for s, _, _ in inputs if s}))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each annotation file; the image roots (default: each annotation file's directory)."""
  inputs = config.file_inputs()
  return [("file", uri) for _, uri, _ in inputs], [root for _, _, root in inputs]
