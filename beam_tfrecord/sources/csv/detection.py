"""--format auto for CSVs, and whether a CSV is a classification listing (its header only).
Beam-free."""
from __future__ import annotations

from typing import Mapping, Optional

from beam_tfrecord.sources.csv.columns import is_listing_header


def is_listing(uri: str, column_map: Mapping[str, str]) -> bool:
  """True when the CSV's header has no box column: a classification listing."""
  import csv
  import io

  from beam_tfrecord.storage.files import open_read
  try:
    with open_read(uri) as f:
      first = f.readline().decode("utf-8-sig")
  except Exception:  # unreadable or not text: the source reports it
    return False
  header = [h.strip() for h in next(csv.reader(io.StringIO(first)), [])]
  return bool(header) and is_listing_header(header, column_map)


def detect(path: str) -> Optional[str]:
  """--format auto: a .csv file (but an Open Images box CSV, --format openimages), or a
  folder holding Roboflow's _annotations.csv."""
  from beam_tfrecord.storage.files import list_dir
  if path.lower().endswith(".csv"):
    # An Open Images box CSV is --format openimages' (its detect, which this module may not
    # import: openimages imports this package): its header starts with these columns
    from beam_tfrecord.storage.files import head
    first = head(path, 4096).split(b"\n", 1)[0].decode("utf-8-sig", "replace")
    columns = tuple(c.strip() for c in first.strip().split(","))
    open_images = ("ImageID", "Source", "LabelName", "Confidence", "XMin", "XMax", "YMin",
                   "YMax", "IsOccluded", "IsTruncated", "IsGroupOf", "IsDepiction", "IsInside")
    return None if columns[:len(open_images)] == open_images else "CSV file"
  if "_annotations.csv" in list_dir(path)[1]:
    return "_annotations.csv"
  return None
