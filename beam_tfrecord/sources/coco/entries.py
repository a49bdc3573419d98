"""The checks of one COCO entry: an element of `images`, `annotations` or `categories`, as
the parsers give it (dicts, lists, Python numbers), to the small tuples the join carries.
Pure and Beam-free."""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

from beam_tfrecord.records.model import Box, InputError


def _number(value: Any, field: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise InputError("parse", "wrong_type", f"{field} must be a number, got {value!r}")
  return float(value)


def _int_id(value: Any, field: str) -> int:
  if (isinstance(value, bool) or not isinstance(value, (int, float)) or
      not math.isfinite(value) or value != int(value)):
    raise InputError("parse", "wrong_type", f"{field} must be an integer, got {value!r}")
  return int(value)


def _require(record: Any, field: str, kind: str) -> Any:
  if not isinstance(record, dict):
    raise InputError("parse", "wrong_type", f"{kind} entry must be an object, got {record!r:.80}")
  if field not in record:
    raise InputError("parse", "missing_field", f"{kind} entry has no {field!r}: {record!r:.200}")
  return record[field]


_INT_OR_NONE = (int, type(None))
_NUMBER = (int, float)


def parse_image(record: Any) -> Tuple[int, str, Optional[int], Optional[int]]:
  """(id, file_name, width, height) of one entry of `images`."""
  if type(record) is dict:  # the usual entry, checked by exact types (bool is not int here)
    image_id, file_name = record.get("id"), record.get("file_name")
    width, height = record.get("width"), record.get("height")
    if (type(image_id) is int and type(file_name) is str and type(width) in _INT_OR_NONE and
        type(height) in _INT_OR_NONE):
      return image_id, file_name, width, height
  return _checked_image(record)


def _checked_image(record: Any) -> Tuple[int, str, Optional[int], Optional[int]]:
  image_id = _int_id(_require(record, "id", "image"), "image id")
  file_name = _require(record, "file_name", "image")
  if not isinstance(file_name, str):
    raise InputError("parse", "wrong_type", f"image {image_id} file_name is {file_name!r}")
  width, height = record.get("width"), record.get("height")
  width = _int_id(width, "image width") if width is not None else None
  height = _int_id(height, "image height") if height is not None else None
  return image_id, file_name, width, height


def parse_annotation(record: Any) -> Tuple[int, int, Box, bool, Optional[float]]:
  """(image_id, category_id, box, is_crowd, area) of one entry of `annotations`."""
  image_id, category_id, box, is_crowd, area = annotation_fields(record)
  return image_id, category_id, Box(*box), is_crowd, area


def annotation_fields(record: Any) -> Tuple[int, int, Tuple[float, float, float, float], bool,
                                            Optional[float]]:
  """parse_annotation with the box as (x0, y0, x1, y1). The usual entry is checked by exact
  types (bool is not a number here); anything else goes through the checks that name the
  problem (80,000 annotations: 2.0 s the careful way on every entry, 0.3 s so, under
  cProfile)."""
  if type(record) is dict:
    image_id, category_id = record.get("image_id"), record.get("category_id")
    bbox, iscrowd, area = record.get("bbox"), record.get("iscrowd", 0), record.get("area")
    if (type(image_id) is int and type(category_id) is int and type(bbox) is list and
        len(bbox) == 4 and type(bbox[0]) in _NUMBER and type(bbox[1]) in _NUMBER and
        type(bbox[2]) in _NUMBER and type(bbox[3]) in _NUMBER and
        iscrowd in (0, 1, True, False) and (area is None or type(area) in _NUMBER)):
      x, y, w, h = float(bbox[0]), float(bbox[1]), float(bbox[2]), float(bbox[3])
      return (image_id, category_id, (x, y, x + w, y + h), bool(iscrowd),
              None if area is None else float(area))
  return _checked_annotation(record)


def _checked_annotation(record: Any) -> Tuple[int, int, Tuple[float, float, float, float], bool,
                                             Optional[float]]:
  image_id = _int_id(_require(record, "image_id", "annotation"), "annotation image_id")
  category_id = _int_id(_require(record, "category_id", "annotation"), "annotation category_id")
  bbox = _require(record, "bbox", "annotation")
  if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
    raise InputError("parse", "wrong_type", f"annotation bbox must be [x, y, w, h], got {bbox!r}")
  x, y, w, h = (_number(v, "bbox value") for v in bbox)
  iscrowd = record.get("iscrowd", 0)
  if iscrowd not in (0, 1, True, False):
    raise InputError("parse", "wrong_type", f"iscrowd must be 0 or 1, got {iscrowd!r}")
  area = record.get("area")
  area = _number(area, "area") if area is not None else None
  return image_id, category_id, (x, y, x + w, y + h), bool(iscrowd), area


def annotation_extras(record: Dict[str, Any], include_masks: bool
                      ) -> Tuple[Optional[int], Optional[str], Optional[Tuple[Any, ...]]]:
  """(annotation id or None, segmentation as compact JSON or None, keypoints or None) of a
  parsed annotation. The segmentation is kept only with --include-masks: it can be large and
  these records go through shuffles. It is checked when rasterized, where the image size is
  known; the keypoints ([x, y, v] * K, as given) when the join knows the category's K.
  InputError wrong_type for `keypoints` that are not a list."""
  ann_id = record.get("id")
  ann_id = ann_id if isinstance(ann_id, int) and not isinstance(ann_id, bool) else None
  segmentation = record.get("segmentation") if include_masks else None
  points = record.get("keypoints")
  if points is not None and not isinstance(points, list):
    raise InputError("parse", "wrong_type", f"annotation keypoints must be a list "
                     f"[x, y, v, ...], got {points!r:.80}")
  if segmentation is not None:  # --include-masks only: masks imports numpy (0.2 s a process)
    from beam_tfrecord.records import masks
    segmentation = masks.to_json(segmentation)
  return ann_id, segmentation, tuple(points) if points else None


def category_keypoints(record: Dict[str, Any]
                       ) -> Optional[Tuple[Tuple[str, ...], Tuple[Tuple[int, int], ...],
                                       Optional[str]]]:
  """(keypoint names, skeleton as 0-based index pairs, a warning or None) of a parsed
  category, None when it names no keypoints. InputError wrong_type for names that are not
  strings. The skeleton is drawing metadata: one that cannot be read is dropped with the
  warning (skeleton_edges), the points are kept."""
  names = record.get("keypoints")
  if not names:
    return None
  if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
    raise InputError("parse", "wrong_type", f"category {record.get('name')!r}: keypoints "
                     f"must be a list of names, got {names!r:.80}")
  edges, problem = skeleton_edges(record.get("skeleton") or [], len(names))
  warning = (f"category {record.get('name')!r}: {problem}; the skeleton is left out, the "
             "keypoints are kept") if problem else None
  return tuple(names), edges, warning


def skeleton_edges(edges: Any, count: int) -> Tuple[Tuple[Tuple[int, int], ...], Optional[str]]:
  """(edges as 0-based pairs, None) of a COCO skeleton over `count` points, or ((), what is
  wrong). COCO's files count from 1; Datumaro (CVAT's COCO export) writes 0-based pairs, so a
  skeleton whose indices are all below `count` with a 0 among them is read as 0-based, one of
  1..count as 1-based. Anything else (a K with a 0, an index out of range, an edge that is no
  pair of integers) is no skeleton of these points."""
  if not isinstance(edges, list) or not all(
      isinstance(e, list) and len(e) == 2 and all(type(i) is int for i in e) for e in edges):
    return (), f"a skeleton edge is not a pair of keypoint numbers ({edges!r:.80})"
  indices = {i for edge in edges for i in edge}
  if not indices:
    return (), None
  if 0 in indices and max(indices) < count and min(indices) >= 0:
    return tuple((a, b) for a, b in edges), None
  if min(indices) >= 1 and max(indices) <= count:
    return tuple((a - 1, b - 1) for a, b in edges), None
  return (), (f"the skeleton's keypoint numbers ({min(indices)}..{max(indices)}) are neither "
              f"1..{count} (COCO's) nor 0..{count - 1}")


def parse_category(record: Any) -> Tuple[int, str]:
  category_id = _int_id(_require(record, "id", "category"), "category id")
  name = _require(record, "name", "category")
  if not isinstance(name, str) or not name:
    raise InputError("parse", "wrong_type", f"category {category_id} name is {name!r}")
  return category_id, name
