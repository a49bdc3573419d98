"""TF Object Detection CSV: `filename,width,height,class,xmin,ymin,xmax,ymax`, one row per object.

That is the layout `xml_to_csv.py` writes. Other layouts are read through a column mapping
(`filename=path,class=label`); a `split` column, when mapped or present, gives each image its
split. A row whose class and box are all empty stands for an image without objects. A file
without any box column is a classification listing (path and label columns, optional split):
its rows give image-level labels.

Files are read on workers. A file over SPLIT_BYTES is read in parallel: a worker reads its
header (one record), then the rest is cut into byte ranges of SPLIT_BYTES that any worker reads
line by line, as Beam's ReadAllFromText does (storage.lines); there every line is a record of
its own, so a quoted field holding a line break is reported (malformed_row), never read across
a range's edge. A smaller file is one range, read by the csv module whole (line breaks inside
quotes allowed, reading stops at a syntax error). Rows meet their image in a GroupByKey, or on
the in-process runner in storage.spill partitions by image name, joined one partition at a
time.

  columns.py    the column mapping (--csv-columns), a header's columns
  reading.py    records as rows: a whole file, a big file's header and byte ranges
  values.py     one row's values checked and converted; the looks_normalized guess
  held.py       the in-process join's rows by partition, spilled to local disk
  readers.py    the DoFns that plan, read and join a CSV's rows (Open Images uses them too)
  transform.py  ReadCsv, the Beam transform (imported when the pipeline is built)
  detection.py  --format auto; whether a file is a classification listing
  checks.py     the pre-run check
This module is the source protocol (sources/registry.py) and imports no Beam.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

from beam_tfrecord.sources.csv.checks import check
from beam_tfrecord.sources.csv.columns import (FIELDS, WRONG_WIDTH,
                                               parse_column_map)
from beam_tfrecord.sources.csv.detection import detect, is_listing
from beam_tfrecord.sources.csv.held import BESIDE, HeldRows
from beam_tfrecord.sources.csv.reading import (MAX_LINE_CHARS, read_header,
                                               read_range, read_rows)
from beam_tfrecord.sources.csv.values import CoordinateRange, parse_row
from beam_tfrecord.storage.lines import SPLIT_BYTES

if TYPE_CHECKING:
  from beam_tfrecord.sources.base import SourceOutput

__all__ = [
    "BESIDE", "EXPORT_FILE", "FIELDS", "MASKS", "MAX_LINE_CHARS", "SPLIT_BYTES", "WRONG_WIDTH",
    "CoordinateRange", "HeldRows", "check", "detect", "fingerprint_patterns", "image_level",
    "parse_column_map", "parse_row", "possible_splits", "read", "read_header", "read_range",
    "read_rows"]

MASKS = False
OPTIONS = ("columns", "csv_normalized")  # --csv-columns, parsed once (ConvertConfig.columns)
EXPORT_FILE = "_annotations.csv"  # the file in each split folder of a Roboflow export
_BEAM_NAMES = ("ReadCsv", "group_image")


def __getattr__(name: str):
  if name in _BEAM_NAMES:  # Beam: only when asked for
    from beam_tfrecord.sources.csv import transform
    return getattr(transform, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def possible_splits(config) -> Optional[set]:
  return None  # a split column can name any


def image_level(config) -> bool:
  """Classification listings (no box columns) are image-level: the classification schema."""
  return all(is_listing(uri, config.columns) for _, uri, _ in config.file_inputs())


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  from beam_tfrecord.sources.csv.transform import ReadCsv
  inputs = config.file_inputs()
  return (root | "ReadCsv" >> ReadCsv(inputs, config.columns,
                                      config.allow_absolute_paths, config.follow_symlinks,
                                      config.csv_normalized, in_process=local),
          sorted({s for s, _, _ in inputs if s}))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each annotation file; the image roots (default: each annotation file's directory)."""
  inputs = config.file_inputs()
  return [("file", uri) for _, uri, _ in inputs], [root for _, _, root in inputs]
