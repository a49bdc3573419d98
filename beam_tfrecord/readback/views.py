"""Reading an output's records back for pictures and statistics: its manifest, its shards,
each record as {key: values} and as an Item (image, boxes, class names) through the schema's
View (schemas/views.py). Records are parsed with the protobuf classes in protos.py: no
TensorFlow import.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from beam_tfrecord.records import protos
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.schemas.views import (KEYPOINTS_X_Y, KEYPOINTS_YX,  # noqa: F401
                                          NORMALIZED_CORNERS, NORMALIZED_YXYX, PIXEL_XYWH,
                                          VIEWS, View, renames, resolve)
from beam_tfrecord.storage import paths

# ---------------------------------------------------------------------------------------------
# Reading records
# ---------------------------------------------------------------------------------------------

def parse(serialized: bytes) -> Dict[str, list]:
  """A serialized tf.train.Example as {key: [values]} (bytes, ints or floats)."""
  example = protos.Example.FromString(serialized)
  result = {}
  for key, feature in example.features.feature.items():
    kind = feature.WhichOneof("kind")
    result[key] = list(getattr(feature, kind).value) if kind else []
  return result


def read_manifest(output: str) -> Manifest:
  """The manifest of an output to read back. finalize.output.IncompleteOutput (naming
  `verify --repair`, or what to remove when it would refuse the journal) while a killed run's
  replacement is pending: its manifest may be the old one over a mix of old and new shards,
  or missing."""
  from beam_tfrecord.finalize import output as outputs
  if outputs.journal_exists(output):
    raise outputs.incomplete(output)  # or, for a journal no repair takes, what to remove
  return outputs.load_manifest(output)


def shard_paths(output: str, manifest: Union[Manifest, Mapping],
                split: str) -> List[Tuple[str, Optional[int]]]:
  """(uri, examples or None when unknown) of each shard of a split, in order."""
  manifest = Manifest.of(manifest)
  if split not in manifest.splits:
    raise KeyError(f"split {split!r} not in {output}; it has {sorted(manifest.splits)}")
  return [(paths.join(output, s.path), s.examples) for s in manifest.splits[split].shards]


# ---------------------------------------------------------------------------------------------
# One record as a picture's ingredients
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Item:
  """What one record shows: its image, boxes in pixels with class names, masks, a caption."""
  image: bytes
  name: str
  group: str                                  # the image this record belongs to
  width: Optional[int] = None
  height: Optional[int] = None
  depth: Optional[int] = None
  boxes: List[Tuple[float, float, float, float]] = dataclasses.field(default_factory=list)
  labels: List[str] = dataclasses.field(default_factory=list)   # one per box
  masks: List[bytes] = dataclasses.field(default_factory=list)
  caption: Optional[str] = None               # the class of a classification record
  # each box's keypoints, (x, y, visibility) in pixels; empty when the record has none
  keypoints: List[List[Tuple[float, float, int]]] = dataclasses.field(default_factory=list)
  # a class mask's classes (ignore aside), each with the box around its pixels: what
  # `inspect` counts as objects (`boxes` stays empty: the regions are drawn as masks)
  regions: List[Tuple[Tuple[float, float, float, float], str]] = dataclasses.field(
      default_factory=list)

  def size(self) -> Tuple[int, int]:
    """(width, height): from the record, else from the image header."""
    if self.width and self.height:
      return self.width, self.height
    from beam_tfrecord.write import images
    info = images.probe(self.image)
    self.width, self.height = info.width, info.height
    return self.width, self.height


def class_names(manifest: Union[Manifest, Mapping]) -> Dict[int, str]:
  """{id: name} from the manifest's label map."""
  return {int(i): name for name, i in Manifest.of(manifest).label_map.items()}


def _first(values: Sequence, default=None):
  return values[0] if values else default


