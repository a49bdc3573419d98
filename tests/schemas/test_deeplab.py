"""schemas/deeplab.py and the class masks the shard writer makes for it (write/encode.py):
DeepLab's keys byte for byte as TensorFlow serializes them, polygons painted in source order
(compared with pycocotools), crowds as 255, a source's class PNG taken as it is and moved with
its image (EXIF orientation, --max-side with nearest-neighbour), and what is refused."""
from __future__ import annotations

import io
import json
from pathlib import Path

import bad_data as bd
import numpy as np
import pytest
from coco_masks import _rle
from PIL import Image
from voc_segmentation import class_png

from beam_tfrecord import schemas
from beam_tfrecord.records import masks
from beam_tfrecord.records.model import (Box, ImageAnnotation, ObjectAnnotation,
                                         PreparedImage)
from beam_tfrecord.schemas import deeplab
from beam_tfrecord.write import encode, images

# research/deeplab/datasets/build_data.py's image_seg_to_tfexample, written out here on purpose
BUILD_DATA_KEYS = ("image/encoded", "image/filename", "image/format", "image/height",
                   "image/width", "image/channels", "image/segmentation/class/encoded",
                   "image/segmentation/class/format")
W, H = 40, 30
LABELS = {"cat": 1, "dog": 2, "person": 15}


def _png(image: Image.Image) -> bytes:
  out = io.BytesIO()
  image.save(out, format="PNG")
  return out.getvalue()


def _features(serialized: bytes) -> dict:
  import tensorflow as tf
  example = tf.train.Example.FromString(serialized)
  return {k: getattr(f, f.WhichOneof("kind")).value[0]
          for k, f in example.features.feature.items()}


def _mask(serialized: bytes) -> np.ndarray:
  import tensorflow as tf
  png = _features(serialized)["image/segmentation/class/encoded"]
  return tf.io.decode_png(png, channels=1).numpy()[:, :, 0]


def test_the_schema_is_registered_with_build_data_keys():
  schema = schemas.get("deeplab")
  assert (schema.name, schema.first_id, schema.image_level) == ("deeplab", 1, False)
  assert tuple(schema.feature_spec) == BUILD_DATA_KEYS
  assert all(kind == "fixed" for _, kind in schema.feature_spec.values())
  assert schema.class_masks and schema.masks  # --include-masks applies: it keeps polygons
  assert schema.with_masks(True).feature_spec == schema.feature_spec
  assert not any(schemas.get(name).class_masks for name in schemas.REGISTRY if name != "deeplab")


