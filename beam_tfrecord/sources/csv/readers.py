"""The DoFns that read the rows of a CSV, for the csv format and Open Images' box CSVs
(sources/openimages.py): each says in `rows` what a parsed row becomes, (split or None, image
name, values).

Distributed: PlanCsv cuts a file into parts (a big one: its header, then byte ranges), any
worker reads a part (ReadRows), and rows meet their image in a GroupByKey. In-process: one
worker reads a whole file (JoinRows), as its parts are read, and joins its rows through spill
files (held.HeldRows) one partition at a time.
"""
from __future__ import annotations

import dataclasses
from typing import (Any, Callable, Iterable, Iterator, List, Mapping,
                    Optional, Tuple, Union)

import apache_beam as beam

from beam_tfrecord.records.model import ErrorRecord, InputError
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
from beam_tfrecord.sources.csv.held import (BESIDE, PARTITION_BYTES,
                                            SPILL_BUFFER_BYTES, HeldRows)
from beam_tfrecord.sources.csv.reading import csv_rows, file_rows, read_header
from beam_tfrecord.storage import files, lines

# (split or None, image name, values): what `rows` makes of a parsed row
Keyed = Tuple[Optional[str], str, Tuple]


def parsed_rows(rows, uri: str, parse: Callable[[Mapping[str, Any]], Any],
                name_of: Callable[[Mapping[str, Any]], str]
                ) -> Iterator[Tuple[int, Union[Any, ErrorRecord, None]]]:
  """(n, parse(row), or an ErrorRecord with source `uri`, or None for a blank line) for each
  (n, row) of csv_rows. A row parse refuses is an object error keyed by name_of(row), its
  image (else the file)."""
  for n, row in rows:
    if row is None:
      yield n, None
    elif isinstance(row, InputError):  # a line that is no row: it names no image to trust
      yield n, row.record(uri, uri, level="object")
    else:
      try:
        parsed = parse(row)
      except InputError as e:
        yield n, e.record(uri, name_of(row) or uri, level="object")
        continue
      yield n, parsed


def bounded(rows: Iterable[Tuple]) -> Tuple[List[Tuple], bool]:
  """(an image's rows ((start, n), values...) by position, whether it has more than
  MAX_OBJECTS_PER_IMAGE): past the bound only its first row is returned (its error's line).
  Streams `rows` (a GroupByKey's iterable, or HeldRows' capped list) holding at most the
  bound. BESIDE rows (a Roboflow image no row names) are no object."""
  kept: List[Tuple] = []
  first, count = None, 0
  for row in rows:
    if first is None or row[0] < first[0]:
      first = row
    if row[0][0] != BESIDE:
      count += 1
    if count <= MAX_OBJECTS_PER_IMAGE:
      kept.append(row)
    elif kept:
      kept = []
  if count > MAX_OBJECTS_PER_IMAGE:
    return [first], True
  kept.sort(key=lambda r: r[0])
  return kept, False


def too_many_rows(source: str, name: str) -> ErrorRecord:
  """The error of an image named by more rows than one image may have objects."""
  return ErrorRecord(
      source=source, stage="parse", reason="too_many_objects", key=name, level="image",
      message=f"{name} has more than {MAX_OBJECTS_PER_IMAGE:,} rows, the most objects one "
      "image may have: the image is not converted")


class PlanCsv(beam.DoFn):
  """(split, csv_uri, image_root) -> the parts of the file to read, (split, uri, image_root,
  header, start, end): the whole file (header None) when it has at most `split_bytes`; else
  its header, read here (one record), and byte ranges of `split_bytes` after it, as Beam's
  ReadAllFromText cuts a file. Tagged: rows (`beside`(split, uri, image_root): rows of images
  no line names, as ReadRows gives them), errors (a big file's header: empty,
  missing_column, unreadable...). Largest element: a header (one entry per column); memory:
  one header record."""

  def __init__(self, column_map: Mapping[str, str], split_bytes: int, beside=None):
    self.column_map, self.split_bytes, self.beside = dict(column_map), split_bytes, beside

  def process(self, task):
    split, uri, image_root = task
    size = lines.file_size(uri)
    if size is None or size <= self.split_bytes:
      yield split, uri, image_root, None, 0, size or 0
      return
    try:
      with files.open_read(uri) as f:
        header = read_header(f, self.column_map)
      for start, end in lines.ranges(size, self.split_bytes, header.end):
        yield split, uri, image_root, header, start, end
      for row in self.beside(split, uri, image_root) if self.beside else ():
        yield beam.pvalue.TaggedOutput("rows", row)
    except (InputError, OSError) as e:
      yield beam.pvalue.TaggedOutput("errors", lines.file_error(uri, e))


