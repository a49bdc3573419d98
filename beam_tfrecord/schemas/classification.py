"""Image classification: one Example per image with one class, the keys Keras and
official/vision classification inputs read (`image/encoded`, `image/class/label`, ...).

Class ids are 0..N-1 in sorted name order, as Keras' image_dataset_from_directory and TFDS
number classes. The class is the image-level label (class folders, classification listings);
for a box source it is the one class its objects share. Pure: no Beam, no TensorFlow.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from beam_tfrecord.records.model import ImageAnnotation, InputError
from beam_tfrecord.schemas import base, od_api
from beam_tfrecord.schemas.base import Encoded
from beam_tfrecord.records.model import PreparedImage

NAME = "classification"
FIRST_ID = 0
IMAGE_LEVEL = True

FEATURE_SPEC: Dict[str, Tuple[str, str]] = {
    **{key: od_api.FEATURE_SPEC[key] for key in od_api.IMAGE_KEYS},
    "image/class/label": ("int64", "fixed"),
    "image/class/text": ("string", "fixed"),
}


def image_class(ann: ImageAnnotation) -> str:
  return base.one_class(ann, NAME)


def encode(ann: ImageAnnotation, image: PreparedImage, label_map: Mapping[str, int],
           bbox_policy: str = "clip", renames: Optional[Mapping[str, str]] = None) -> Encoded:
  """Raises InputError (the image is rejected) without exactly one class or without its id."""
  del bbox_policy  # boxes are not written
  name = image_class(ann)
  if name not in label_map:
    raise InputError("validate", "unknown_class", f"class {name!r} is not in the label map")
  features = {
      **od_api.image_features(ann, image),
      "image/class/label": od_api._ints([label_map[name]]),
      "image/class/text": od_api._bytes([name.encode("utf-8")]),
  }
  return Encoded(records=[base.serialize(features, renames)], labels=[name], clipped=0,
                 errors=[])
