"""The schema registry: the classification encoder, labels.txt, a per-object schema through
the whole pipeline (several records per image, none for an image without objects), and the
fingerprint of the new sources."""
from __future__ import annotations

import hashlib
import io

import layouts
import pytest
from PIL import Image

from beam_tfrecord import schemas
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.finalize import fingerprint
from beam_tfrecord.prepare import label_map
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


def test_registry_and_label_files():
  assert schemas.get("od-api").name == "od_api" and schemas.get("od-api").first_id == 1
  assert schemas.get("classification").first_id == 0
  assert schemas.get("classification").image_level
  with pytest.raises(ValueError, match="--schema must be one of od-api, classification, "
                     "tutorial, coco-objects"):
    schemas.get("nope")
  assert schemas.get("tutorial").name == "tutorial" and schemas.get("tutorial").image_level
  objects = schemas.get("coco-objects")
  assert objects.name == "coco-objects" and objects.image_format == "jpeg" and not objects.masks
  assert schemas.get("od-api").masks
  assert "image/object/mask" in schemas.get("od-api").with_masks(True).feature_spec
  renamed = schemas.Schema("tutorial", renames=(("depth", "channels"),))
  assert list(renamed.feature_spec) == ["height", "width", "channels", "label", "image_raw"]
  assert schemas.first_id_of("coco-objects") == 1 and schemas.first_id_of("classification") == 0
  assert label_map.from_names(["b", "a", "b"], first_id=0) == {"a": 0, "b": 1}
  assert label_map.to_lines({"a": 0, "b": 1, "d": 3}) == "a\nb\n\nd\n"
  text = label_map.to_text({"a": 0, "b": 1})
  assert label_map.parse(text, min_id=0) == {"a": 0, "b": 1}
  with pytest.raises(ValueError, match="must be >= 1"):
    label_map.parse(text)


def test_per_object_schema_through_the_pipeline(small_dataset, tmp_path, monkeypatch):
  """A schema writing one record per object (as issue 10's coco-objects will): the sinks
  write them all, the manifest counts records, and images without objects (no records) are
  neither lost nor rejected."""
  from apache_beam.testing.test_pipeline import TestPipeline

  from beam_tfrecord import reader
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.pipeline import build
  from beam_tfrecord.readback import verify
  monkeypatch.setitem(schemas.REGISTRY, "per-object", "per_object_schema")
  ds = small_dataset
  out = tmp_path / "out"
  config = ConvertConfig(format="coco", inputs=ds.file_inputs("coco"),
                         images=[str(ds.image_dir)], output=str(out), schema="per-object")
  with TestPipeline(runner="FnApiRunner", argv=[]) as p:
    build(p, config, ["convert"])
  manifest = outputs.read_manifest(str(out))
  assert manifest["status"] == "ok" and manifest["schema"] == "test_per_object"
  assert set(manifest["features"]) == {"image/filename", "image/width", "object/class/text",
                                       "object/class/label"}
  for split in ds.splits:
    got = [(r["image/filename"].numpy().decode(), r["object/class/text"].numpy().decode())
           for r in reader.load(str(out), split)]
    want = [(im.file_name, b[0]) for im in sorted(ds.images, key=lambda im: im.file_name)
            if im.split == split for b in im.boxes]
    assert got == want and manifest["splits"][split]["examples"] == len(want)
  assert any(not im.boxes for im in ds.images)
  assert verify.run(str(out)) == 0


def test_fingerprint_covers_new_sources(small_dataset, tmp_path):
  ds = small_dataset
  yaml_path = layouts.write_ultralytics(ds.images, ds.image_dir, tmp_path / "y")
  root = tmp_path / "y" / "shapes"
  patterns = fingerprint.source_patterns(ConvertConfig(format="yolo", inputs=[str(yaml_path)],
                                                       output="/o"))
  assert ("file", str(yaml_path)) in patterns and ("tree", f"{root}/**") in patterns
  assert ("tree", f"{root}/labels/train/**") in patterns
  folders = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "f")
  assert fingerprint.source_patterns(ConvertConfig(format="folders", inputs=[str(folders)],
                                                   output="/o")) == [("tree", f"{folders}/**")]
  raccoon = layouts.write_raccoon(ds.images, ds.image_dir, tmp_path / "r")
  assert fingerprint.source_patterns(ConvertConfig(
      format="voc", inputs=[str(raccoon / "annotations")], images=[str(raccoon / "images")],
      output="/o")) == [("tree", f"{raccoon}/annotations/**"), ("tree", f"{raccoon}/images/**")]
