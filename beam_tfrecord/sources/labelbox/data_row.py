"""One Labelbox data row (a line's JSON object) -> DataRow: its ids, the names its image may
have, its annotated size, its boxes and polygons, and the objects not kept. Pure and Beam-free.
"""
from __future__ import annotations

import math
import posixpath
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import unquote, urlsplit

from beam_tfrecord.records.model import Box, InputError, ObjectAnnotation
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
from beam_tfrecord.storage import paths

BOX, POLYGON = "ImageBoundingBox", "ImagePolygon"
UNSUPPORTED = "unsupported_shape"


class DataRow(NamedTuple):
  """What one line says about its image: ids, the names it may have under the image root,
  its annotated size, its objects, and (object index, InputError, level) per object that was
  not kept (level 'object' or 'warning')."""
  id: str
  name: str                 # external_id, else global_key, else id: how errors name the row
  candidates: Tuple[Tuple[str, str], ...]  # (field, relative name), in lookup order
  row_data: Optional[str]
  width: Optional[int]
  height: Optional[int]
  objects: Tuple[ObjectAnnotation, ...]
  problems: Tuple[Tuple[int, InputError, str], ...]


def _text(value: Any) -> Optional[str]:
  return value.strip() if isinstance(value, str) and value.strip() else None


def _number(value: Any, what: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
    raise InputError("parse", "wrong_type", f"{what} is {value!r:.80}, not a finite number")
  return float(value)


def _size(value: Any) -> Optional[int]:
  """A media_attributes width/height: a positive whole number, else None (unknown)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  if not math.isfinite(value) or value <= 0 or value != int(value):
    return None
  return int(value)


def row_data_name(row_data: Optional[str]) -> Optional[str]:
  """The file name of a row_data URL or path (percent-decoded, query left out)."""
  if not row_data:
    return None
  if paths.is_remote(row_data):
    name = unquote(posixpath.basename(urlsplit(row_data).path))
  else:
    name = posixpath.basename(row_data.replace("\\", "/"))
  return name or None


def parse_object(obj: Any, include_masks: bool = False) -> Optional[ObjectAnnotation]:
  """One entry of annotations.objects -> an ObjectAnnotation (pixel box), or None for a kind
  that has no box (the caller reports it: unsupported_shape). InputError for a box or polygon
  that cannot be read."""
  if not isinstance(obj, dict):
    raise InputError("parse", "wrong_type", f"an object is {obj!r:.80}, not a JSON object")
  kind = annotation_kind(obj)
  if kind not in (BOX, POLYGON):
    return None
  label = _text(obj.get("name"))
  if label is None:
    raise InputError("parse", "missing_field", f"an {kind} has no `name` (its class)")
  if kind == BOX:
    bbox = obj.get("bounding_box")
    if not isinstance(bbox, dict):
      raise InputError("parse", "missing_field", f"{kind} {label!r} has no `bounding_box`")
    missing = [k for k in ("top", "left", "height", "width") if k not in bbox]
    if missing:
      raise InputError("parse", "missing_field",
                       f"{kind} {label!r}: bounding_box lacks {', '.join(missing)}")
    top, left, height, width = (_number(bbox[k], f"{kind} {label!r} bounding_box.{k}")
                                for k in ("top", "left", "height", "width"))
    if height < 0 or width < 0:
      raise InputError("validate", "bad_bbox",
                       f"{kind} {label!r} has a negative size {width}x{height}")
    return ObjectAnnotation(label=label, box=Box(left, top, left + width, top + height))
  points = obj.get("polygon")
  if not isinstance(points, list) or len(points) < 3:
    raise InputError("parse", "malformed_shape", f"{kind} {label!r}: `polygon` must be a list of "
                     "3 or more {x, y} points")
  flat: List[float] = []
  for i, point in enumerate(points):
    if not isinstance(point, dict) or "x" not in point or "y" not in point:
      raise InputError("parse", "malformed_shape", f"{kind} {label!r}: point {i} is "
                       f"{point!r:.80}, not {{x, y}}")
    flat += [_number(point["x"], f"{kind} {label!r} point {i} x"),
             _number(point["y"], f"{kind} {label!r} point {i} y")]
  xs, ys = flat[0::2], flat[1::2]
  segmentation = _polygon_mask(flat) if include_masks else None
  return ObjectAnnotation(label=label, box=Box(min(xs), min(ys), max(xs), max(ys)),
                          segmentation=segmentation)


def _polygon_mask(flat: Sequence[float]) -> str:
  from beam_tfrecord.records import masks
  return masks.to_json([list(flat)])


def annotation_kind(obj: Dict[str, Any]) -> str:
  """The object's annotation_kind; without one (hand-made files), what its geometry says."""
  kind = obj.get("annotation_kind")
  if isinstance(kind, str) and kind:
    return kind
  for key, inferred in (("bounding_box", BOX), ("polygon", POLYGON), ("point", "ImagePoint"),
                        ("line", "ImagePolyline"), ("mask", "ImageSegmentationMask")):
    if key in obj:
      return inferred
  return "unknown"


def _the_label(projects: Any) -> Dict[str, Any]:
  """The one label of a data row, over all its projects (InputError otherwise)."""
  if not isinstance(projects, dict):
    raise InputError("parse", "missing_field", "the data row has no `projects` object (export "
                     "v2 of a project, or of Catalog with its projects)")
  found = []
  for project_id, project in projects.items():
    labels = project.get("labels") if isinstance(project, dict) else None
    if not isinstance(labels, list):
      raise InputError("parse", "wrong_type", f"project {project_id}: `labels` is not a list")
    found += [(project_id, label) for label in labels]
  if not found:
    raise InputError("parse", "no_label", "the data row has no label in the export (not "
                     "labeled yet?): it is not converted")
  if len(found) > 1:
    where = sorted({p for p, _ in found})
    raise InputError("parse", "several_labels", f"the data row has {len(found)} labels (in "
                     f"project{'s' if len(where) > 1 else ''} {', '.join(where)}); one label "
                     "per data row is converted: export one project, without consensus labels")
  label = found[0][1]
  if not isinstance(label, dict):
    raise InputError("parse", "wrong_type", "a label is not a JSON object")
  performance = label.get("performance_details")
  if isinstance(performance, dict) and performance.get("skipped") is True:
    raise InputError("parse", "skipped_label", "the label was skipped by its labeler: the "
                     "image is not converted")
  return label


def parse_data_row(doc: Dict[str, Any], include_masks: bool = False,
                   source: str = "the export") -> DataRow:
  """One data row (load_line) -> DataRow. InputError for what costs the whole image: no
  data_row, not an image, no label or several, a skipped label, objects that are no list or
  more than MAX_OBJECTS_PER_IMAGE.
  Objects that cannot be read, and kinds without a box, are in DataRow.problems (`source`
  names the file in their messages)."""
  data_row = doc.get("data_row")
  if not isinstance(data_row, dict):
    raise InputError("parse", "missing_field", "the line has no `data_row` object: not a "
                     "Labelbox export v2 data row")
  row_id = _text(data_row.get("id")) or ""
  external_id, global_key = _text(data_row.get("external_id")), _text(data_row.get("global_key"))
  row_data = _text(data_row.get("row_data"))
  name = row_name(doc)
  if not name:
    raise InputError("parse", "missing_field", "the data row has no id, external_id or "
                     "global_key")
  media = doc.get("media_attributes")
  media = media if isinstance(media, dict) else {}
  mime = media.get("mime_type")
  if isinstance(mime, str) and mime and not mime.lower().startswith("image/"):
    raise InputError("parse", "unsupported_media", f"the data row is {mime}, not an image")
  label = _the_label(doc.get("projects"))
  annotations = label.get("annotations")
  annotations = annotations if isinstance(annotations, dict) else {}
  if "frames" in annotations:
    raise InputError("parse", "unsupported_media", "the label has `frames`: a video, not an "
                     "image")
  items = annotations.get("objects", [])
  if not isinstance(items, list):
    raise InputError("parse", "wrong_type", "annotations.objects is not a list")
  if len(items) > MAX_OBJECTS_PER_IMAGE:  # none is built
    raise InputError("parse", "too_many_objects",
                     f"the data row has {len(items):,} objects, more than the "
                     f"{MAX_OBJECTS_PER_IMAGE:,} one image may have: the image is not converted")
  objects, problems = [], []
  for i, obj in enumerate(items):
    try:
      parsed = parse_object(obj, include_masks)
    except InputError as e:
      problems.append((i, e, "object"))
      continue
    if parsed is None:
      problems.append((i, InputError(
          "parse", UNSUPPORTED, f"object {i} of {source} is an {annotation_kind(obj)}, which "
          "has no box: only ImageBoundingBox and ImagePolygon are converted"), "warning"))
      continue
    objects.append(parsed)
  candidates = [(field, value) for field, value in (
      ("external_id", external_id), ("global_key", global_key),
      ("row_data file name", row_data_name(row_data))) if value]
  unique = tuple((field, value) for i, (field, value) in enumerate(candidates)
                 if value not in [v for _, v in candidates[:i]])  # global_key == external_id
  return DataRow(row_id or name, name, unique, row_data, _size(media.get("width")),
                 _size(media.get("height")), tuple(objects), tuple(problems))


def row_name(doc: Dict[str, Any]) -> Optional[str]:
  """How errors name a data row: its external_id, else its global_key, else its id."""
  data_row = doc.get("data_row")
  if not isinstance(data_row, dict):
    return None
  return next((t for t in map(_text, (data_row.get(k) for k in ("external_id", "global_key",
                                                                  "id"))) if t), None)
