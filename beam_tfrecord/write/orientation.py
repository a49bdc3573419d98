"""EXIF orientation: which frame the boxes are in, and moving boxes between frames. Pure.

TensorFlow's decoders ignore EXIF, while annotation tools (browsers, CVAT, Label Studio) show
the photo upright. The tool writes every oriented photo upright (EXIF applied) and puts the
boxes in that frame. The frame the annotation used is decided per image ('auto'): if the
annotation's width/height equal the stored (raw) size but not the displayed size, the boxes
are in the stored frame and are transformed; otherwise (displayed size matches, or no size
given, or orientation 2/3/4 where both sizes are equal) they are taken as displayed-frame
boxes. --exif-frame displayed|stored forces one answer for the whole dataset.
"""
from __future__ import annotations

from typing import Optional, Tuple

from beam_tfrecord.records.model import Box

EXIF_FRAMES = ("auto", "displayed", "stored")
SWAPS_AXES = (5, 6, 7, 8)


def displayed_size(orientation: int, width: int, height: int) -> Tuple[int, int]:
  return (height, width) if orientation in SWAPS_AXES else (width, height)


def boxes_frame(orientation: int, stored: Tuple[int, int], annotated: Tuple[Optional[int],
                Optional[int]], policy: str = "auto") -> str:
  """'displayed' or 'stored': the frame the annotation's boxes are in."""
  if policy != "auto" or orientation in (0, 1):
    return policy if policy != "auto" else "displayed"
  shown = displayed_size(orientation, *stored)
  if annotated == stored and annotated != shown:
    return "stored"
  return "displayed"


def _point(x: float, y: float, orientation: int, w: float, h: float) -> Tuple[float, float]:
  """A point of the stored w x h image -> the same point after the orientation is applied."""
  return {
      1: (x, y),
      2: (w - x, y),          # mirrored left-right
      3: (w - x, h - y),      # rotated 180
      4: (x, h - y),          # mirrored top-bottom
      5: (y, x),              # transposed
      6: (h - y, x),          # rotated 90 clockwise to display
      7: (h - y, w - x),      # transversed
      8: (y, w - x),          # rotated 90 counter-clockwise to display
  }[orientation]


def points_to_displayed(points, normalized: bool, orientation: int, width: int,
                        height: int):
  """An object's keypoints (records/keypoints.py triples) moved as to_displayed moves its box."""
  from beam_tfrecord.records import keypoints
  if normalized:
    width = height = 1
  return keypoints.mapped(points, lambda x, y: _point(x, y, orientation, width, height))


def to_displayed(box: Box, orientation: int, width: int, height: int) -> Box:
  """A box in the stored frame (width x height) -> the same box in the displayed frame.
  A normalized box is turned within the unit square."""
  if box.normalized:
    width = height = 1
  x0, y0 = _point(box.xmin, box.ymin, orientation, width, height)
  x1, y1 = _point(box.xmax, box.ymax, orientation, width, height)
  return Box(min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1), box.normalized)
