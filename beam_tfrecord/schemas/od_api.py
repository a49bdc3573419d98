"""The TF Object Detection API schema (read by research `object_detection` and `official/vision`).

`encode` is a pure function: annotation + prepared image + label map -> serialized Example,
plus the per-object problems it found. No Beam, no TensorFlow.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from beam_tfrecord.records import keypoints, protos
from beam_tfrecord.records.model import ImageAnnotation
from beam_tfrecord.schemas import base
from beam_tfrecord.schemas.base import Encoded
from beam_tfrecord.records.model import PreparedImage

NAME = "od_api"
FIRST_ID = 1      # 0 is background in the TF OD API
IMAGE_LEVEL = False

# key -> (dtype, kind) where kind is "fixed" (one value per example) or "var" (one per object).
FEATURE_SPEC: Dict[str, Tuple[str, str]] = {
    "image/encoded": ("string", "fixed"),
    "image/format": ("string", "fixed"),
    "image/height": ("int64", "fixed"),
    "image/width": ("int64", "fixed"),
    "image/channels": ("int64", "fixed"),
    "image/filename": ("string", "fixed"),
    "image/source_id": ("string", "fixed"),
    "image/key/sha256": ("string", "fixed"),
    "image/object/bbox/xmin": ("float32", "var"),
    "image/object/bbox/xmax": ("float32", "var"),
    "image/object/bbox/ymin": ("float32", "var"),
    "image/object/bbox/ymax": ("float32", "var"),
    "image/object/class/text": ("string", "var"),
    "image/object/class/label": ("int64", "var"),
    "image/object/is_crowd": ("int64", "var"),
    "image/object/area": ("float32", "var"),
    "image/object/difficult": ("int64", "var"),
    "image/object/truncated": ("int64", "var"),
    "image/object/view": ("string", "var"),
}
# --include-masks: one PNG (0/1, image size) per object, as the official converter writes it.
MASK_FEATURE = "image/object/mask"
# A source with keypoints (records/keypoints.py): K values per object, flattened, as research
# create_coco_tf_record.py writes them: x, y normalized like the boxes, visibility 0/1/2,
# `num` the labelled points (v > 0) of each object, `text` each object's K point names.
# Research TfExampleDecoder(num_keypoints=K) reads x, y and visibility.
KEYPOINT_SPEC: Dict[str, Tuple[str, str]] = {
    "image/object/keypoint/x": ("float32", "var"),
    "image/object/keypoint/y": ("float32", "var"),
    "image/object/keypoint/visibility": ("int64", "var"),
    "image/object/keypoint/num": ("int64", "var"),
    "image/object/keypoint/text": ("string", "var"),
}


def feature_spec(include_masks: bool = False) -> Dict[str, Tuple[str, str]]:
  """The keys this schema may write (recorded in manifest.json)."""
  return {**FEATURE_SPEC, MASK_FEATURE: ("string", "var")} if include_masks else dict(FEATURE_SPEC)


# per-image keys other schemas share (classification)
IMAGE_KEYS = ("image/encoded", "image/format", "image/height", "image/width", "image/channels",
              "image/filename", "image/key/sha256")

B, F, I = protos.BYTES, protos.FLOATS, protos.INTS


def image_values(ann: ImageAnnotation, image: PreparedImage) -> Dict[str, Tuple[str, list]]:
  """The IMAGE_KEYS features of one image as {key: (kind, values)} (protos.ExampleLayout)."""
  return {
      "image/encoded": (B, [image.encoded]),
      "image/format": (B, [image.info.format.encode()]),
      "image/height": (I, [image.info.height]),
      "image/width": (I, [image.info.width]),
      "image/channels": (I, [image.info.channels]),
      "image/filename": (B, [ann.key.encode("utf-8")]),
      "image/key/sha256": (B, [image.sha256().encode()]),
  }


def image_features(ann: ImageAnnotation, image: PreparedImage) -> Dict:
  """The IMAGE_KEYS features of one image as protobuf Features (the generic path)."""
  maker = {B: _bytes, F: _floats, I: _ints}
  return {key: maker[kind](values) for key, (kind, values) in image_values(ann, image).items()}


_bytes, _floats, _ints = base.bytes_feature, base.float_feature, base.int64_feature


# This schema writes its Examples directly from a precomputed layout (protos.ExampleLayout:
# a tenth of protobuf's cost per image, the same bytes); other schemas build protobuf messages.
_LAYOUT = protos.ExampleLayout({**feature_spec(include_masks=True), **KEYPOINT_SPEC})


def encode(ann: ImageAnnotation, image: PreparedImage, label_map: Mapping[str, int],
           bbox_policy: str = "clip", include_masks: bool = False,
           renames: Optional[Mapping[str, str]] = None) -> Encoded:
  """Build the Example. Objects that fail validation or lack a label id are left out of the
  Example and reported as errors; with bbox_policy='error' a box partly outside the image
  fails the whole image instead. With include_masks every object carries its PNG `mask`."""
  width, height = image.info.width, image.info.height
  valid, errors = base.valid_objects(ann, width, height, label_map, bbox_policy)
  valid, points, point_errors = keypoints.written(valid, width, height, ann.source, ann.key)
  errors += point_errors
  # one pass over the objects: eight list comprehensions and three scans for VOC's
  # attributes took 3.4 us for two objects, this 1.1 us (timeit, loaded 2-core machine)
  xmin, xmax, ymin, ymax, text, ids, crowd, area, labels = [], [], [], [], [], [], [], [], []
  clipped, voc = 0, False
  for n, label_id in valid:
    obj = n.obj
    xmin.append(n.xmin)
    xmax.append(n.xmax)
    ymin.append(n.ymin)
    ymax.append(n.ymax)
    labels.append(obj.label)
    text.append(obj.label.encode("utf-8"))
    ids.append(label_id)
    crowd.append(int(obj.is_crowd))
    area.append(obj.area if obj.area is not None else
                (n.xmax - n.xmin) * width * (n.ymax - n.ymin) * height)
    clipped += n.clipped
    voc = voc or obj.difficult is not None or obj.truncated is not None or obj.pose is not None

  features = {
      **image_values(ann, image),
      "image/source_id": (B, [ann.source_id.encode("utf-8")]),
      "image/object/bbox/xmin": (F, xmin),
      "image/object/bbox/xmax": (F, xmax),
      "image/object/bbox/ymin": (F, ymin),
      "image/object/bbox/ymax": (F, ymax),
      "image/object/class/text": (B, text),
      "image/object/class/label": (I, ids),
      "image/object/is_crowd": (I, crowd),
      "image/object/area": (F, area),
  }
  if voc:  # VOC-only attributes: present when the source has them, defaults for the others
    kept = [n for n, _ in valid]
    if any(n.obj.difficult is not None for n in kept):
      features["image/object/difficult"] = (I, [int(bool(n.obj.difficult)) for n in kept])
    if any(n.obj.truncated is not None for n in kept):
      features["image/object/truncated"] = (I, [int(bool(n.obj.truncated)) for n in kept])
    if any(n.obj.pose is not None for n in kept):
      features["image/object/view"] = (B, [(n.obj.pose or "Unspecified").encode("utf-8")
                                           for n in kept])
  if include_masks:
    features[MASK_FEATURE] = (B, [n.obj.mask for n, _ in valid])
  if points:
    features.update(keypoint_values(points, ann.keypoint_names))
  if renames:  # --feature-names: rare, through protobuf (the same bytes as the layout's)
    record = protos.serialize_slow({renames.get(k, k): v for k, v in features.items()})
  else:
    record = _LAYOUT.serialize(features)
  return Encoded(records=[record], labels=labels, clipped=clipped, errors=errors)


def keypoint_values(points, names) -> Dict[str, Tuple[str, list]]:
  """The KEYPOINT_SPEC features of the objects' (xs, ys, visibilities), `names` the K names
  (no `text` without them)."""
  values = {
      "image/object/keypoint/x": (F, [x for xs, _, _ in points for x in xs]),
      "image/object/keypoint/y": (F, [y for _, ys, _ in points for y in ys]),
      "image/object/keypoint/visibility": (I, [v for _, _, vs in points for v in vs]),
      "image/object/keypoint/num": (I, [sum(1 for v in vs if v) for _, _, vs in points]),
  }
  if names:
    values["image/object/keypoint/text"] = (B, [n.encode("utf-8") for n in names] * len(points))
  return values
