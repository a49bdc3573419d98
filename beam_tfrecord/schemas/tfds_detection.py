"""TFDS coco/2017's features (--layout tfds, box sources): what `tfds.load("coco/2017")`
readers (the keras-io RetinaNet example, KerasHub, pix2seq) parse, written without TFDS.

Keys as TFDS serializes its FeaturesDict (flattened with '/'; a Sequence's fields become lists,
bool as int64, a BBoxFeature four floats per object): image (the encoded bytes, JPEG or PNG,
decoded by TFDS to 3 channels), image/filename, image/id (COCO's image id, else a stable
63-bit hash of the image key), objects/area (int64 pixels, COCO's area when given),
objects/bbox ([ymin, xmin, ymax, xmax] normalized), objects/id (COCO's annotation id, else the
object's position in the image), objects/is_crowd, objects/label (ids 0..N-1: a ClassLabel).
With --include-masks, objects/segmentation: one 1-channel PNG per object, 255 inside, as TFDS's
lvis writes instance masks. With keypoints, objects/keypoints and objects/keypoint_visibility
(KEYPOINT_SPEC). finalize/tfds_layout.py writes the matching features.json.
Pure: no Beam, no TensorFlow, no TFDS.
"""
from __future__ import annotations

import io
from typing import Mapping, Optional

from beam_tfrecord.records import keypoints
from beam_tfrecord.records.model import ImageAnnotation
from beam_tfrecord.schemas import base
from beam_tfrecord.schemas.coco_objects import image_id
from beam_tfrecord.records.model import PreparedImage

NAME = "tfds_detection"
FIRST_ID = 0      # a ClassLabel counts from 0
IMAGE_LEVEL = False
FEATURE_SPEC: base.Spec = {
    "image": ("string", "fixed"),
    "image/filename": ("string", "fixed"),
    "image/id": ("int64", "fixed"),
    "objects/area": ("int64", "var"),
    "objects/bbox": ("float32", "var"),
    "objects/id": ("int64", "var"),
    "objects/is_crowd": ("int64", "var"),
    "objects/label": ("int64", "var"),
}
MASK_FEATURE = "objects/segmentation"
# A source with keypoints: per object a Tensor (K, 2) of [y, x] normalized (BBoxFeature's
# and the research decoder's order) and a Tensor (K,) of COCO visibilities 0/1/2;
# finalize/tfds_layout.features declares them with the dataset's K.
KEYPOINT_SPEC: base.Spec = {
    "objects/keypoints": ("float32", "var"),
    "objects/keypoint_visibility": ("int64", "var"),
}


def feature_spec(include_masks: bool = False) -> base.Spec:
  return {**FEATURE_SPEC, MASK_FEATURE: ("string", "var")} if include_masks else dict(FEATURE_SPEC)


def mask_255(png: bytes) -> bytes:
  """The writer's 0/1 mask PNG as TFDS's 0/255 one (lvis: cv2.fillPoly(mask, poly, 255))."""
  from PIL import Image
  with Image.open(io.BytesIO(png)) as im:
    out = io.BytesIO()
    im.point(lambda v: 255 if v else 0).save(out, format="PNG")
  return out.getvalue()


def encode(ann: ImageAnnotation, image: PreparedImage, label_map: Mapping[str, int],
           bbox_policy: str = "clip", include_masks: bool = False,
           renames: Optional[Mapping[str, str]] = None) -> base.Records:
  width, height = image.info.width, image.info.height
  valid, errors = base.valid_objects(ann, width, height, label_map, bbox_policy)
  valid, points, point_errors = keypoints.written(valid, width, height, ann.source, ann.key)
  errors += point_errors
  positions = {id(obj): i for i, obj in enumerate(ann.objects)}
  kept = [norm for norm, _ in valid]
  features = {
      "image": base.bytes_feature([image.encoded]),
      "image/filename": base.bytes_feature([ann.key.encode("utf-8")]),
      "image/id": base.int64_feature([image_id(ann)]),
      "objects/area": base.int64_feature([
          round(n.obj.area if n.obj.area is not None else
                (n.xmax - n.xmin) * width * (n.ymax - n.ymin) * height) for n in kept]),
      "objects/bbox": base.float_feature([v for n in kept
                                          for v in (n.ymin, n.xmin, n.ymax, n.xmax)]),
      "objects/id": base.int64_feature([n.obj.id if n.obj.id is not None
                                        else positions[id(n.obj)] for n in kept]),
      "objects/is_crowd": base.int64_feature([int(n.obj.is_crowd) for n in kept]),
      "objects/label": base.int64_feature([label_id for _, label_id in valid]),
  }
  if include_masks:
    features[MASK_FEATURE] = base.bytes_feature([mask_255(n.obj.mask) for n in kept])
  if points:
    features["objects/keypoints"] = base.float_feature(
        [v for xs, ys, _ in points for y, x in zip(ys, xs) for v in (y, x)])
    features["objects/keypoint_visibility"] = base.int64_feature(
        [v for _, _, vs in points for v in vs])
  return base.Records(records=[base.serialize(features, renames)],
                      labels=[n.obj.label for n in kept],
                      clipped=sum(n.clipped for n in kept), errors=errors)