def _text(value) -> str:
  return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def item(features: Mapping[str, list], view: View, names: Mapping[int, str],
         record_id: str = "") -> Item:
  """The Item of one parsed record (see parse) read through a View. Its image is the record's
  group id, else its file name, else record_id (a schema with neither: one image a record)."""
  get = lambda key: features.get(key, []) if key else []  # noqa: E731
  ids = [int(i) for i in get(view.class_id)]
  texts = [_text(t) for t in get(view.class_text)]
  labels = texts if texts else [names.get(i, str(i)) for i in ids]
  name = _text(_first(get(view.filename), ""))
  result = Item(image=_first(get(view.image), b""), name=name,
                group=_text(_first(get(view.group), name or record_id)),
                width=_first(get(view.width)), height=_first(get(view.height)),
                depth=_first(get(view.depth)), masks=list(get(view.mask)))
  if view.class_mask:
    png = _first(get(view.class_mask))
    if png:
      result.masks, result.labels, result.regions = class_regions(png, names)
    return result
  if view.classification:
    result.caption = _first(labels)
    return result
  if view.box_format == NORMALIZED_CORNERS:
    width, height = result.size()
    xmin, ymin, xmax, ymax = (get(k) for k in view.boxes)
    result.boxes = [(x0 * width, y0 * height, x1 * width, y1 * height)
                    for x0, y0, x1, y1 in zip(xmin, ymin, xmax, ymax)]
  elif view.box_format == NORMALIZED_YXYX:
    width, height = result.size()
    values = list(get(view.boxes[0]))
    result.boxes = [(x0 * width, y0 * height, x1 * width, y1 * height)
                    for y0, x0, y1, x1 in zip(*[iter(values)] * 4)]
  else:  # PIXEL_XYWH: one box per record, four numbers
    values = list(get(view.boxes[0]))
    result.boxes = [(x, y, x + w, y + h) for x, y, w, h in zip(*[iter(values)] * 4)]
  result.labels = (labels + [""] * len(result.boxes))[:len(result.boxes)]
  if view.keypoints and result.boxes:
    result.keypoints = keypoints_of(features, view, len(result.boxes), *result.size())
  return result


def keypoints_of(features: Mapping[str, list], view: View, objects: int, width: float,
                 height: float) -> List[List[Tuple[float, float, int]]]:
  """Each object's K keypoints as (x, y, visibility) in pixels, K the values per object;
  [] when the values do not split evenly over the objects (nothing to draw then)."""
  if view.keypoint_format == KEYPOINTS_YX:
    pairs = list(features.get(view.keypoints[0], []))
    ys, xs = pairs[0::2], pairs[1::2]
  else:
    xs, ys = (list(features.get(k, [])) for k in view.keypoints)
  count = len(xs) // objects if objects else 0
  if not count or len(xs) != count * objects or len(ys) != len(xs):
    return []
  vs = [int(v) for v in features.get(view.keypoint_visibility, [])] \
      if view.keypoint_visibility else []
  if len(vs) != len(xs):  # no visibility written: every point labelled, as the TF OD API reads it
    vs = [2] * len(xs)
  points = [(x * width, y * height, v) for x, y, v in zip(xs, ys, vs)]
  return [points[i * count:(i + 1) * count] for i in range(objects)]


IGNORE_LABEL = "255 (ignore)"    # a class mask's ignore regions (VOC's border, COCO's crowds)


def class_regions(png: bytes, names: Mapping[int, str]
                  ) -> Tuple[List[bytes], List[str], List[Tuple[Tuple[float, ...], str]]]:
  """A class mask (one PNG of class ids) as (one 0/1 PNG per value but background (0), its
  class name (IGNORE_LABEL for 255), and (the box around its pixels, name) of each class but
  ignore). An unreadable mask gives nothing."""
  import numpy as np
  from PIL import Image
  try:
    with Image.open(io.BytesIO(png)) as opened:
      mask = np.asarray(opened.convert("L"))
  except Exception:
    return [], [], []
  regions, labels, boxes = [], [], []
  for value in np.unique(mask).tolist():
    if not value:
      continue
    where = mask == value
    out = io.BytesIO()
    Image.fromarray(where.astype(np.uint8)).save(out, format="PNG")
    regions.append(out.getvalue())
    label = IGNORE_LABEL if value == 255 else names.get(value, str(value))
    labels.append(label)
    if value != 255:
      rows, columns = np.flatnonzero(where.any(axis=1)), np.flatnonzero(where.any(axis=0))
      boxes.append(((float(columns[0]), float(rows[0]), float(columns[-1] + 1),
                     float(rows[-1] + 1)), label))
  return regions, labels, boxes


def to_pil(entry: Item):
  """The record's image as an RGB PIL image: encoded bytes, or raw uint8 pixels of
  height x width x depth (what some writers put in the tutorial's `image_raw`)."""
  from PIL import Image
  try:
    with Image.open(io.BytesIO(entry.image)) as im:
      return im.convert("RGB")
  except Exception:
    w, h, d = entry.width, entry.height, entry.depth or 3
    if not (w and h) or len(entry.image) != w * h * d or d not in (1, 3, 4):
      raise ValueError(f"{entry.name or entry.group}: image bytes are neither an encoded image "
                       f"nor {w}x{h}x{d} raw pixels") from None
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[d]
    return Image.frombytes(mode, (w, h), entry.image).convert("RGB")
