"""The column mapping (--csv-columns) and a header's columns. Pure and Beam-free."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from beam_tfrecord.records.model import InputError

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


def is_listing_header(header: List[str], column_map: Mapping[str, str]) -> bool:
  """A header (its columns stripped) without any box column: a classification listing."""
  return not any(column_map[f] in header for f in BOX_FIELDS)


def header_columns(header: List[str], column_map: Mapping[str, str]
                   ) -> Tuple[Dict[str, int], bool]:
  """({field: column index}, is a classification listing) of a header; InputError
  'missing_column' when a required column is missing."""
  header = [h.strip() for h in header]
  listing = is_listing_header(header, column_map)
  required = LISTING_REQUIRED if listing else REQUIRED
  missing = [column_map[f] for f in required if column_map[f] not in header]
  if missing:
    raise InputError("parse", "missing_column",
                     f"CSV has no column(s) {missing}; columns are {header}")
  return {f: header.index(c) for f, c in column_map.items() if c in header}, listing
