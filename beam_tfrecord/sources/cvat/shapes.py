"""One CVAT `<image>` element as objects: its `<box>`es and `<polygon>`s, grouped by group_id,
and the image's subset as a split name. Pure and Beam-free: the elements come from the
streaming parser (document.parse_range) or from tests."""
from __future__ import annotations

import dataclasses
import math
import re
from typing import FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

from beam_tfrecord.records import keypoints, masks
from beam_tfrecord.records.keypoints import KeypointLayout
from beam_tfrecord.records.model import (Box, InputError, ObjectAnnotation,
                                         check_split_name)

SHAPES = ("box", "polygon")  # what becomes an object


class ParsedImage(NamedTuple):
  """One <image>: its attributes, objects, and (InputError, level) for each element not
  converted (object errors, unsupported shapes as warnings)."""
  name: Optional[str]
  width: Optional[int]
  height: Optional[int]
  subset: Optional[str]
  objects: Tuple[ObjectAnnotation, ...]
  problems: Tuple[Tuple[InputError, str], ...]


def _number(value: Optional[str], what: str) -> float:
  if value is None:
    raise InputError("parse", "missing_field", f"{what} is missing")
  try:
    number = float(value)
  except ValueError:
    raise InputError("parse", "wrong_type", f"{what} is {value!r}, not a number") from None
  if not math.isfinite(number):
    raise InputError("parse", "wrong_type", f"{what} is {value!r}, not a finite number")
  return number


def _size(value: Optional[str], what: str) -> Optional[int]:
  if value is None or value == "":
    return None
  if not re.fullmatch(r"\d+", value.strip()):
    raise InputError("parse", "wrong_type", f"{what} is {value!r}, not a whole number")
  return int(value)


def parse_points(text: Optional[str], what: str) -> List[float]:
  """CVAT's 'x0,y0;x1,y1;...' -> [x0, y0, x1, y1, ...] (InputError when malformed)."""
  if not text or not text.strip():
    raise InputError("parse", "missing_field", f"{what} has no points")
  flat: List[float] = []
  for pair in text.strip().split(";"):
    xy = pair.split(",")
    if len(xy) != 2:
      raise InputError("parse", "malformed_points", f"{what}: {pair!r} is not 'x,y'")
    flat += [_number(v.strip(), f"{what} point") for v in xy]
  return flat


def rotated_corners(xtl: float, ytl: float, xbr: float, ybr: float,
                    degrees: float) -> List[float]:
  """The corners of a box turned `degrees` clockwise on screen about its centre, as CVAT
  turns a rotated box: [x, y, ...] from the top left corner, clockwise."""
  cx, cy = (xtl + xbr) / 2, (ytl + ybr) / 2
  cos, sin = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
  flat: List[float] = []
  for x, y in ((xtl, ytl), (xbr, ytl), (xbr, ybr), (xtl, ybr)):
    flat += [cx + (x - cx) * cos - (y - cy) * sin, cy + (x - cx) * sin + (y - cy) * cos]
  return flat


class _Shape(NamedTuple):
  group: int
  label: str
  polygon: List[float]   # a box as its 4 corners
  occluded: bool


def parse_shape(element, labels: Optional[FrozenSet[str]]) -> _Shape:
  """One <box> or <polygon> (InputError: empty label missing_label, label not in the meta
  unknown_label, coordinates, occluded or group_id malformed, a polygon of < 3 points)."""
  tag = element.tag
  label = element.get("label")
  if label is None or not label.strip():
    raise InputError("parse", "missing_label", f"a <{tag}> has an empty label")
  what = f"<{tag}> {label!r}"
  if labels is not None and label not in labels:
    raise InputError("validate", "unknown_label",
                     f"{what}: the label is not one of the {len(labels)} labels of <meta>")
  occluded = element.get("occluded", "0")
  if occluded not in ("0", "1"):
    raise InputError("parse", "wrong_type", f"{what}: occluded is {occluded!r}, not 0 or 1")
  group = element.get("group_id", "0")
  if not re.fullmatch(r"\d+", group):
    raise InputError("parse", "wrong_type", f"{what}: group_id is {group!r}, not a number")
  if tag == "box":
    xtl, ytl, xbr, ybr = (_number(element.get(k), f"{what} {k}")
                          for k in ("xtl", "ytl", "xbr", "ybr"))
    rotation = _number(element.get("rotation", "0"), f"{what} rotation")
    polygon = (rotated_corners(xtl, ytl, xbr, ybr, rotation) if rotation % 360 else
               [xtl, ytl, xbr, ytl, xbr, ybr, xtl, ybr])
  else:
    polygon = parse_points(element.get("points"), what)
    if len(polygon) < 6:
      raise InputError("parse", "malformed_shape",
                       f"{what} has {len(polygon) // 2} points; a polygon needs 3")
  return _Shape(int(group), label, polygon, occluded == "1")


def _object(shapes: Sequence[_Shape], include_masks: bool) -> ObjectAnnotation:
  """One object of one shape or of a group: the box around all their points; with masks, the
  polygons (a COCO polygon list, rasterized as their union)."""
  xs = [v for s in shapes for v in s.polygon[0::2]]
  ys = [v for s in shapes for v in s.polygon[1::2]]
  return ObjectAnnotation(
      label=shapes[0].label, box=Box(min(xs), min(ys), max(xs), max(ys)),
      truncated=any(s.occluded for s in shapes),
      segmentation=masks.to_json([s.polygon for s in shapes]) if include_masks else None)


