"""YOLO label files: where an image's label file is, and its lines as objects.

One `.txt` per image, one line per object: `class cx cy w h` in [0, 1] image units, or
`class x1 y1 x2 y2 ...` (a segmentation polygon of 3 points or more, whose bounding box is
used; with --include-masks it is rasterized into the mask, masks.polygon_json). A pose
dataset (`kpt_shape: [K, D]` in the yaml) has `class cx cy w h` followed by K keypoints of D
values: exactly 5 + K*D columns, the box being the first four numbers. A line of any other
length is a malformed_line, never guessed at. Beam-free.
"""
from __future__ import annotations

import posixpath
import re
from typing import List, Optional, Sequence, Tuple

from beam_tfrecord.records import keypoints, masks
from beam_tfrecord.records.model import Box, InputError, ObjectAnnotation
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE, is_hidden
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import read_text

# A label file holds one image's objects (16 MB is ~40,000 polygons of 20 points); a larger
# one is 'too_large'.
MAX_LABEL_BYTES = 16 << 20

_EPS = 1e-6
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def label_path(image_uri: str) -> str:
  """Ultralytics' img2label_paths: the last /images/ becomes /labels/, extension -> .txt."""
  text = image_uri.replace("\\", "/")
  head, sep, tail = text.rpartition("/images/")
  if sep:
    text = head + "/labels/" + tail
  stem, dot, ext = text.rpartition(".")
  return (stem if dot and "/" not in ext else text) + ".txt"


def label_dir(image_dir: str) -> str:
  """The directory label_path maps the images of `image_dir` to."""
  return label_path(paths.join(image_dir, "probe"))[:-len("/probe.txt")]


def line_shape(count: int, kpt_shape: Optional[Tuple[int, int]] = None) -> Optional[str]:
  """What a line of `count` fields is: 'box', 'polygon' or 'pose'; None when it fits no rule
  of the dataset. A pose dataset has pose lines only (5 + K*D fields, as Ultralytics checks);
  else 5 fields are a box, an even number of 6 or more coordinates a polygon (3+ points: a
  line of class + 6 numbers is a triangle, as Ultralytics reads it)."""
  if kpt_shape is not None:
    return "pose" if count == 5 + kpt_shape[0] * kpt_shape[1] else None
  if count == 5:
    return "box"
  return "polygon" if count >= 7 and count % 2 == 1 else None


def parse_line(line: str, names: Sequence[str], include_masks: bool = False,
               kpt_shape: Optional[Tuple[int, int]] = None) -> ObjectAnnotation:
  """One label line -> an object with a normalized box. InputError for a malformed line (one
  whose length fits no rule, line_shape), a class index out of range, or coordinates outside
  [0, 1]. With include_masks a polygon line also carries its polygon as the object's
  segmentation (masks.polygon_json: normalized points, rasterized once the image size is
  known); a box or pose line carries none. A pose line's box is the four numbers after the
  class, followed by its K keypoints (x y, visible, or x y visibility as COCO's 0/1/2: an
  Ultralytics [K, 2] dataset has no visibility, and its loss counts every point labelled):
  InputError keypoint_outside_image for a labelled point outside [0, 1],
  bad_keypoint_visibility for another visibility."""
  tokens = line.split()
  if not all(_NUMBER.match(t) for t in tokens):
    raise InputError("parse", "malformed_line", f"{line!r} is not numbers")
  shape = line_shape(len(tokens), kpt_shape)
  if shape is None:
    expected = (f"`class cx cy w h` + {kpt_shape[0]} keypoints of {kpt_shape[1]} values "
                f"({5 + kpt_shape[0] * kpt_shape[1]} fields, the yaml's kpt_shape)"
                if kpt_shape else
                "`class cx cy w h` or `class x1 y1 x2 y2 x3 y3 ...` (a polygon: an even "
                "number of coordinates, 3 points or more)")
    raise InputError("parse", "malformed_line",
                     f"{line!r} has {len(tokens)} fields: expected {expected}")
  if not re.fullmatch(r"\+?\d+(\.0*)?", tokens[0]):
    raise InputError("parse", "malformed_line", f"class {tokens[0]!r} is not an index")
  index = int(float(tokens[0]))
  if index >= len(names):
    raise InputError("validate", "class_out_of_range",
                     f"class index {index} is out of range: the dataset names {len(names)} "
                     f"classes (0..{len(names) - 1})")
  values = [float(t) for t in tokens[1:]]
  points = None
  if shape == "pose":  # the box, then K points of x y (visible) or x y visibility
    given, values = values[4:], values[:4]
    if kpt_shape[1] == 2:
      given = [v for i in range(0, len(given), 2) for v in (*given[i:i + 2], 2.0)]
  if not all(0.0 <= v <= 1.0 for v in values):
    raise InputError("validate", "bbox_outside_unit",
                     f"{line!r}: coordinates must be normalized to [0, 1]")
  if shape == "pose":
    points = keypoints.checked(given, kpt_shape[0], repr(line))
    keypoints.normalized(points, 1.0, 1.0, repr(line))  # a labelled point off the image
  if len(values) == 4:
    cx, cy, w, h = values
    corners = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
  else:
    xs, ys = values[0::2], values[1::2]
    corners = (min(xs), min(ys), max(xs), max(ys))
  # a box touching the border computes to 1.0000000001 from rounded cx/w: that is the
  # border, not a box to clip (and count); real overhangs are left to --bbox-policy
  corners = tuple(min(max(c, 0.0), 1.0) if -_EPS < c < 1 + _EPS else c for c in corners)
  segmentation = (masks.polygon_json(values, normalized=True)
                  if include_masks and len(values) > 4 else None)
  return ObjectAnnotation(label=names[index], box=Box(*corners, normalized=True),
                          segmentation=segmentation, keypoints=points)


def parse_label_text(text: str, names: Sequence[str], include_masks: bool = False,
                     kpt_shape: Optional[Tuple[int, int]] = None
                     ) -> Tuple[List[ObjectAnnotation], List[Tuple[int, InputError]]]:
  """Objects of one label file, and (line number, error) for every unusable line.
  InputError 'too_many_objects' at its line MAX_OBJECTS_PER_IMAGE + 1 (blank lines aside):
  the lines after it are not parsed."""
  objects, errors = [], []
  for number, line in enumerate(text.splitlines(), start=1):
    if not line.strip():
      continue
    if len(objects) + len(errors) == MAX_OBJECTS_PER_IMAGE:
      raise InputError("parse", "too_many_objects",
                       f"the label file has more than {MAX_OBJECTS_PER_IMAGE:,} lines, the "
                       "most objects one image may have: the image is not converted")
    try:
      objects.append(parse_line(line, names, include_masks, kpt_shape))
    except InputError as e:
      errors.append((number, e))
  return objects, errors


def is_label_file(relative: str) -> bool:
  """A .txt that may be a label file (LabelImg's classes.txt and hidden files are not)."""
  return (relative.endswith(".txt") and not is_hidden(relative)
          and posixpath.basename(relative) != "classes.txt")


def read_label_text(uri: str) -> str:
  """A label file's text, at most MAX_LABEL_BYTES read (an error past it, as when unreadable)."""
  return read_text(uri, MAX_LABEL_BYTES).decode("utf-8-sig")
