"""schemas/od_api.py: byte-identical to TensorFlow's own tf.train.Example, the default area and
rejected objects, and bytes that do not depend on the hash seed."""
from __future__ import annotations

import hashlib

import pytest
from conftest import encoded_image as _encode
from conftest import run_python

from beam_tfrecord.records.model import (Box, ImageAnnotation, InputError,
                                         ObjectAnnotation)
from beam_tfrecord.schemas import od_api
from beam_tfrecord.write import images


def _annotation(objects, key="dir/grå.png", source_id="12345"):
  return ImageAnnotation(key=key, uri="/x/" + key, source_id=source_id, source="ann.json",
                         objects=tuple(objects))


OBJECTS = [
    ObjectAnnotation("cat", Box(4, 2, 20, 16), is_crowd=True, area=100.5),
    ObjectAnnotation("chat noir é", Box(0, 0, 40, 30), area=1200.0),
    ObjectAnnotation("dog", Box(10.5, 3.25, 11.5, 4.75), area=1.5),
]
VOC_OBJECTS = [
    ObjectAnnotation("cat", Box(4, 2, 20, 16), area=10.0, difficult=True, truncated=False,
                     pose="Left"),
    ObjectAnnotation("dog", Box(1, 1, 2, 2), area=1.0),  # attributes absent -> defaults
]
IDS = {"cat": 17, "chat noir é": 3, "dog": 18}


def _tf_example(tf, ann, data, width, height, channels, fmt, objects):
  """The same Example built with TensorFlow's classes from the input values."""
  def b(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

  def f(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))

  def i(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  feature = {
      "image/encoded": b([data]),
      "image/format": b([fmt.encode()]),
      "image/height": i([height]),
      "image/width": i([width]),
      "image/channels": i([channels]),
      "image/filename": b([ann.key.encode("utf-8")]),
      "image/source_id": b([ann.source_id.encode("utf-8")]),
      "image/key/sha256": b([hashlib.sha256(data).hexdigest().encode()]),
      "image/object/bbox/xmin": f([o.box.xmin / width for o in objects]),
      "image/object/bbox/xmax": f([o.box.xmax / width for o in objects]),
      "image/object/bbox/ymin": f([o.box.ymin / height for o in objects]),
      "image/object/bbox/ymax": f([o.box.ymax / height for o in objects]),
      "image/object/class/text": b([o.label.encode("utf-8") for o in objects]),
      "image/object/class/label": i([IDS[o.label] for o in objects]),
      "image/object/is_crowd": i([int(o.is_crowd) for o in objects]),
      "image/object/area": f([o.area for o in objects]),
  }
  if any(o.difficult is not None for o in objects):
    feature["image/object/difficult"] = i([int(bool(o.difficult)) for o in objects])
    feature["image/object/truncated"] = i([int(bool(o.truncated)) for o in objects])
    feature["image/object/view"] = b([(o.pose or "Unspecified").encode() for o in objects])
  return tf.train.Example(features=tf.train.Features(feature=feature))


@pytest.mark.parametrize("objects,fmt", [(OBJECTS, "PNG"), (VOC_OBJECTS, "JPEG"), ([], "PNG")],
                         ids=["coco-like", "voc-like", "no-objects"])
def test_od_api_example_is_byte_identical_to_tensorflow(objects, fmt):
  tf = pytest.importorskip("tensorflow")
  data = _encode(fmt, size=(40, 30))
  ann = _annotation(objects)
  encoded = od_api.encode(ann, images.prepare(data), IDS)
  assert encoded.errors == [] and encoded.labels == [o.label for o in objects]
  expected = _tf_example(tf, ann, data, 40, 30, 3, fmt.lower(), objects)
  assert encoded.serialized == expected.SerializeToString(deterministic=True)
  assert tf.train.Example.FromString(encoded.serialized) == expected


def test_od_api_default_area_and_rejected_objects():
  tf = pytest.importorskip("tensorflow")
  data = _encode("JPEG", size=(100, 80))
  objects = [ObjectAnnotation("cat", Box(10, 20, 30.5, 60)),              # area computed
             ObjectAnnotation("cat", Box(90, 70, 130, 100)),              # clipped
             ObjectAnnotation("unknown", Box(1, 1, 2, 2)),                # not in the label map
             ObjectAnnotation("dog", Box(5, 5, 5, 9))]                    # empty box
  encoded = od_api.encode(_annotation(objects), images.prepare(data), IDS)
  assert encoded.labels == ["cat", "cat"] and encoded.clipped == 1
  assert sorted(e.reason for e in encoded.errors) == ["bbox_empty", "unknown_class"]
  ex = tf.train.Example.FromString(encoded.serialized).features.feature
  assert list(ex["image/object/area"].float_list.value) == pytest.approx(
      [20.5 * 40, 10 * 10], rel=1e-6)
  assert list(ex["image/object/bbox/xmax"].float_list.value) == pytest.approx([0.305, 1.0])
  with pytest.raises(InputError):
    od_api.encode(_annotation(objects[1:2]), images.prepare(data), IDS, bbox_policy="error")


def test_od_api_bytes_do_not_depend_on_the_hash_seed():
  """Features is a protobuf map: its order must not follow PYTHONHASHSEED (DESIGN.md)."""
  code = """
import hashlib, io, sys
from PIL import Image
from beam_tfrecord.write import images
from beam_tfrecord.records.model import Box, ImageAnnotation, ObjectAnnotation
from beam_tfrecord.schemas import od_api
out = io.BytesIO(); Image.new("RGB", (40, 30), (1, 2, 3)).save(out, format="PNG")
ann = ImageAnnotation(key="a.png", uri="a.png", source_id="1", source="s", objects=(
    ObjectAnnotation("cat", Box(1, 2, 3, 4), difficult=True, pose="Left"),
    ObjectAnnotation("dog", Box(5, 6, 7, 8))))
enc = od_api.encode(ann, images.prepare(out.getvalue()), {"cat": 1, "dog": 2})
print(hashlib.sha256(enc.serialized).hexdigest())
"""
  digests = set()
  for seed in ("0", "1", "987654"):
    result = run_python(["-c", code], PYTHONHASHSEED=seed)
    assert result.returncode == 0, result.stderr
    digests.add(result.stdout.strip())
  assert len(digests) == 1
