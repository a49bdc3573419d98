"""Semantic segmentation in DeepLab's shape: the eight keys research/deeplab/datasets/
build_data.py (`image_seg_to_tfexample`) writes, which its data_generator.py parses.

`image/segmentation/class/encoded` is one single-channel PNG the size of the written image:
0 background, a class's label-map id where the class is, 255 ignore (records/masks.py). The
shard writer makes it (write/encode.py: a source's class PNG taken as it is, or the objects'
segmentations painted in order) and passes it here as `class_mask`; this module only lays out
the Example. Pure: no Beam, no TensorFlow.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from beam_tfrecord.records.model import ImageAnnotation, PreparedImage
from beam_tfrecord.schemas import base
from beam_tfrecord.schemas.base import Encoded

NAME = "deeplab"
FIRST_ID = 1      # 0 is background in the class mask
IMAGE_LEVEL = False

CLASS_MASK_FEATURE = "image/segmentation/class/encoded"
# build_data.py's keys, in its order
FEATURE_SPEC: Dict[str, Tuple[str, str]] = {
    "image/encoded": ("string", "fixed"),
    "image/filename": ("string", "fixed"),
    "image/format": ("string", "fixed"),
    "image/height": ("int64", "fixed"),
    "image/width": ("int64", "fixed"),
    "image/channels": ("int64", "fixed"),
    CLASS_MASK_FEATURE: ("string", "fixed"),
    "image/segmentation/class/format": ("string", "fixed"),
}
IGNORE = 255  # records/masks.IGNORE (not imported: it brings numpy to every schema lookup)
# build_data.py writes 3 whatever the image: DeepLab decodes every image with channels=3
CHANNELS = 3


def feature_spec(include_masks: bool = False) -> Dict[str, Tuple[str, str]]:
  """The keys written, with or without --include-masks (the class mask is always there)."""
  return dict(FEATURE_SPEC)


def class_names(values, label_map: Mapping[str, int]):
  """The class names of the ids a mask holds (background and ignore aside), in id order: one
  per class present, what the manifest counts for this schema."""
  by_id: Dict[int, str] = {}
  for name, label_id in sorted(label_map.items()):
    by_id.setdefault(int(label_id), name)
  return [by_id[v] for v in sorted(values) if v in by_id and v != IGNORE]


def encode(ann: ImageAnnotation, image: PreparedImage, label_map: Mapping[str, int],
           bbox_policy: str = "clip", class_mask=None, include_masks: bool = False,
           renames: Optional[Mapping[str, str]] = None) -> Encoded:
  """The Example of one image and its class mask (masks.ClassMask, made by the writer).
  Boxes are not written; `labels` are the classes present in the mask."""
  if class_mask is None:
    raise ValueError("the deeplab schema needs the image's class mask (write/encode.py)")
  features = {
      "image/encoded": base.bytes_feature([image.encoded]),
      "image/filename": base.bytes_feature([ann.key.encode("utf-8")]),
      "image/format": base.bytes_feature([image.info.format.encode()]),
      "image/height": base.int64_feature([image.info.height]),
      "image/width": base.int64_feature([image.info.width]),
      "image/channels": base.int64_feature([CHANNELS]),
      CLASS_MASK_FEATURE: base.bytes_feature([class_mask.png]),
      "image/segmentation/class/format": base.bytes_feature([b"png"]),
  }
  return Encoded(records=[base.serialize(features, renames)],
                 labels=class_names(class_mask.values, label_map), clipped=0, errors=[])
