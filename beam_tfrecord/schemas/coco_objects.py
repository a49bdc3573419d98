"""One record per object, as the widely copied "TFRecords the right way" COCO example writes
them: image, path, area, bbox ([x, y, w, h] in pixels), category_id, id, image_id.

Its readers parse `bbox` as VarLen float32 and `image` with tf.io.decode_jpeg, so the image is
always JPEG here (the pipeline re-encodes other formats; --image-format png is refused).
Values follow the written image: boxes clipped per --bbox-policy, and scaled (with `area`) by a
resize. `path` is the image path as the annotation gives it (relative to the image root);
`id` and `image_id` are COCO's, or for sources without numeric ids a stable 63-bit hash of the
image key (and object position). Crowd annotations are written like any other. The records of
one image follow each other in annotation order. Pure: no Beam, no TensorFlow.
"""
from __future__ import annotations

from typing import List, Mapping, Optional

from beam_tfrecord.records.model import ImageAnnotation, InputError
from beam_tfrecord.schemas import base
from beam_tfrecord.records.model import PreparedImage

NAME = "coco-objects"
FIRST_ID = 1
IMAGE_LEVEL = False
FEATURE_SPEC: base.Spec = {
    "image": ("string", "fixed"),
    "path": ("string", "fixed"),
    "area": ("float32", "fixed"),
    "bbox": ("float32", "var"),
    "category_id": ("int64", "fixed"),
    "id": ("int64", "fixed"),
    "image_id": ("int64", "fixed"),
}
IMAGE_FORMAT = "jpeg"  # what its readers decode (tf.io.decode_jpeg)


def planned_records(ann: ImageAnnotation) -> int:
  return len(ann.objects)


def image_id(ann: ImageAnnotation) -> int:
  return int(ann.source_id) if ann.source_id.isdigit() else base.stable_id(ann.key)


def encode(ann: ImageAnnotation, image: PreparedImage, label_map: Mapping[str, int],
           bbox_policy: str = "clip", renames: Optional[Mapping[str, str]] = None
           ) -> base.Records:
  if image.info.format != IMAGE_FORMAT:
    raise InputError("encode", "not_jpeg", f"the {NAME} schema writes JPEG, got "
                     f"{image.info.format} (a bug: the pipeline converts images for it)")
  width, height = image.info.width, image.info.height
  valid, errors = base.valid_objects(ann, width, height, label_map, bbox_policy)
  positions = {id(obj): i for i, obj in enumerate(ann.objects)}
  common = {"image": base.bytes_feature([image.encoded]),
            "path": base.bytes_feature([ann.key.encode("utf-8")]),
            "image_id": base.int64_feature([image_id(ann)])}
  records: List[bytes] = []
  for norm, label_id in valid:
    obj = norm.obj
    # the source's own pixels unless clipped (no round trip through normalized values)
    x0, y0, x1, y1 = ((obj.box.xmin, obj.box.ymin, obj.box.xmax, obj.box.ymax)
                      if not norm.clipped else
                      (norm.xmin * width, norm.ymin * height, norm.xmax * width,
                       norm.ymax * height))
    area = obj.area if obj.area is not None else (x1 - x0) * (y1 - y0)
    ann_id = obj.id if obj.id is not None else base.stable_id(
        f"{ann.key}#{positions[id(obj)]}")
    records.append(base.serialize({
        **common,
        "area": base.float_feature([area]),
        "bbox": base.float_feature([x0, y0, x1 - x0, y1 - y0]),
        "category_id": base.int64_feature([label_id]),
        "id": base.int64_feature([ann_id]),
    }, renames))
  return base.Records(records=records, labels=[n.obj.label for n, _ in valid],
                      clipped=sum(n.clipped for n, _ in valid), errors=errors)
