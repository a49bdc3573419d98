"""ReadLabelbox, the Beam transform: each export cut into byte ranges that any worker reads line
by line (storage.lines), one data row a line; nothing is grouped."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.sources.base import SourceOutput
from beam_tfrecord.sources.labelbox.data_row import parse_data_row, row_name
from beam_tfrecord.sources.labelbox.locate import locate
from beam_tfrecord.sources.labelbox.ndjson import load_line, read_range
from beam_tfrecord.storage import files, lines


def _plan(task, split_bytes: int):
  """(split, uri, image root) -> (split, uri, image root, start, end) per byte range."""
  split, uri, image_root = task
  size = lines.file_size(uri)
  if size is None:
    yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
        source=uri, stage="read", reason="unreadable", key=uri, level="file",
        message="the export file cannot be read (missing, or no access)"))
    return
  for start, end in lines.ranges(size, split_bytes):
    yield split, uri, image_root, start, end


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
    split, uri, image_root, start, end = part
    last = 0
    try:
      with files.open_read(uri) as f:
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
    except ImportError:  # a package missing from the worker: the job fails (model.py)
      raise
    except Exception as e:  # the line's image is lost; a line that names no row: the file
      if not isinstance(e, InputError):  # unforeseen: report it, never kill the job
        e = InputError("parse", "unexpected_error", f"{type(e).__name__}: {e}")
      yield error(e, (row_name(doc) if doc is not None else None) or uri)
      return
    for _, problem, level in row.problems:
      yield error(problem, key, level)
    yield ImageAnnotation(key=key, uri=image_uri, source_id=row.id, source=uri,
                          objects=row.objects, split=split, width=row.width, height=row.height)


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
               include_masks: bool = False, split_bytes: int = lines.SPLIT_BYTES):
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
    _, numbered = lines.line_numbers(read.lines, read.line_errors)
    errors = (planned.errors, read.errors, numbered) | "Errors" >> beam.Flatten()
    return SourceOutput(images=read.images, errors=errors)