def parse_image(element, labels: Optional[FrozenSet[str]], include_masks: bool = False,
                source: str = "", layout: Optional[KeypointLayout] = None) -> ParsedImage:
  """One <image> element -> ParsedImage. Objects keep the order of their first element. Its
  `width`/`height` are checked here (InputError wrong_type: the image is not converted).
  With the file's keypoint `layout` (its skeleton labels), each <skeleton> is an object with
  its points and the other objects carry the layout's points unlabelled."""
  name = element.get("name")
  width = _size(element.get("width"), f"<image> {name!r} width")
  height = _size(element.get("height"), f"<image> {name!r} height")
  problems: List[Tuple[InputError, str]] = []
  order: List[object] = []  # a shape, or a group id in the place of its first shape
  groups = {}
  for child in element:
    tag = child.tag
    if tag == "skeleton" and layout is not None:  # an object of its own, whatever its group
      try:
        order.append(parse_skeleton(child, layout))
      except InputError as e:
        e.message = f"image {name!r}: {e.message}"
        problems.append((e, "object"))
      continue
    if tag not in SHAPES:
      label = child.get("label")
      problems.append((InputError(
          "parse", "unsupported_shape",
          f"<{tag}>{f' {label!r}' if label else ''} of image {name!r} in {source} is not "
          f"converted: only <box>, <polygon> and the <skeleton>s of <meta>'s skeleton labels "
          "become objects"), "warning"))
      continue
    try:
      shape = parse_shape(child, labels)
    except InputError as e:
      e.message = f"image {name!r}: {e.message}"
      problems.append((e, "object"))
      continue
    if not shape.group:
      order.append(shape)
    else:
      if shape.group not in groups:
        order.append(shape.group)
      groups.setdefault(shape.group, []).append(shape)
  objects = []
  for item in order:
    if isinstance(item, ObjectAnnotation):  # a skeleton
      objects.append(item)
      continue
    if isinstance(item, _Shape):
      objects.append(_object([item], include_masks))
      continue
    members = groups[item]
    names = sorted({s.label for s in members})
    if len(names) > 1:
      problems.append((InputError(
          "validate", "group_labels_differ",
          f"image {name!r}: the {len(members)} elements of group_id {item} have the labels "
          f"{names}; one object has one label, so the group is not converted"), "object"))
      continue
    objects.append(_object(members, include_masks))
  if layout is not None:
    objects = [o if o.keypoints is not None else
               dataclasses.replace(o, keypoints=keypoints.unlabelled(layout)) for o in objects]
  return ParsedImage(name, width, height, element.get("subset"), tuple(objects),
                     tuple(problems))


def parse_skeleton(element, layout: Optional[KeypointLayout]) -> ObjectAnnotation:
  """One <skeleton> (CVAT's exporter: `label`, then a `<points label outside occluded
  points="x,y">` per point) -> an object whose box bounds its labelled points. Visibility as
  CVAT's COCO Keypoints export gives it: outside 0, occluded 1, else 2. InputError for a label
  that is no skeleton of <meta> (unknown_label), points that are not the skeleton's
  (keypoint_count_mismatch), or no labelled point (bbox_empty)."""
  label = element.get("label") or ""
  slot = layout.slot(label) if layout is not None else None
  if slot is None:
    raise InputError("validate", "unknown_label",
                     f"<skeleton> {label!r}: the label is no skeleton of <meta>")
  first, count = slot
  names = layout.names[first:first + count]
  given = {}
  for point in element:
    if point.tag != "points":
      continue  # its <attribute>s
    what = f"<skeleton> {label!r} point {point.get('label')!r}"
    xy = parse_points(point.get("points"), what)
    if point.get("label") not in names or point.get("label") in given or len(xy) != 2:
      raise InputError("validate", "keypoint_count_mismatch",
                       f"{what} is not one point of the skeleton's {list(names)}, once")
    visible = 0 if point.get("outside") == "1" else 1 if point.get("occluded") == "1" else 2
    given[point.get("label")] = (*xy, visible)
  if len(given) != count:
    raise InputError("validate", "keypoint_count_mismatch",
                     f"<skeleton> {label!r} has {len(given)} of its {count} points "
                     f"(missing: {[n for n in names if n not in given]})")
  triples = keypoints.checked([v for n in names for v in given[n]], count, f"<skeleton> {label!r}")
  labelled = [triples[i:i + 2] for i in range(0, len(triples), 3) if triples[i + 2]]
  if not labelled:
    raise InputError("validate", "bbox_empty",
                     f"<skeleton> {label!r} has no labelled point: no box around it")
  xs, ys = [p[0] for p in labelled], [p[1] for p in labelled]
  return ObjectAnnotation(label=label, box=Box(min(xs), min(ys), max(xs), max(ys)),
                          keypoints=keypoints.placed(layout, label, triples, label))


def split_of(subset: Optional[str]) -> Optional[str]:
  """A CVAT subset as a split name: lower-cased, None for none or CVAT's 'default'
  (InputError bad_subset when it cannot name shard files)."""
  if subset is None or not subset.strip() or subset.strip().lower() == "default":
    return None
  name = subset.strip().lower()
  try:
    return check_split_name(name)
  except ValueError:
    raise InputError("parse", "bad_subset",
                     f"subset {subset!r} cannot be a split name (letters, digits, '_', '.', "
                     "'-'); give the --input a SPLIT= prefix") from None
