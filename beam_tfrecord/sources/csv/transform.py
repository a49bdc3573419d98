"""ReadCsv, the csv format's Beam transform: rows read by the DoFns of readers.py, grouped by
image; Roboflow's unlisted images; the looks_normalized warning decided per file."""
from __future__ import annotations

import os
import posixpath
from typing import Iterator, Mapping, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import SourceOutput
from beam_tfrecord.sources.csv.columns import parse_column_map
from beam_tfrecord.sources.csv.held import (BESIDE, PARTITION_BYTES,
                                            SPILL_BUFFER_BYTES, HeldRows)
from beam_tfrecord.sources.csv.readers import (JoinRows, PlanCsv, ReadRows,
                                               RowsOf, bounded, parsed_rows,
                                               too_many_rows)
from beam_tfrecord.sources.csv.values import (CoordinateRange,
                                              looks_normalized_warning,
                                              parse_values)
from beam_tfrecord.storage import lines, paths

# Roboflow's CSV export: the file in each split folder (see held.BESIDE)
ROBOFLOW_CSV = "_annotations.csv"


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


def _beside_rows(split, uri: str, image_root: str):
  """The rows of a Roboflow export's unlisted images, as ReadRows gives rows."""
  for filename in unlisted_candidates(uri, image_root):
    yield (uri, split, image_root, filename), ((BESIDE, 0), None, None, None, None)


def group_image(element, allow_absolute: bool, follow_symlinks: bool = False,
                normalized: bool = False,
                offsets: Optional[Mapping[Tuple[str, int], int]] = None):
  """Rows of one image, ((start, n), width, height, label, box) each (see ReadRows) ->
  ImageAnnotation (objects in file order) or an error (too_many_objects past the bound:
  readers.bounded). `offsets` (line_offsets) turns a big file's range lines into file lines;
  `normalized`: the boxes are fractions of the image size."""
  (uri, split, image_root, filename), rows = element
  rows, too_many = bounded(rows)
  start, n = rows[0][0]
  source = uri if start == BESIDE else f"{uri}:{(offsets or {}).get((uri, start), 0) + n}"
  if too_many:
    yield beam.pvalue.TaggedOutput("errors", too_many_rows(source, filename))
    return
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


def _image_name(row) -> str:
  return (row.get("filename") or "").strip()


class _CsvRows(RowsOf):
  """A row: (its split, filename, (width, height, label, box)); each box is added to the
  part's CoordinateRange."""

  def start(self) -> CoordinateRange:
    return CoordinateRange()

  def rows(self, rows, uri: str, coordinates: CoordinateRange):
    for n, values in parsed_rows(rows, uri, parse_values, _image_name):
      if type(values) is tuple:
        filename, width, height, label, box, row_split = values
        if box is not None:
          coordinates.add_coords(box)
        values = (row_split, filename, (width, height, label, box))
      yield n, values


class _ReadPart(_CsvRows, ReadRows):
  """ReadRows for the csv format; tagged also coordinates (uri, CoordinateRange.state()) of
  a part read to its end, and a whole Roboflow file's unlisted images."""

  def __init__(self, column_map: Mapping[str, str]):
    super().__init__(column_map)
    self.parts = beam.metrics.Metrics.counter("beam_tfrecord.csv", "parts_read")

  def process(self, part):
    self.parts.inc()
    return super().process(part)

  def done(self, split, uri, image_root, header, coordinates):
    if header is None:
      yield from _beside_rows(split, uri, image_root)
    yield beam.pvalue.TaggedOutput("coordinates", (uri, coordinates.state()))


class _JoinCsv(_CsvRows, JoinRows):
  """JoinRows for the csv format (the in-process runner's path): ImageAnnotation per image;
  a Roboflow file's unlisted images; the looks_normalized warning."""

  def __init__(self, column_map: Mapping[str, str], allow_absolute: bool,
               follow_symlinks: bool, normalized: bool, split_bytes: int,
               partition_bytes: int = PARTITION_BYTES, buffer_bytes: int = SPILL_BUFFER_BYTES):
    super().__init__(column_map, split_bytes, partition_bytes, buffer_bytes)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.normalized = normalized

  def done(self, held: HeldRows, split, uri, image_root, coordinates):
    for filename in unlisted_candidates(uri, image_root):
      held.add(filename, (split, filename, BESIDE, None, None, None, None))
    if not self.normalized and coordinates.looks_normalized():
      yield beam.pvalue.TaggedOutput("errors", looks_normalized_warning(uri, coordinates.boxes))

  def group(self, element):
    return group_image(element, self.allow_absolute, self.follow_symlinks, self.normalized)


def _merge_coordinates(states) -> Tuple[int, float, float]:
  return CoordinateRange.merged(states).state()


def _normalized_warning(item) -> Iterator[ErrorRecord]:
  uri, state = item
  coordinates = CoordinateRange.merged([state])
  if coordinates.looks_normalized():
    yield looks_normalized_warning(uri, coordinates.boxes)


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
               in_process: bool = False, split_bytes: int = lines.SPLIT_BYTES):
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
               | "Plan" >> beam.ParDo(PlanCsv(self.column_map, self.split_bytes, _beside_rows))
               .with_outputs("rows", "errors", main="parts"))
    rows = (planned.parts
            | "SpreadParts" >> beam.Reshuffle()
            | "Parse" >> beam.ParDo(_ReadPart(self.column_map)).with_outputs(
                "row_errors", "lines", "coordinates", "errors", main="rows"))
    offsets, row_errors = lines.line_numbers(rows.lines, rows.row_errors)
    grouped = ((rows.rows, planned.rows) | "AllRows" >> beam.Flatten()
               | "GroupByImage" >> beam.GroupByKey()
               | "ToImage" >> beam.FlatMap(group_image, self.allow_absolute,
                                            self.follow_symlinks, self.normalized,
                                            offsets).with_outputs("errors", main="images"))
    parts = [planned.errors, rows.errors, row_errors, grouped.errors]
    if not self.normalized:  # decided per file, from every part's boxes
      parts.append(rows.coordinates
                   | "FileCoordinates" >> beam.CombinePerKey(_merge_coordinates)
                   | "LooksNormalized" >> beam.FlatMap(_normalized_warning))
    errors = parts | "Errors" >> beam.Flatten()
    return SourceOutput(images=grouped.images, errors=errors)
