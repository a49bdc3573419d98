"""The labelbox format's pre-run check: each export's first line is an export v2 data row (what
the head tells: a bad line further on is the workers' to report). Beam-free."""
from __future__ import annotations

from beam_tfrecord.errors import UsageError
from beam_tfrecord.sources.labelbox.detection import export_file, head_keys
from beam_tfrecord.storage import paths


def check_input(uri: str) -> None:
  """Before running: the export is a file whose first line is a Labelbox export v2 data row."""
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


def check(config) -> None:
  for item in config.inputs:
    check_input(export_file(paths.parse_assignment(item)[1]))
