"""Keypoints: a dataset's layout of named points, and each object's points as flat
(x, y, visibility) triples. Pure: no Beam, no TensorFlow.

The TF Object Detection API decodes keypoints with one `num_keypoints` K for every object
(research TfExampleDecoder reshapes `image/object/keypoint/x` to [objects, K]), so a dataset
has one layout of K points. Classes that name the same points share them (COCO's person);
classes with other lists get slices of their own after them, in the sources' class order,
and an object fills its class's slice only. An object of a class without keypoints (COCO's
non-person categories in a keypoint file) carries K unlabelled points: x = y = 0,
visibility 0, as research create_coco_tf_record.py pads the annotations it has no keypoints for.

Visibility is COCO's: 0 not labelled (x = y = 0), 1 labelled but not visible, 2 visible.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from beam_tfrecord.records.model import ErrorRecord, InputError

VISIBILITIES = (0, 1, 2)
_EPS = 1e-6  # a point on the border computed from rounded values is on the border

Triples = Tuple[float, ...]  # x0, y0, v0, x1, y1, v1, ...


@dataclasses.dataclass(frozen=True)
class KeypointLayout:
  """K named points per object: `names` (K), `skeleton` (edges as 0-based index pairs into
  names) and `classes`, (class, first, count) for each class whose objects have keypoints:
  its points are names[first:first + count]."""
  names: Tuple[str, ...]
  skeleton: Tuple[Tuple[int, int], ...] = ()
  classes: Tuple[Tuple[str, int, int], ...] = ()

  @property
  def size(self) -> int:
    return len(self.names)

  def slot(self, label: str) -> Optional[Tuple[int, int]]:
    """(first, count) of a class's points, None for a class without keypoints."""
    for name, first, count in self.classes:
      if name == label:
        return first, count
    return None

  def to_json(self) -> Dict[str, Any]:
    return {"num_keypoints": self.size, "names": list(self.names),
            "skeleton": [list(edge) for edge in self.skeleton],
            "classes": {name: {"first": first, "count": count}
                        for name, first, count in self.classes}}

  @classmethod
  def from_json(cls, data: Dict[str, Any]) -> "KeypointLayout":
    return cls(tuple(data["names"]), tuple(tuple(e) for e in data.get("skeleton", ())),
               tuple((name, c["first"], c["count"]) for name, c in
                     data.get("classes", {}).items()))


def layout_of(groups: Sequence[Tuple[str, Sequence[str], Sequence[Tuple[int, int]]]]
              ) -> Optional[KeypointLayout]:
  """The layout of (class, point names, skeleton as 0-based pairs) in the source's class
  order; classes with the same names share their points. None when no class has any."""
  names: List[str] = []
  skeleton: List[Tuple[int, int]] = []
  firsts: Dict[Tuple[str, ...], int] = {}
  classes = []
  for label, points, edges in groups:
    points = tuple(points)
    if not points:
      continue
    if points not in firsts:
      firsts[points] = len(names)
      skeleton += [(firsts[points] + a, firsts[points] + b) for a, b in edges]
      names += points
    classes.append((label, firsts[points], len(points)))
  return KeypointLayout(tuple(names), tuple(skeleton), tuple(classes)) if names else None


def unlabelled(layout: KeypointLayout) -> Triples:
  """An object's K points when its class has none."""
  return (0.0,) * (3 * layout.size)


def checked(values: Sequence[Any], count: int, what: str) -> Triples:
  """`count` (x, y, v) triples as floats, unlabelled points (v = 0) at 0, 0. InputError
  keypoint_count_mismatch for another number of values, bad_keypoint_visibility for a v
  other than 0, 1, 2, wrong_type for a value that is no finite number."""
  if len(values) != 3 * count:
    raise InputError("validate", "keypoint_count_mismatch",
                     f"{what} has {len(values)} keypoint values; its class names {count} "
                     f"keypoints ({3 * count} values: x, y, visibility each)")
  out: List[float] = []
  for i in range(0, len(values), 3):
    x, y, v = values[i:i + 3]
    for value in (x, y, v):
      if isinstance(value, bool) or not isinstance(value, (int, float)) or \
          not math.isfinite(value):
        raise InputError("parse", "wrong_type",
                         f"{what}: keypoint {i // 3} has {value!r}, not a finite number")
    if v not in VISIBILITIES:
      raise InputError("validate", "bad_keypoint_visibility",
                       f"{what}: keypoint {i // 3} has visibility {v!r}; COCO's are 0 (not "
                       "labelled), 1 (labelled, not visible) and 2 (visible)")
    out += (float(x), float(y), float(v)) if v else (0.0, 0.0, 0.0)
  return tuple(out)


