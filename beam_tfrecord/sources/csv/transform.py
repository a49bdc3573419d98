"""TF Object Detection CSV: `filename,width,height,class,xmin,ymin,xmax,ymax`, one row per object.

That is the layout `xml_to_csv.py` writes. Other layouts are read through a column mapping
(`filename=path,class=label`); a `split` column, when mapped or present, gives each image its
split. A row whose class and box are all empty stands for an image without objects. A file
without any box column is a classification listing (path and label columns, optional split):
its rows give image-level labels.

Files are read on workers. A file over SPLIT_BYTES is read in parallel: a worker reads its
header (one record), then the rest is cut into byte ranges of SPLIT_BYTES that any worker reads
line by line, as Beam's ReadAllFromText does; there every line is a record of its own, so a
quoted field holding a line break is reported (malformed_row), never read across a range's
edge. A smaller file is one range, read by the csv module whole (line breaks inside quotes
allowed, reading stops at a syntax error). Rows meet their image in a GroupByKey, or on the
in-process runner in storage.spill partitions by image name, joined one partition at a time.
"""
from __future__ import annotations

import dataclasses
import math
import os
import posixpath
from typing import (Any, Dict, Iterator, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

import apache_beam as beam

from beam_tfrecord.records.model import check_split_name
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


Coords = Tuple[float, float, float, float]


def parse_values(row: Mapping[str, Any]) -> Tuple[str, Optional[int], Optional[int],
                                                  Optional[str], Optional[Coords], Optional[str]]:
  """(filename, width, height, label, box, split) of one row as plain values (what crosses the
  shuffle, cheaper to encode than dataclasses): an object has a label and a box (xmin, ymin,
  xmax, ymax); a classification listing's row (marked LISTING) a label and no box; a row with
  an empty class and box neither. InputError for an unusable row."""
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
    return filename, width, height, str(label).strip(), None, split
  coords = [row.get(f) for f in BOX_FIELDS]
  if _empty(label) and all(_empty(c) for c in coords):
    return filename, width, height, None, None, split
  if _empty(label):
    raise InputError("parse", "missing_field", f"row for {filename!r} has a box but no class")
  missing = [f for f, c in zip(BOX_FIELDS, coords) if _empty(c)]
  if missing:
    raise InputError("parse", "missing_field", f"row for {filename!r} lacks {', '.join(missing)}")
  box = tuple(_float(c, f) for f, c in zip(BOX_FIELDS, coords))
  return filename, width, height, str(label), box, split


def to_object(label: Optional[str], box: Optional[Coords], normalized: bool = False
              ) -> Union[ObjectAnnotation, str, None]:
  """parse_values' label and box -> an ObjectAnnotation, a listing's class name, or None."""
  if box is not None:
    return ObjectAnnotation(label=label, box=Box(*box, normalized=normalized))
  return label


def parse_row(row: Mapping[str, Any], normalized: bool = False
              ) -> Tuple[str, Optional[int], Optional[int], Union[ObjectAnnotation, str, None],
                         Optional[str]]:
  """(filename, width, height, object or None, split or None) of one row, keyed by field.
  In a classification listing (a row read_rows marked LISTING) the object is the class name.
  `normalized` (--csv-normalized): the box is in fractions of the image size, not pixels."""
  filename, width, height, label, box, split = parse_values(row)
  return filename, width, height, to_object(label, box, normalized), split


# A file whose box coordinates all lie within [0, NORMALIZED_LIMIT] most likely holds fractions
# of the image size (1, plus the slack of boxes drawn past the edge), not pixels.
NORMALIZED_LIMIT = 1.5


class CoordinateRange:
  """The range of a file's finite box coordinates, followed row by row (constant memory)."""

  def __init__(self) -> None:
    self.boxes, self.low, self.high = 0, math.inf, -math.inf

  def add(self, box: Box) -> None:
    self.add_coords((box.xmin, box.ymin, box.xmax, box.ymax))

  def add_coords(self, coords: Coords) -> None:
    finite = [c for c in coords if math.isfinite(c)]
    if finite:
      self.boxes += 1
      self.low, self.high = min(self.low, *finite), max(self.high, *finite)

  def state(self) -> Tuple[int, float, float]:
    return self.boxes, self.low, self.high

  @classmethod
  def merged(cls, states) -> "CoordinateRange":
    """The range of several parts of a file (their state())."""
    seen = cls()
    for boxes, low, high in states:
      seen.boxes += boxes
      seen.low, seen.high = min(seen.low, low), max(seen.high, high)
    return seen

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


def _columns(header: List[str], column_map: Mapping[str, str]) -> Tuple[Dict[str, int], bool]:
  """({field: column index}, is a classification listing) of a header; InputError
  'missing_column' when a required column is missing."""
  header = [h.strip() for h in header]
  listing = not any(column_map[f] in header for f in BOX_FIELDS)
  required = LISTING_REQUIRED if listing else REQUIRED
  missing = [column_map[f] for f in required if column_map[f] not in header]
  if missing:
    raise InputError("parse", "missing_column",
                     f"CSV has no column(s) {missing}; columns are {header}")
  return {f: header.index(c) for f, c in column_map.items() if c in header}, listing


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
    index, listing = _columns(header, column_map)
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


# --- big files: a header, then byte ranges read line by line ---

# A file over SPLIT_BYTES is read in ranges of that size, each by any worker (Open Images'
# 2.2 GB box CSV: 35 ranges); a smaller one by one worker, whole.
SPLIT_BYTES = 64 << 20
# A line of MAX_LINE_CHARS characters takes at most this many bytes in UTF-8 (with its \r\n).
MAX_LINE_BYTES = 4 * MAX_LINE_CHARS + 2


class CsvHeader(NamedTuple):
  """What a worker needs to read a range of a big CSV: the header's columns and where the
  rows start. Small (one entry per mapped column) whatever the file's size."""
  index: Tuple[Tuple[str, int], ...]  # (field, column index) of each mapped column present
  columns: int                        # fields in the header
  listing: bool                       # no box column: a classification listing
  end: int                            # byte offset of the first data line
  lines: int                          # physical lines the header takes (1 unless quoted)


def _too_large(number: Optional[int] = None) -> InputError:
  """`number`: the file's line number, when known (a range knows only its own count)."""
  line = "line" if number is None else f"line {number}"
  return InputError("parse", "too_large", f"{line} is longer than {MAX_LINE_CHARS} "
                    "characters: not a CSV of annotations")


def _is_too_long(raw: bytes, text: Optional[str] = None) -> bool:
  """The line (read with readline(MAX_LINE_BYTES + 1)) has more than MAX_LINE_CHARS characters
  before its line break: as _bounded_lines judges a line read as text."""
  if len(raw) > MAX_LINE_BYTES and raw[-1:] != b"\n":
    return True
  if len(raw) <= MAX_LINE_CHARS:
    return False  # the common case: no decoding needed to know
  text = raw.decode("utf-8", "replace") if text is None else text
  return len(text.rstrip("\r\n")) > MAX_LINE_CHARS


def read_header(fileobj, column_map: Mapping[str, str]) -> CsvHeader:
  """The header record of a CSV opened in binary at its start (reads that record only, at
  most a few MB); InputError as read_rows gives for the same header (empty, undecodable,
  missing_column, too_large, malformed_csv)."""
  import csv
  taken = [0, 0]  # bytes, lines

  def lines():
    while True:
      raw = fileobj.readline(MAX_LINE_BYTES + 1)
      if not raw:
        return
      taken[0] += len(raw)
      taken[1] += 1
      text = raw.decode("utf-8-sig" if taken[1] == 1 else "utf-8")
      if _is_too_long(raw, text):
        raise _too_large(taken[1])
      yield text

  reader = csv.reader(lines(), skipinitialspace=True, strict=True)
  try:
    header = next(reader, None)
  except (csv.Error, UnicodeDecodeError) as e:
    raise InputError("parse", "malformed_csv",
                     f"line {reader.line_num}: {type(e).__name__}: {e}") from None
  if not header:
    raise InputError("parse", "malformed_csv", "the CSV file is empty")
  index, listing = _columns(header, column_map)
  return CsvHeader(tuple(index.items()), len(header), listing, taken[0], taken[1])


class _OneLine:
  """Hands a csv.reader one line at a time: a record cannot run on into the next line (the
  reader raises 'unexpected end of data' instead)."""
  __slots__ = ("line",)

  def __init__(self) -> None:
    self.line: Optional[str] = None

  def __iter__(self) -> "_OneLine":
    return self

  def __next__(self) -> str:
    line, self.line = self.line, None
    if line is None:
      raise StopIteration
    return line


QUOTED_BREAK = ("line has an odd number of quote characters: a quoted field holding a line "
                "break (or a stray quote). A big CSV is read in parallel, line by line, where a "
                "line break inside quotes cannot be read: remove such line breaks")


def seek_line(fileobj, start: int, end: int, first: int = 0) -> int:
  """Put a file opened in binary at the first line that starts in [start, end), and return
  its offset (end or more when no line does). A line that starts before `start` belongs to the
  range before, so the lines a range holds do not depend on where the ranges are cut. `first`:
  where the file's lines begin (a CSV's rows: after its header). The skipped end of a line is
  read in 1 MB parts, and no further than `end`."""
  if start <= first:
    fileobj.seek(start)
    return start
  fileobj.seek(start - 1)
  at = start - 1
  while True:
    part = fileobj.readline(1 << 20)
    at += len(part)
    if not part or part[-1:] == b"\n" or at >= end:
      return at


def read_range(fileobj, header: CsvHeader, start: int, end: int
               ) -> Iterator[Tuple[int, Union[Dict[str, Any], InputError, None]]]:
  """(n, row) for the n-th line (from 1) that starts in [start, end) of a CSV opened in binary
  whose header is `header` (start >= header.end): the row as read_rows gives it, None for a
  blank line, or the InputError of that line alone (malformed_row: undecodable, a csv syntax
  error, an odd number of quotes; too_large). Every line is one record, so the rows do not
  depend on where the ranges are cut: a line that starts before `start` belongs to the range
  before. Memory: one line (at most MAX_LINE_BYTES)."""
  import csv
  at = seek_line(fileobj, start, end, header.end)
  index = dict(header.index)
  items = tuple(index.items())
  columns, listing = header.columns, header.listing
  feed = _OneLine()
  reader = csv.reader(feed, skipinitialspace=True, strict=True)
  number = 0
  while at < end:
    raw = fileobj.readline(MAX_LINE_BYTES + 1)
    if not raw:
      return
    at += len(raw)
    number += 1
    if len(raw) > MAX_LINE_CHARS and _is_too_long(raw):
      while raw[-1:] != b"\n":  # the rest of the line, dropped as it is read
        raw = fileobj.readline(MAX_LINE_BYTES + 1)
        if not raw:
          break
        at += len(raw)
      yield number, _too_large()
      continue
    try:
      text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      yield number, InputError("parse", "malformed_row", f"line is not UTF-8: {e}")
      continue
    if '"' in text and text.count('"') & 1:
      yield number, InputError("parse", "malformed_row", QUOTED_BREAK)
      continue
    feed.line = text
    try:
      values = next(reader)
    except csv.Error as e:
      yield number, InputError("parse", "malformed_row", f"{type(e).__name__}: {e}")
      continue
    if not values or (len(values) == 1 and not values[0].strip()):
      yield number, None  # blank line
      continue
    width = len(values)
    if width >= columns:
      row: Dict[str, Any] = {f: values[i] for f, i in items}
    else:
      row = {f: values[i] if i < width else None for f, i in items}
    if width != columns:
      row[WRONG_WIDTH] = (width, columns)
    if listing:
      row[LISTING] = True
    yield number, row


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


def file_size(uri: str) -> Optional[int]:
  from apache_beam.io.filesystems import FileSystems
  try:
    return FileSystems.get_filesystem(uri).size(uri)
  except Exception:  # missing or unreadable: reading it reports that
    return None


def csv_rows(fileobj, header: Optional[CsvHeader], start: int, end: int,
           column_map: Mapping[str, str]):
  """The rows of a whole file (header None: read_rows, numbered by file line) or of a range of
  a big one (read_range, numbered from the range's first line)."""
  if header is None:
    return read_rows(fileobj, column_map)
  return read_range(fileobj, header, start, end)


Parsed = Tuple[str, Optional[int], Optional[int], Optional[str], Optional[Coords], Optional[str]]


def _parsed(lines, uri: str, coordinates: CoordinateRange
            ) -> Iterator[Tuple[int, Union[Parsed, ErrorRecord, None]]]:
  """(n, parse_values of the row, or its ErrorRecord with source `uri`, or None for a blank
  line) for each (n, row) of csv_rows; each box is added to `coordinates`."""
  for n, row in lines:
    if row is None:
      yield n, None
    elif isinstance(row, InputError):  # a line that is no row: it names no image to trust
      yield n, row.record(uri, uri, level="object")
    else:
      try:
        values = parse_values(row)
      except InputError as e:
        name = row.get("filename")  # the row's image when it names one, else the file
        yield n, e.record(uri, name.strip() if name and name.strip() else uri, level="object")
        continue
      if values[4] is not None:
        coordinates.add_coords(values[4])
      yield n, values


def file_error(uri: str, e: Exception) -> ErrorRecord:
  if isinstance(e, InputError):
    return e.record(uri, uri, level="file")
  return ErrorRecord(source=uri, stage="read", reason="unreadable", message=str(e), key=uri,
                     level="file")


class PlanCsv(beam.DoFn):
  """(split, csv_uri, image_root) -> the parts of the file to read, (split, uri, image_root,
  header, start, end): the whole file (header None) when it has at most `split_bytes`; else
  its header, read here (one record), and OffsetRanges of `split_bytes` after it, as Beam's
  ReadAllFromText cuts a file. Tagged: rows (a big Roboflow file's unlisted images, see
  unlisted_candidates), errors (a big file's header: empty, missing_column, unreadable...).
  Largest element: a header (one entry per column); memory: one header record."""

  def __init__(self, column_map: Mapping[str, str], split_bytes: int):
    self.column_map, self.split_bytes = dict(column_map), split_bytes

  def process(self, task):
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.io.restriction_trackers import OffsetRange
    split, uri, image_root = task
    size = file_size(uri)
    if size is None or size <= self.split_bytes:
      yield split, uri, image_root, None, 0, size or 0
      return
    try:
      with FileSystems.open(uri, compression_type="uncompressed") as f:
        header = read_header(f, self.column_map)
      for part in OffsetRange(header.end, size).split(self.split_bytes):
        yield split, uri, image_root, header, part.start, part.stop
      for filename in unlisted_candidates(uri, image_root):
        yield beam.pvalue.TaggedOutput("rows", (
            (uri, split, image_root, filename), ((BESIDE, 0), None, None, None, None)))
    except (InputError, OSError) as e:
      yield beam.pvalue.TaggedOutput("errors", file_error(uri, e))


class _ReadPart(beam.DoFn):
  """A part from PlanCsv -> ((uri, split, image_root, filename), ((start, n), width, height,
  label, box)) per row (parse_values; n counts the range's lines from 1, or a whole file's
  lines). Tagged:
    row_errors  (uri, start, n, ErrorRecord) of an unusable row, its line number to complete;
    lines       (uri, (start, lines read, header lines)) per range of a big file;
    coordinates (uri, CoordinateRange.state()) of a part read to its end;
    errors      a whole file's ErrorRecord (unreadable, syntax error, too_large...).
  Largest element: one row; memory: one line (a range is streamed)."""

  def __init__(self, column_map: Mapping[str, str]):
    self.column_map = dict(column_map)
    self.parts = beam.metrics.Metrics.counter("beam_tfrecord.csv", "parts_read")

  def process(self, part):
    from apache_beam.io.filesystems import FileSystems
    split, uri, image_root, header, start, end = part
    self.parts.inc()
    coordinates = CoordinateRange()
    last = 0
    try:
      with FileSystems.open(uri, compression_type="uncompressed") as f:
        for n, parsed in _parsed(csv_rows(f, header, start, end, self.column_map), uri,
                                 coordinates):
          last = n
          if parsed is None:
            continue
          if type(parsed) is ErrorRecord:
            yield beam.pvalue.TaggedOutput("row_errors", (uri, start, n, parsed))
            continue
          filename, width, height, label, box, row_split = parsed
          yield ((uri, row_split or split, image_root, filename),
                 ((start, n), width, height, label, box))
      if header is None:
        for filename in unlisted_candidates(uri, image_root):
          yield (uri, split, image_root, filename), ((BESIDE, 0), None, None, None, None)
      yield beam.pvalue.TaggedOutput("coordinates", (uri, coordinates.state()))
    except (InputError, OSError) as e:
      yield beam.pvalue.TaggedOutput("errors", file_error(uri, e))
    if header is not None:
      yield beam.pvalue.TaggedOutput("lines", (uri, (start, last, header.lines)))


def line_offsets(counts) -> Dict[Tuple[str, int], int]:
  """{(uri, range start): lines of the file before the range} from every range's
  (uri, (start, lines, header lines)): a range's line n is the file's line offset + n.
  Size: one entry per range (a 2.2 GB file: 35)."""
  by_file: Dict[str, List[Tuple[int, int, int]]] = {}
  for uri, part in counts:
    by_file.setdefault(uri, []).append(part)
  offsets = {}
  for uri, parts in by_file.items():
    parts.sort()
    before = parts[0][2]
    for start, lines, _ in parts:
      offsets[(uri, start)] = before
      before += lines
  return offsets


def with_line(item, offsets: Mapping[Tuple[str, int], int]) -> ErrorRecord:
  uri, start, n, record = item
  return dataclasses.replace(record, source=f"{uri}:{offsets.get((uri, start), 0) + n}")


def _merge_coordinates(states) -> Tuple[int, float, float]:
  return CoordinateRange.merged(states).state()


def _normalized_warning(item) -> Iterator[ErrorRecord]:
  uri, state = item
  coordinates = CoordinateRange.merged([state])
  if coordinates.looks_normalized():
    yield looks_normalized_warning(uri, coordinates.boxes)


# The in-process join (_JoinCsv): a file's rows in at least one partition per PARTITION_BYTES
# of the file (a partition's join holds ~10x its share of the file), at most MAX_PARTITIONS;
# rows held in memory up to SPILL_BUFFER_BYTES (estimated at ROW_BYTES plus the name each),
# then handed to a Spill that buffers as much again as marshal dumps before it appends to disk.
PARTITION_BYTES = 4 << 20
MAX_PARTITIONS = 4096
SPILL_BUFFER_BYTES = 8 << 20
ROW_BYTES = 400


class HeldRows:
  """Rows of one file by partition of their image's name (crc32: the same partitions in every
  process), each (split, filename, line, width, height, label, box): in memory up to
  `buffer_bytes`, then spilled to a storage.spill.Spill as one marshal dump per partition. A
  file whose rows fit the buffer never touches the disk. close() removes the spill."""

  def __init__(self, partitions: int, buffer_bytes: int):
    self.partitions, self.buffer_bytes = partitions, buffer_bytes
    self.rows: List[List[Tuple]] = [[] for _ in range(partitions)]
    self.held = 0
    self.spill = None

  def add(self, name: str, row: Tuple) -> None:
    import zlib
    self.rows[zlib.crc32(name.encode()) % self.partitions].append(row)
    self.held += ROW_BYTES + len(name)
    if self.held >= self.buffer_bytes:
      self.flush()

  def flush(self) -> None:
    import marshal

    from beam_tfrecord.storage.spill import Spill
    if self.spill is None:
      self.spill = Spill(self.partitions, buffer_bytes=self.buffer_bytes, prefix="csv")
    for p, rows in enumerate(self.rows):
      if rows:
        self.spill.add(p, marshal.dumps(rows))
        self.rows[p] = []
    self.held = 0

  def images(self, p: int) -> Dict[Tuple[Optional[str], str], List[Tuple]]:
    """{(split, filename): [((0, line), width, height, label, box), ...]} of partition p (as
    _ReadPart's rows, with file lines), rows in file order (spilled batches first, as they
    were written), then dropped."""
    import marshal
    if self.spill is not None:
      self.spill.flush()
    batches = [marshal.loads(b) for b in self.spill.read(p)] if self.spill is not None else []
    batches.append(self.rows[p])
    self.rows[p] = []
    images: Dict[Tuple[Optional[str], str], List[Tuple]] = {}
    for batch in batches:
      for split, name, line, width, height, label, box in batch:
        rows = images.get((split, name))
        if rows is None:
          images[(split, name)] = rows = []
        rows.append(((0, line) if line != BESIDE else (BESIDE, 0), width, height, label, box))
    return images

  def close(self) -> None:
    if self.spill is not None:
      self.spill.close()


class _JoinCsv(beam.DoFn):
  """(split, csv_uri, image_root) -> ImageAnnotation per image; tagged: errors. The in-process
  runner's path (one process, one stage at a time): each file read in order (a big one line
  by line, as its ranges are, so that the results are the distributed path's), rows held by
  partition of image name in a HeldRows, spilled to local disk past `buffer_bytes`, and joined
  one partition at a time: where a GroupByKey on that runner holds every row in memory.
  Largest element: one image; memory: ~2 x buffer_bytes plus one partition's rows."""

  def __init__(self, column_map: Mapping[str, str], allow_absolute: bool,
               follow_symlinks: bool, normalized: bool, split_bytes: int,
               partition_bytes: int = PARTITION_BYTES, buffer_bytes: int = SPILL_BUFFER_BYTES):
    self.column_map = dict(column_map)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.normalized, self.split_bytes = normalized, split_bytes
    self.partition_bytes, self.buffer_bytes = partition_bytes, buffer_bytes

  def process(self, task):
    from apache_beam.io.filesystems import FileSystems
    split, uri, image_root = task
    size = file_size(uri)
    partitions = min(MAX_PARTITIONS, max(1, -(-(size or 0) // self.partition_bytes)))
    held = HeldRows(partitions, self.buffer_bytes)
    try:
      coordinates = CoordinateRange()
      try:
        with FileSystems.open(uri, compression_type="uncompressed") as f:
          header, skip = None, 0
          if size is not None and size > self.split_bytes:
            header = read_header(f, self.column_map)
            skip = header.lines
          lines = csv_rows(f, header, header.end if header else 0, size or 0, self.column_map)
          for n, parsed in _parsed(lines, uri, coordinates):
            if parsed is None:
              continue
            if type(parsed) is ErrorRecord:
              yield beam.pvalue.TaggedOutput(
                  "errors", dataclasses.replace(parsed, source=f"{uri}:{n + skip}"))
              continue
            filename, width, height, label, box, row_split = parsed
            held.add(filename, (row_split or split, filename, n + skip, width, height, label,
                                box))
        for filename in unlisted_candidates(uri, image_root):
          held.add(filename, (split, filename, BESIDE, None, None, None, None))
        if not self.normalized and coordinates.looks_normalized():
          yield beam.pvalue.TaggedOutput("errors",
                                         looks_normalized_warning(uri, coordinates.boxes))
      except (InputError, OSError) as e:  # the rows before it are kept
        yield beam.pvalue.TaggedOutput("errors", file_error(uri, e))
      for p in range(partitions):
        for (row_split, filename), rows in held.images(p).items():
          yield from group_image(((uri, row_split, image_root, filename), rows),
                                 self.allow_absolute, self.follow_symlinks, self.normalized)
    finally:
      held.close()


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


def group_image(element, allow_absolute: bool, follow_symlinks: bool = False,
                normalized: bool = False,
                offsets: Optional[Mapping[Tuple[str, int], int]] = None):
  """Rows of one image, ((start, n), width, height, label, box) each (see _ReadPart) ->
  ImageAnnotation (objects in file order) or an error. `offsets` (line_offsets) turns a big
  file's range lines into file lines; `normalized`: the boxes are fractions of the image size."""
  (uri, split, image_root, filename), rows = element
  rows = sorted(rows, key=lambda r: r[0])
  start, n = rows[0][0]
  source = uri if start == BESIDE else f"{uri}:{(offsets or {}).get((uri, start), 0) + n}"
  try:
    key, image_uri = paths.resolve(image_root, filename, allow_absolute, follow_symlinks)
  except InputError as e:
    yield beam.pvalue.TaggedOutput("errors", e.record(source, filename))
    return
  sizes = {(w, h) for _, w, h, _, _ in rows if w is not None or h is not None}
  if len(sizes) > 1:
    yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
        source=source, stage="parse", reason="inconsistent_size", key=key, level="warning",
        message=f"rows of {filename!r} give different sizes {sorted(sizes, key=repr)}; "
        "the image header decides"))
  width, height = sorted(sizes, key=repr)[0] if len(sizes) == 1 else (None, None)
  objects = tuple(ObjectAnnotation(label=label, box=Box(*box, normalized=normalized))
                  for _, _, _, label, box in rows if box is not None)
  labels = tuple(dict.fromkeys(label for _, _, _, label, box in rows
                               if box is None and label is not None))
  yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri, objects=objects,
                        split=split, width=width, height=height, labels=labels)


class ReadCsv(beam.PTransform):
  """TF OD CSV files -> SourceOutput.

  In: `inputs`, a list of (split or None, csv_uri, image_root), and a column mapping.
  Out: one ImageAnnotation per distinct filename (and split) per file, rows grouped by image,
  objects in file order, with split from the split column or the input, and ErrorRecords for
  unusable rows and files.

  A file over `split_bytes` is read by many workers: its header by one (PlanCsv), its byte
  ranges by any (_ReadPart), its rows grouped by image in a GroupByKey; a line's number, for
  error sources, from the line counts of the ranges before it (a side input of one entry per
  range). `in_process` (the in-process runner): one DoFn per file joins its rows through spill
  files on local disk instead (_JoinCsv), with the same results.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]],
               column_map: Optional[Mapping[str, str]] = None, allow_absolute: bool = False,
               follow_symlinks: bool = False, normalized: bool = False,
               in_process: bool = False, split_bytes: int = SPLIT_BYTES):
    super().__init__()
    self.inputs = list(inputs)
    self.column_map = dict(column_map or parse_column_map(None))
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.normalized = normalized  # --csv-normalized
    self.in_process, self.split_bytes = in_process, split_bytes

  def expand(self, root):
    files = root | "Files" >> beam.Create(self.inputs)
    if self.in_process:
      joined = files | "Join" >> beam.ParDo(_JoinCsv(
          self.column_map, self.allow_absolute, self.follow_symlinks, self.normalized,
          self.split_bytes)).with_outputs("errors", main="images")
      return SourceOutput(images=joined.images, errors=joined.errors)
    planned = (files
               | "SpreadFiles" >> beam.Reshuffle()
               | "Plan" >> beam.ParDo(PlanCsv(self.column_map, self.split_bytes)).with_outputs(
                   "rows", "errors", main="parts"))
    rows = (planned.parts
            | "SpreadParts" >> beam.Reshuffle()
            | "Parse" >> beam.ParDo(_ReadPart(self.column_map)).with_outputs(
                "row_errors", "lines", "coordinates", "errors", main="rows"))
    offsets = beam.pvalue.AsSingleton(
        rows.lines
        | "AllLines" >> beam.combiners.ToList()
        | "LineOffsets" >> beam.Map(line_offsets))
    grouped = ((rows.rows, planned.rows) | "AllRows" >> beam.Flatten()
               | "GroupByImage" >> beam.GroupByKey()
               | "ToImage" >> beam.FlatMap(group_image, self.allow_absolute,
                                            self.follow_symlinks, self.normalized,
                                            offsets).with_outputs("errors", main="images"))
    row_errors = rows.row_errors | "LineNumbers" >> beam.Map(with_line, offsets)
    parts = [planned.errors, rows.errors, row_errors, grouped.errors]
    if not self.normalized:  # decided per file, from every part's boxes
      parts.append(rows.coordinates
                   | "FileCoordinates" >> beam.CombinePerKey(_merge_coordinates)
                   | "LooksNormalized" >> beam.FlatMap(_normalized_warning))
    errors = parts | "Errors" >> beam.Flatten()
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
  """--format auto: a .csv file (but an Open Images box CSV, --format openimages), or a
  folder holding Roboflow's _annotations.csv."""
  from beam_tfrecord.storage.files import list_dir
  if path.lower().endswith(".csv"):
    # An Open Images box CSV is --format openimages' (its detect, which this module may not
    # import: openimages imports this one): its header starts with these columns
    from beam_tfrecord.storage.files import head
    first = head(path, 4096).split(b"\n", 1)[0].decode("utf-8-sig", "replace")
    columns = tuple(c.strip() for c in first.strip().split(","))
    open_images = ("ImageID", "Source", "LabelName", "Confidence", "XMin", "XMax", "YMin",
                   "YMax", "IsOccluded", "IsTruncated", "IsGroupOf", "IsDepiction", "IsInside")
    return None if columns[:len(open_images)] == open_images else "CSV file"
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


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  inputs = config.file_inputs()
  return (root | "ReadCsv" >> ReadCsv(inputs, parse_column_map(config.csv_columns),
                                      config.allow_absolute_paths, config.follow_symlinks,
                                      config.csv_normalized, in_process=local),
          sorted({s for s, _, _ in inputs if s}))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each annotation file; the image roots (default: each annotation file's directory)."""
  inputs = config.file_inputs()
  return [("file", uri) for _, uri, _ in inputs], [root for _, _, root in inputs]
