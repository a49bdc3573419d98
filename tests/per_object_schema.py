"""A one-record-per-object schema used by tests/schemas/test_schemas.py to show that the schema
registry, the sinks and the manifest take schemas that write several records per image (or
none)."""
from __future__ import annotations

from beam_tfrecord.records import protos
from beam_tfrecord.schemas import Encoded
from beam_tfrecord.schemas.od_api import _bytes, _ints

NAME = "test_per_object"
FIRST_ID = 1
IMAGE_LEVEL = False
FEATURE_SPEC = {"image/filename": ("string", "fixed"), "image/width": ("int64", "fixed"),
                "object/class/text": ("string", "fixed"), "object/class/label": ("int64", "fixed")}


def encode(ann, image, label_map, bbox_policy="clip"):
  records = []
  for obj in ann.objects:
    features = {"image/filename": _bytes([ann.key.encode()]),
                "image/width": _ints([image.info.width]),
                "object/class/text": _bytes([obj.label.encode()]),
                "object/class/label": _ints([label_map[obj.label]])}
    records.append(protos.Example(features=protos.Features(feature=features))
                   .SerializeToString(deterministic=True))
  return Encoded(records=records, labels=[o.label for o in ann.objects], clipped=0, errors=[])
