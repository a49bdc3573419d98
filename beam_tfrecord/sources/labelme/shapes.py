"""A LabelMe `shapes` list to objects: rectangles and polygons, groups, ignored and
unsupported shapes. Pure and Beam-free."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

from beam_tfrecord.records import masks
from beam_tfrecord.records.model import Box, InputError, ObjectAnnotation

IGNORE_LABEL = "__ignore__"  # labelme2coco's ignore regions: not a class
BOX_SHAPES = ("rectangle", "polygon")


def _number(value: Any) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def shape_points(shape: Dict[str, Any], what: str) -> List[Tuple[float, float]]:
  """A shape's points as (x, y) floats; InputError 'malformed_shape' for anything else."""
  points = shape.get("points")
  if not isinstance(points, list) or not points:
    raise InputError("parse", "malformed_shape", f"{what} has no `points` list")
  result = []
  for point in points:
    if not (isinstance(point, list) and len(point) == 2 and all(map(_number, point))):
      raise InputError("parse", "malformed_shape",
                       f"{what}: a point must be [x, y] finite numbers, got {point!r:.60}")
    result.append((float(point[0]), float(point[1])))
  return result


def shape_polygon(shape_type: str, points: Sequence[Tuple[float, float]],
                  what: str) -> List[float]:
  """The outline of a box shape as [x1, y1, x2, y2, ...]: a rectangle's four corners (its two
  points in any order; more points: their bounding box), a polygon's points."""
  if shape_type == "rectangle":
    if len(points) < 2:
      raise InputError("parse", "malformed_shape", f"{what}: a rectangle needs 2 points, got "
                       f"{len(points)}")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
    return [x0, y0, x1, y0, x1, y1, x0, y1]
  if len(points) < 3:
    raise InputError("parse", "malformed_shape", f"{what}: a polygon needs 3 points or more, "
                     f"got {len(points)}")
  return [v for point in points for v in point]


def parse_shapes(shapes: Sequence[Any], include_masks: bool = False, where: str = "the file"
                 ) -> Tuple[List[ObjectAnnotation], List[Tuple[str, InputError]]]:
  """The objects of a LabelMe `shapes` list, in the order of their first shape, and
  (level, error) for every shape or group that is not one: 'object' for a malformed shape or
  a group of mixed labels, 'warning' for an unsupported shape type. Shapes with one integer
  group_id are one object (union of boxes; with include_masks, its polygons as the parts of
  one COCO segmentation); `__ignore__` shapes are skipped. `where` names the file in the
  messages."""
  groups: Dict[Any, List[Tuple[str, List[float], int]]] = {}
  problems: List[Tuple[str, InputError]] = []
  for index, shape in enumerate(shapes):
    what = f"shape {index}"
    if not isinstance(shape, dict):
      problems.append(("object", InputError("parse", "malformed_shape",
                                            f"{what} is a {type(shape).__name__}, not an "
                                            "object")))
      continue
    label = shape.get("label")
    if not isinstance(label, str) or not label.strip():
      problems.append(("object", InputError("parse", "missing_label",
                                            f"{what} has no label (got {label!r:.40})")))
      continue
    what = f"shape {index} ({label!r})"
    if label == IGNORE_LABEL:
      continue
    # labelme 3.x before shape types wrote polygons only, without the key
    shape_type = shape.get("shape_type") or "polygon"
    if not isinstance(shape_type, str):
      problems.append(("object", InputError("parse", "malformed_shape",
                                            f"{what}: shape_type is {shape_type!r:.40}")))
      continue
    if shape_type not in BOX_SHAPES:
      problems.append(("warning", InputError(
          "parse", "unsupported_shape", f"{what} of {where} is a {shape_type!r} shape: only "
          "rectangle and polygon shapes become objects; it is not converted")))
      continue
    group_id = shape.get("group_id")
    if group_id is not None and (not isinstance(group_id, int) or isinstance(group_id, bool)):
      problems.append(("object", InputError("parse", "malformed_shape",
                                            f"{what}: group_id is {group_id!r:.40}, not an "
                                            "integer or null")))
      continue
    try:
      outline = shape_polygon(shape_type, shape_points(shape, what), what)
    except InputError as e:
      problems.append(("object", e))
      continue
    key = ("group", group_id) if group_id is not None else ("shape", index)
    groups.setdefault(key, []).append((label, outline, index))
  objects = []
  for (kind, group_id), members in groups.items():
    labels = sorted({label for label, _, _ in members})
    if len(labels) > 1:
      problems.append(("object", InputError(
          "validate", "group_labels_differ",
          f"group_id {group_id} joins shapes {[i for _, _, i in members]} of different labels "
          f"{labels}: one object has one label; the group is not converted")))
      continue
    xs = [v for _, outline, _ in members for v in outline[0::2]]
    ys = [v for _, outline, _ in members for v in outline[1::2]]
    segmentation = (masks.to_json([outline for _, outline, _ in members])
                    if include_masks else None)
    objects.append(ObjectAnnotation(label=labels[0],
                                    box=Box(min(xs), min(ys), max(xs), max(ys)),
                                    segmentation=segmentation))
  return objects, problems
