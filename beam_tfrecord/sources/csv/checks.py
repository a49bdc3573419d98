"""The csv format's pre-run check: each input is a CSV with the mapped columns and a row.
Beam-free."""
from __future__ import annotations

from typing import Mapping

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources.csv.columns import FIELDS
from beam_tfrecord.sources.csv.reading import read_rows
from beam_tfrecord.storage import paths


def check_input(uri: str, column_map: Mapping[str, str]) -> None:
  """Before running: `uri` is a CSV whose header has the mapped columns and a first row."""
  from beam_tfrecord.sources.checks import check_file, sniff_text
  from beam_tfrecord.storage.files import head, open_read
  check_file(uri, "--input")
  kind = sniff_text(head(uri))
  if kind in ("json", "xml"):
    raise UsageError(f"--input {uri} is not a CSV file: it looks like "
                     + ("JSON; use --format coco" if kind == "json" else "XML; use --format voc"))
  try:
    with open_read(uri) as f:
      if next(read_rows(f, column_map), None) is None:
        raise UsageError(f"--input {uri} has a header but no rows: no images to convert")
  except InputError as e:
    if e.reason == "missing_column":
      raise UsageError(f"--input {uri}: {e.message}; map your column names with --csv-columns "
                       "FIELD=COLUMN,... (fields: " + ", ".join(FIELDS) + ")") from None
    if e.reason == "malformed_csv" and "empty" in e.message:
      raise UsageError(f"--input {uri} is empty") from None
    # a syntax error later in the file: the pipeline reports it and keeps the rows before it


def check(config) -> None:
  for item in config.inputs:
    check_input(paths.parse_assignment(item)[1], config.columns)
