"""The TensorFlow TFRecord tutorial's record: exactly height, width, depth, label, image_raw.

The tutorial (tensorflow.org/tutorials/load_data/tfrecord) writes the file's bytes as
`image_raw` and reads every key with a fixed feature_description, so every key is a scalar.
`depth` is what tf.io.decode_image reports for the bytes written (ImageInfo.channels, tested
against TensorFlow). `label` is the label-map id of the image's class: an image is one class,
so an image whose objects name none or several classes is rejected (image-level error).
Classes numbered from sorted names start at 1 for box sources (ids shared with their label
maps) but at 0 for image-level sources (class folders, listings), as the classification schema,
Keras and the tutorial itself number them.
Pure: no Beam, no TensorFlow.
"""
from __future__ import annotations

from typing import Mapping, Optional

from beam_tfrecord.records.model import ImageAnnotation, InputError
from beam_tfrecord.schemas import base
from beam_tfrecord.records.model import PreparedImage

NAME = "tutorial"
FIRST_ID = 1
FIRST_ID_IMAGE_LEVEL = 0  # class folders, listings: 0..N-1 (classification, Keras)
IMAGE_LEVEL = True   # one class per image
FEATURE_SPEC: base.Spec = {
    "height": ("int64", "fixed"),
    "width": ("int64", "fixed"),
    "depth": ("int64", "fixed"),
    "label": ("int64", "fixed"),
    "image_raw": ("string", "fixed"),
}


def image_label(ann: ImageAnnotation) -> str:
  return base.one_class(ann, NAME)


def encode(ann: ImageAnnotation, image: PreparedImage, label_map: Mapping[str, int],
           bbox_policy: str = "clip", renames: Optional[Mapping[str, str]] = None
           ) -> base.Records:
  label = image_label(ann)
  if label not in label_map:
    raise InputError("validate", "unknown_class", f"class {label!r} is not in the label map")
  features = {
      "height": base.int64_feature([image.info.height]),
      "width": base.int64_feature([image.info.width]),
      "depth": base.int64_feature([image.info.channels]),
      "label": base.int64_feature([label_map[label]]),
      "image_raw": base.bytes_feature([image.encoded]),
  }
  return base.Records(records=[base.serialize(features, renames)], labels=[label], clipped=0,
                      errors=[])
