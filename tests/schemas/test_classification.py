"""schemas/classification.py: one Example per image with one class, as TensorFlow writes it."""
from __future__ import annotations

import hashlib
import io

import pytest
from PIL import Image

from beam_tfrecord.records.model import (Box, ImageAnnotation, InputError,
                                         ObjectAnnotation)
from beam_tfrecord.schemas import classification
from beam_tfrecord.write import images


def _png(size=(40, 30)) -> bytes:
  out = io.BytesIO()
  Image.new("RGB", size, (10, 20, 30)).save(out, format="PNG")
  return out.getvalue()


def test_classification_encoder_matches_tensorflow():
  import tensorflow as tf
  data = _png()
  ann = ImageAnnotation(key="train/cat/a.png", uri="/x", source_id="a", source="s",
                        labels=("cat",))
  encoded = classification.encode(ann, images.prepare(data), {"cat": 0, "dog": 1})
  expected = tf.train.Example(features=tf.train.Features(feature={
      "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
      "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"png"])),
      "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[30])),
      "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[40])),
      "image/channels": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
      "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[b"train/cat/a.png"])),
      "image/key/sha256": tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[hashlib.sha256(data).hexdigest().encode()])),
      "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[0])),
      "image/class/text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"cat"])),
  }))
  assert encoded.records == [expected.SerializeToString(deterministic=True)]
  assert encoded.serialized == encoded.records[0] and encoded.labels == ["cat"]
  # a box source: the one class its objects share; two classes or none cannot be one record
  box = Box(1, 1, 5, 5)
  boxed = ann.replace(labels=(), objects=(ObjectAnnotation("dog", box),) * 2)
  assert classification.encode(boxed, images.prepare(data), {"dog": 1}).labels == ["dog"]
  for bad, reason in ((ann.replace(labels=("cat", "dog")), "not_one_class"),
                      (ann.replace(labels=()), "not_one_class"),
                      (ann.replace(labels=("bird",)), "unknown_class")):
    with pytest.raises(InputError) as e:
      classification.encode(bad, images.prepare(data), {"cat": 0, "dog": 1})
    assert e.value.reason == reason
