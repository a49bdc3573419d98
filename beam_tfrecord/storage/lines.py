"""Whole lines of a byte range of a file: how the line-based sources (a CSV, an Open Images box
CSV, a Labelbox NDJSON, keras-yolo3 text) have a big file read by many workers, as Beam's
ReadAllFromText cuts one.

A file is cut into byte ranges (ranges); a worker reads the lines that start in its range
(read_lines), so the lines a range holds do not depend on where the cuts fall, and counts
them; a line's number in the file is its number in its range plus the lines of the ranges
before (line_offsets: one count per range, gathered once). Memory: one line. Beam-free to
import: Beam's FileSystems is imported where a remote file is touched.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

from beam_tfrecord.records.model import ErrorRecord, InputError
from beam_tfrecord.storage.paths import is_remote

# A file over SPLIT_BYTES is read in ranges of that size, each by any worker (Open Images'
# 2.2 GB box CSV: 35 ranges); a smaller one by one worker, whole.
SPLIT_BYTES = 64 << 20
# What is read past (the end of the line before a range, a line over its budget) is read in
# parts of this size, never held.
SKIP_BYTES = 1 << 20


def file_size(uri: str) -> Optional[int]:
  """The file's size in bytes, or None when it is missing or cannot be asked (reading it
  reports why)."""
  try:
    if not is_remote(uri):
      return os.path.getsize(uri)
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.get_filesystem(uri).size(uri)
  except Exception:
    return None


def ranges(end: int, step: int, start: int = 0) -> List[Tuple[int, int]]:
  """[start, end) cut into byte ranges of `step`, as Beam's OffsetRange.split cuts it: a last
  range shorter than a quarter of `step` joins the one before. None for an empty span."""
  cuts, at = [], start
  while at < end:
    stop = min(at + step, end)
    if end - stop < step // 4:
      stop = end
    cuts.append((at, stop))
    at = stop
  return cuts


def seek_line(fileobj, start: int, end: int, first: int = 0) -> int:
  """Put a file opened in binary at the first line that starts in [start, end), and return
  its offset (end or more when no line does). A line that starts before `start` belongs to the
  range before, so the lines a range holds do not depend on where the ranges are cut. `first`:
  where the file's lines begin (a CSV's rows: after its header). The skipped end of a line is
  read in SKIP_BYTES parts, and no further than `end`."""
  if start <= first:
    fileobj.seek(start)
    return start
  fileobj.seek(start - 1)
  at = start - 1
  while True:
    part = fileobj.readline(SKIP_BYTES)
    at += len(part)
    if not part or part[-1:] == b"\n" or at >= end:
      return at


def read_lines(fileobj, start: int, end: int, limit: int, first: int = 0
               ) -> Iterator[Tuple[int, Optional[bytes]]]:
  """(n, line) for the n-th line (from 1) that starts in [start, end) of a file opened in
  binary (seek_line; `first` as there): its bytes with their line break, or None for a line
  whose first `limit` bytes hold no line break (too long: the rest of it is read past, never
  held). Memory: `limit` bytes."""
  at = seek_line(fileobj, start, end, first)
  number = 0
  while at < end:
    raw = fileobj.readline(limit)
    if not raw:
      return
    at += len(raw)
    number += 1
    if len(raw) == limit and raw[-1:] != b"\n":
      while raw[-1:] != b"\n":
        raw = fileobj.readline(SKIP_BYTES)
        if not raw:
          break
        at += len(raw)
      yield number, None
      continue
    yield number, raw


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


def file_error(uri: str, e: Exception) -> ErrorRecord:
  """The file-level record of a file that could not be read (an InputError: its reason)."""
  if isinstance(e, InputError):
    return e.record(uri, uri, level="file")
  return ErrorRecord(source=uri, stage="read", reason="unreadable", message=str(e), key=uri,
                     level="file")


def with_line(item, offsets: Mapping[Tuple[str, int], int]):
  """(uri, range start, n, ErrorRecord) -> the record with source FILE:LINE."""
  uri, start, n, record = item
  return dataclasses.replace(record, source=f"{uri}:{offsets.get((uri, start), 0) + n}")


def line_numbers(counts, errors):
  """Beam, for a file read in ranges: (the line_offsets of every range's count in `counts` as
  a side input, `errors` (uri, range start, n, ErrorRecord) as records at their file line)."""
  import apache_beam as beam
  offsets = beam.pvalue.AsSingleton(
      counts
      | "AllLines" >> beam.combiners.ToList()
      | "LineOffsets" >> beam.Map(line_offsets))
  return offsets, errors | "LineNumbers" >> beam.Map(with_line, offsets)