def test_encode_is_build_data_s_example_byte_for_byte():
  """The Example build_data.image_seg_to_tfexample makes, built with TensorFlow, serialized
  deterministically: the same bytes."""
  import tensorflow as tf
  data = bd.jpeg((W, H))
  info = images.probe(data)
  image = PreparedImage(encoded=data, info=info, source=info)
  made = masks.class_mask(np.full((H, W), 2, np.uint8))
  ann = ImageAnnotation(key="sub/2007_000032.jpg", uri="/x", source_id="1", source="s")
  encoded = deeplab.encode(ann, image, LABELS, class_mask=made)

  def b(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

  def i(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

  expected = tf.train.Example(features=tf.train.Features(feature={
      "image/encoded": b(data), "image/filename": b(b"sub/2007_000032.jpg"),
      "image/format": b(b"jpeg"), "image/height": i(H), "image/width": i(W),
      "image/channels": i(3), "image/segmentation/class/encoded": b(made.png),
      "image/segmentation/class/format": b(b"png")}))
  assert encoded.serialized == expected.SerializeToString(deterministic=True)
  assert encoded.labels == ["dog"] and encoded.errors == [] and encoded.clipped == 0


def test_labels_are_the_classes_present_without_background_and_ignore():
  assert deeplab.class_names((0, 15, 1, 255), LABELS) == ["cat", "person"]
  with pytest.raises(ValueError):
    deeplab.encode(ImageAnnotation("k", "u", "s", "s"), None, LABELS)


# ---------------------------------------------------------------------------------------------
# The writer: encode.convert with --schema deeplab
# ---------------------------------------------------------------------------------------------

OPTIONS = encode.EncodeOptions(schema="deeplab", include_masks=True)


def _convert(tmp_path: Path, objects, data: bytes = None, options=OPTIONS, labels=LABELS):
  path = tmp_path / "image.jpg"
  path.write_bytes(data if data is not None else bd.jpeg((W, H)))
  ann = ImageAnnotation(key="image.jpg", uri=str(path), source_id="1", source="ann.json",
                        objects=tuple(objects))
  return encode.convert(ann, labels, options)


def _obj(label, segmentation, crowd=False, ann_id=None):
  return ObjectAnnotation(label=label, box=Box(0, 0, 1, 1), is_crowd=crowd, id=ann_id,
                          segmentation=masks.to_json(segmentation))


def test_polygons_are_painted_in_order_and_crowds_are_ignore(tmp_path):
  """Each object's pixels are pycocotools' annToMask (frPyObjects + decode), painted in source
  order with its id; the crowd region (uncompressed RLE, as COCO writes crowds) with 255."""
  from pycocotools import mask as coco_mask
  crowd = np.zeros((H, W), np.uint8)
  crowd[12:26, 20:38] = 1
  objects = [_obj("cat", [[2, 2, 30, 2, 30, 20, 2, 20]], ann_id=1),
             _obj("person", [[20, 10, 38, 10, 29, 28]], ann_id=2),
             _obj("dog", _rle(crowd, compressed=False), crowd=True, ann_id=3),
             _obj("dog", [[0, 25, 10, 25, 5, 29]], ann_id=4)]
  result = _convert(tmp_path, objects)
  assert result.errors == [] and sorted(result.labels) == ["cat", "dog", "person"]

  def ann_to_mask(segmentation):
    rles = coco_mask.frPyObjects(segmentation, H, W)
    return coco_mask.decode(coco_mask.merge(rles) if isinstance(rles, list) else rles)

  expected = np.zeros((H, W), np.uint8)
  for obj, value in zip(objects, (1, 15, 255, 2)):
    expected[ann_to_mask(json.loads(obj.segmentation)) == 1] = value
  assert len(np.unique(expected)) == 5  # every layer still shows somewhere
  np.testing.assert_array_equal(_mask(result.serialized), expected)


def test_objects_that_cannot_be_painted_are_object_errors(tmp_path):
  objects = [_obj("cat", [[2, 2, 30, 2, 30, 20]], ann_id=1),
             _obj("horse", [[2, 2, 9, 2, 9, 9]], ann_id=2),          # not in the label map
             _obj("big", [[2, 2, 9, 2, 9, 9]], ann_id=3),            # id 300
             ObjectAnnotation("dog", Box(0, 0, 1, 1), id=4),         # no segmentation
             _obj("dog", [[1, 2, 3, 4]], ann_id=5)]                  # too few points
  result = _convert(tmp_path, objects, labels={**LABELS, "big": 300})
  assert [(e.reason, e.level) for e in result.errors] == [
      ("unknown_class", "object"), ("class_id_too_large", "object"),
      ("missing_segmentation", "object"), ("bad_segmentation", "object")]
  assert result.labels == ["cat"]
  assert set(np.unique(_mask(result.serialized))) == {0, 1}
  plain = _convert(tmp_path, objects[3:4], options=encode.EncodeOptions(schema="deeplab"))
  assert "--include-masks" in plain.errors[0].message


def _carried(png: bytes):
  return ObjectAnnotation(label="", box=Box(0, 0, 1, 1, normalized=True),
                          segmentation=masks.class_png_json(png))


def test_a_class_png_is_taken_as_it_is(tmp_path):
  source = class_png((W, H), [(1, [(2, 2), (30, 4), (20, 25)]), (15, [(22, 8), (38, 28),
                                                                       (25, 28)])])
  result = _convert(tmp_path, [_carried(_png(source))])
  assert result.errors == [] and result.labels == ["cat", "person"]
  np.testing.assert_array_equal(_mask(result.serialized), np.asarray(source))


@pytest.mark.parametrize("size,values,reason", [
    ((W + 1, H), [1], "class_mask_size_mismatch"),
    ((W, H), [42], "unknown_class_index"),
])
def test_a_class_png_that_does_not_fit_rejects_its_image(tmp_path, size, values, reason):
  source = class_png(size, [(v, [(2, 2), (20, 2), (10, 20)]) for v in values])
  result = _convert(tmp_path, [_carried(_png(source))])
  assert result.records is None
  assert [(e.reason, e.level, e.stage) for e in result.errors] == [(reason, "image",
                                                                    "validate")]


def test_the_class_mask_turns_with_an_exif_rotated_image(tmp_path):
  """A class PNG in the stored frame (the pixels TensorFlow decodes) of an orientation-6 JPEG
  is turned upright with the image; one drawn on the displayed picture is taken as it is."""
  photo = bd.oriented_photo(6, displayed_size=(48, 32), box=(4, 4, 20, 12))
  stored = np.zeros(photo.stored_size[::-1], np.uint8)
  x0, y0, x1, y1 = photo.stored_box
  stored[y0:y1, x0:x1] = 15
  result = _convert(tmp_path, [_carried(_png(Image.fromarray(stored)))], data=photo.data)
  expected = np.zeros((32, 48), np.uint8)
  expected[4:12, 4:20] = 15
  np.testing.assert_array_equal(_mask(result.serialized), expected)
  shown = _convert(tmp_path, [_carried(_png(Image.fromarray(expected)))], data=photo.data)
  np.testing.assert_array_equal(_mask(shown.serialized), expected)


def test_max_side_resizes_the_class_mask_with_nearest_neighbour(tmp_path):
  source = class_png((W, H), [(1, [(2, 2), (30, 4), (20, 25)]), (15, [(22, 8), (38, 28),
                                                                       (25, 28)])])
  options = encode.EncodeOptions(schema="deeplab",
                                 preprocess=images.Preprocess(max_side=17))
  result = _convert(tmp_path, [_carried(_png(source))], options=options)
  mask = _mask(result.serialized)
  features = _features(result.serialized)
  assert mask.shape == (features["image/height"], features["image/width"]) == (13, 17)
  expected = np.asarray(source.resize((17, 13), Image.Resampling.NEAREST))
  np.testing.assert_array_equal(mask, expected)
  assert set(np.unique(mask)) <= {0, 1, 15, 255}  # never a blend of two labels
