"""TFDS image_folder's features (--layout tfds, class folders and classification listings):
image (the encoded bytes, decoded by TFDS to 3 channels), image/filename, label (a ClassLabel:
ids 0..N-1 in sorted name order, as tfds.folder_dataset.ImageFolder numbers its folders).
finalize/tfds_layout.py writes the matching features.json. Pure: no Beam, no TensorFlow.
"""
from __future__ import annotations

from typing import Mapping, Optional

from beam_tfrecord.records.model import ImageAnnotation, InputError
from beam_tfrecord.schemas import base
from beam_tfrecord.records.model import PreparedImage

NAME = "tfds_image_folder"
FIRST_ID = 0
IMAGE_LEVEL = True
FEATURE_SPEC: base.Spec = {
    "image": ("string", "fixed"),
    "image/filename": ("string", "fixed"),
    "label": ("int64", "fixed"),
}


def encode(ann: ImageAnnotation, image: PreparedImage, label_map: Mapping[str, int],
           bbox_policy: str = "clip", renames: Optional[Mapping[str, str]] = None
           ) -> base.Records:
  """Raises InputError (the image is rejected) without exactly one class or its id."""
  del bbox_policy  # boxes are not written
  name = base.one_class(ann, NAME)
  if name not in label_map:
    raise InputError("validate", "unknown_class", f"class {name!r} is not in the label map")
  features = {"image": base.bytes_feature([image.encoded]),
              "image/filename": base.bytes_feature([ann.key.encode("utf-8")]),
              "label": base.int64_feature([label_map[name]])}
  return base.Records(records=[base.serialize(features, renames)], labels=[name], clipped=0,
                      errors=[])
