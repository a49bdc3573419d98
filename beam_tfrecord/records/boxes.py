"""Validate, clip and normalise boxes against the real image size. Pure functions."""
from __future__ import annotations

import dataclasses
import math

from beam_tfrecord.records.model import InputError, ObjectAnnotation

BBOX_POLICIES = ("clip", "drop", "error")


@dataclasses.dataclass(frozen=True)
class NormalizedObject:
  """An object whose box is in [0, 1] image coordinates."""
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
  coords = (b.xmin, b.ymin, b.xmax, b.ymax)
  # Normalized boxes (YOLO) are checked and clipped against the unit square and kept as given,
  # so that they reach the Example without a round trip through pixels.
  scale_w, scale_h = (1.0, 1.0) if b.normalized else (float(width), float(height))
  if not all(isinstance(c, (int, float)) and math.isfinite(c) for c in coords):
    raise _bad("bbox_not_finite", f"box {coords} of {obj.label!r} has a non-finite coordinate")
  if b.xmax <= b.xmin or b.ymax <= b.ymin:
    raise _bad("bbox_empty", f"box {coords} of {obj.label!r} has no area")
  if b.xmax <= 0 or b.ymax <= 0 or b.xmin >= scale_w or b.ymin >= scale_h:
    raise _bad("bbox_outside", f"box {coords} of {obj.label!r} lies outside the "
               f"{width}x{height} image")
  clipped = b.xmin < 0 or b.ymin < 0 or b.xmax > scale_w or b.ymax > scale_h
  if clipped and policy != "clip":
    raise _bad("bbox_partly_outside", f"box {coords} of {obj.label!r} extends beyond the "
               f"{width}x{height} image")
  xmin, xmax = max(b.xmin, 0.0), min(b.xmax, scale_w)
  ymin, ymax = max(b.ymin, 0.0), min(b.ymax, scale_h)
  return NormalizedObject(obj=obj, xmin=xmin / scale_w, ymin=ymin / scale_h,
                          xmax=xmax / scale_w, ymax=ymax / scale_h, clipped=clipped)