class RowsOf:
  """What a format makes of a CSV's rows: the part its ReadRows and its JoinRows share."""

  def start(self) -> Any:
    """The state of one part or file, handed to rows and done."""
    return None

  def rows(self, rows, uri: str, state) -> Iterator[Tuple[int, Union[Keyed, ErrorRecord, None]]]:
    """(n, (split or None, image name, values) | ErrorRecord | None) per (n, row) of csv_rows
    (parsed_rows)."""
    raise NotImplementedError


class ReadRows(RowsOf, beam.DoFn):
  """A part from PlanCsv -> ((uri, split, image_root, name), ((start, n), values...)) per row
  (n counts the range's lines from 1, or a whole file's lines). Tagged:
    row_errors  (uri, start, n, ErrorRecord) of an unusable row, its line number to complete;
    lines       (uri, (start, lines read, header lines)) per range of a big file;
    errors      a whole file's ErrorRecord (unreadable, syntax error, too_large...);
  and what `done` adds. Largest element: one row; memory: one line (a range is streamed)."""

  def __init__(self, column_map: Mapping[str, str]):
    self.column_map = dict(column_map)

  def done(self, split, uri: str, image_root: str, header, state) -> Iterator:
    """More outputs of a part read to its end."""
    return iter(())

  def process(self, part):
    split, uri, image_root, header, start, end = part
    state = self.start()
    last = 0
    try:
      with files.open_read(uri) as f:
        for n, item in self.rows(csv_rows(f, header, start, end, self.column_map), uri, state):
          last = n
          if item is None:
            continue
          if type(item) is ErrorRecord:
            yield beam.pvalue.TaggedOutput("row_errors", (uri, start, n, item))
            continue
          row_split, name, values = item
          yield (uri, row_split or split, image_root, name), ((start, n),) + values
      yield from self.done(split, uri, image_root, header, state)
    except (InputError, OSError) as e:
      yield beam.pvalue.TaggedOutput("errors", lines.file_error(uri, e))
    if header is not None:
      yield beam.pvalue.TaggedOutput("lines", (uri, (start, last, header.lines)))


class JoinRows(RowsOf, beam.DoFn):
  """(split, csv_uri, image_root) -> what `group` makes of each image's rows; tagged: errors.
  The in-process runner's path (one process, one stage at a time): each file read in order (a
  big one line by line, as its ranges are, so that the results are the distributed path's),
  rows ((split, name, line, values...), as `rows` keys them) held by partition of image name
  in a HeldRows, spilled to local disk past `buffer_bytes`, and joined one partition at a
  time: where a GroupByKey on that runner holds every row in memory. Largest element: one
  image; memory: ~2 x buffer_bytes plus one partition's rows, at most MAX_OBJECTS_PER_IMAGE
  + 1 of them per image."""

  def __init__(self, column_map: Mapping[str, str], split_bytes: int,
               partition_bytes: int = PARTITION_BYTES, buffer_bytes: int = SPILL_BUFFER_BYTES):
    self.column_map, self.split_bytes = dict(column_map), split_bytes
    self.partition_bytes, self.buffer_bytes = partition_bytes, buffer_bytes

  def done(self, held: HeldRows, split, uri: str, image_root: str, state) -> Iterator:
    """More rows for `held`, or errors, once the whole file is read."""
    return iter(())

  def group(self, element) -> Iterator:
    """((uri, split, image_root, name), [((0, line), values...), ...]) -> outputs."""
    raise NotImplementedError

  def process(self, task):
    split, uri, image_root = task
    size = lines.file_size(uri)
    held = HeldRows.for_file(size, self.partition_bytes, self.buffer_bytes)
    try:
      state = self.start()
      try:
        with files.open_read(uri) as f:
          rows = file_rows(f, size, self.split_bytes, self.column_map)
          for n, item in self.rows(rows, uri, state):
            if item is None:
              continue
            if type(item) is ErrorRecord:
              yield beam.pvalue.TaggedOutput(
                  "errors", dataclasses.replace(item, source=f"{uri}:{n}"))
              continue
            row_split, name, values = item
            held.add(name, (row_split or split, name, n) + values)
        yield from self.done(held, split, uri, image_root, state)
      except (InputError, OSError) as e:  # the rows before it are kept
        yield beam.pvalue.TaggedOutput("errors", lines.file_error(uri, e))
      for p in range(held.partitions):
        for (row_split, name), rows in held.images(p).items():
          yield from self.group(((uri, row_split, image_root, name), rows))
    finally:
      held.close()
