"""One CSV row's values: filename, size, class, box and split checked and converted, and the
file-wide guess that pixel boxes are fractions (looks_normalized). Pure and Beam-free."""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Tuple, Union

from beam_tfrecord.records.model import (Box, ErrorRecord, InputError,
                                         ObjectAnnotation, check_split_name)
from beam_tfrecord.sources.csv.columns import BOX_FIELDS, LISTING, WRONG_WIDTH


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
Parsed = Tuple[str, Optional[int], Optional[int], Optional[str], Optional[Coords], Optional[str]]


def parse_values(row: Mapping[str, Any]) -> Parsed:
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