def placed(layout: KeypointLayout, label: str, triples: Triples, what: str) -> Triples:
  """A class's own points in the layout's K (its slice; the others unlabelled). InputError
  keypoint_count_mismatch when the class has no keypoints but the object has some."""
  slot = layout.slot(label)
  if slot is None:
    if triples:
      raise InputError("validate", "keypoint_count_mismatch",
                       f"{what} has {len(triples) // 3} keypoints; its class {label!r} names "
                       "none")
    return unlabelled(layout)
  first, count = slot
  if first == 0 and count == layout.size:
    return triples
  empty = unlabelled(layout)
  return empty[:3 * first] + triples + empty[3 * (first + count):]


def mapped(triples: Triples, point: Callable[[float, float], Tuple[float, float]]) -> Triples:
  """Labelled points moved by `point` (an EXIF turn, a resize); unlabelled stay at 0, 0."""
  out: List[float] = []
  for i in range(0, len(triples), 3):
    x, y, v = triples[i:i + 3]
    out += (*point(x, y), v) if v else (0.0, 0.0, 0.0)
  return tuple(out)


def normalized(triples: Triples, width: float, height: float, what: str
               ) -> Tuple[List[float], List[float], List[int]]:
  """(xs, ys, visibilities) in [0, 1] image units: pixels divided by the image size (1 x 1
  for points already normalized). InputError keypoint_outside_image for a labelled point
  off the image."""
  xs: List[float] = []
  ys: List[float] = []
  vs: List[int] = []
  for i in range(0, len(triples), 3):
    x, y, v = triples[i] / width, triples[i + 1] / height, int(triples[i + 2])
    if v and not (-_EPS <= x <= 1 + _EPS and -_EPS <= y <= 1 + _EPS):
      raise InputError("validate", "keypoint_outside_image",
                       f"{what}: keypoint {i // 3} ({triples[i]:g}, {triples[i + 1]:g}) lies "
                       f"outside the {width:g}x{height:g} image")
    xs.append(min(max(x, 0.0), 1.0))
    ys.append(min(max(y, 0.0), 1.0))
    vs.append(v)
  return xs, ys, vs


def differing(layouts: Sequence[Tuple[str, Optional[KeypointLayout]]]
              ) -> Tuple[Optional[KeypointLayout], List[str]]:
  """(the layout of the first file, in name order, that has one; the files whose layout
  differs from it, a file without keypoints among them): every record of a dataset must
  have the same K points, or none in a dataset without keypoints."""
  ordered = sorted(layouts, key=lambda u: u[0])
  first = next((layout for _, layout in ordered if layout is not None), None)
  if first is None:
    return None, []
  return first, [uri for uri, layout in ordered if layout != first]


Points = Tuple[List[float], List[float], List[int]]


def written(valid: Sequence[Tuple[Any, int]], width: int, height: int, source: str, key: str
            ) -> Tuple[List[Tuple[Any, int]], List[Points], List[Any]]:
  """The writable objects of one image ((boxes.NormalizedObject, label id) pairs, in order)
  with their points normalized: (objects kept, their (xs, ys, visibilities), object-level
  ErrorRecords). An object whose labelled point lies off the image is dropped whole (box,
  class and points), as an unreadable mask drops its object: what is written stays aligned,
  and no point is moved to the border or unlabelled. No points when no object has any."""
  # a loop, not next() over a generator (1.5 -> 0.9 us for two objects; loaded 2-core machine)
  for n, _ in valid:
    if n.obj.keypoints is not None:
      size = len(n.obj.keypoints)
      break
  else:
    return list(valid), [], []
  kept, points, errors = [], [], []
  for pair in valid:
    obj = pair[0].obj
    what = f"{obj.label!r}" + (f" (annotation id {obj.id})" if obj.id is not None else "")
    triples = obj.keypoints if obj.keypoints is not None else (0.0,) * size
    try:
      if len(triples) != size:
        raise InputError("validate", "keypoint_count_mismatch",
                         f"{what} has {len(triples) // 3} keypoints, the image's other "
                         f"objects {size // 3}")
      scale = (1.0, 1.0) if obj.box.normalized else (width, height)
      points.append(normalized(triples, *scale, what))
    except InputError as e:
      errors.append(ErrorRecord(source=source, stage=e.stage, reason=e.reason, key=key,
                                level="object", message=e.message))
      continue
    kept.append(pair)
  return kept, points, errors
