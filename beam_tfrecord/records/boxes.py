"""Validate, clip and normalise boxes against the real image size. Pure functions."""
from __future__ import annotations

from math import isfinite
from typing import NamedTuple

from beam_tfrecord.records.model import InputError, ObjectAnnotation

BBOX_POLICIES = ("clip", "drop", "error")
_NUMBER = (int, float)


class NormalizedObject(NamedTuple):
  """An object whose box is in [0, 1] image coordinates. A NamedTuple: one is made for every
  box, and a frozen dataclass's __init__ took 1.1 us (this: 0.3 us)."""
  obj: ObjectAnnotation
  xmin: float
  ymin: float
  xmax: float
  ymax: float
  clipped: bool


def _bad(reason: str, message: str) -> InputError:
  return InputError("validate", reason, message)


def normalize(obj: ObjectAnnotation, width: int, height: int,
              policy: str = "clip") -> NormalizedObject:
  """Normalise one box; raise InputError when it cannot be used under `policy`.

  A box partly outside the image is clipped under 'clip', rejected under 'drop' and 'error'
  (the caller decides whether a rejection drops the object or fails the image). Boxes with
  NaN/inf coordinates, no area, or lying entirely outside are always rejected.
  """
  b = obj.box
  x0, y0, x1, y1 = b.xmin, b.ymin, b.xmax, b.ymax
  # Normalized boxes (YOLO) are checked and clipped against the unit square and kept as given,
  # so that they reach the Example without a round trip through pixels.
  scale_w, scale_h = (1.0, 1.0) if b.normalized else (float(width), float(height))
  # spelled out in the order a generator over the four took (the same errors), and no clip
  # for a box inside: normalize 3.4 -> 1.1 us a box (timeit, loaded 2-core machine)
  if not (isinstance(x0, _NUMBER) and isfinite(x0) and isinstance(y0, _NUMBER) and
          isfinite(y0) and isinstance(x1, _NUMBER) and isfinite(x1) and
          isinstance(y1, _NUMBER) and isfinite(y1)):
    raise _bad("bbox_not_finite", f"box {(x0, y0, x1, y1)} of {obj.label!r} has a non-finite "
               "coordinate")
  if x1 <= x0 or y1 <= y0:
    raise _bad("bbox_empty", f"box {(x0, y0, x1, y1)} of {obj.label!r} has no area")
  if x1 <= 0 or y1 <= 0 or x0 >= scale_w or y0 >= scale_h:
    raise _bad("bbox_outside", f"box {(x0, y0, x1, y1)} of {obj.label!r} lies outside the "
               f"{width}x{height} image")
  clipped = x0 < 0 or y0 < 0 or x1 > scale_w or y1 > scale_h
  if clipped:  # (a box inside is its own clip)
    if policy != "clip":
      raise _bad("bbox_partly_outside", f"box {(x0, y0, x1, y1)} of {obj.label!r} extends "
                 f"beyond the {width}x{height} image")
    x0, x1 = max(x0, 0.0), min(x1, scale_w)
    y0, y1 = max(y0, 0.0), min(y1, scale_h)
  return NormalizedObject(obj, x0 / scale_w, y0 / scale_h, x1 / scale_w, y1 / scale_h, clipped)
