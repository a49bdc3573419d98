"""schemas/tutorial.py and schemas/coco_objects.py: --schema tutorial | coco-objects and
--feature-names, each read back exactly the way its users' code reads it, compared with the
source annotations, and rerun byte for byte."""
from __future__ import annotations

import glob
import io
import json
import os
from pathlib import Path

import bad_data as bd
import numpy as np
import pytest
from PIL import Image

TUTORIAL_KEYS = {"height", "width", "depth", "label", "image_raw"}
COCO_OBJECT_KEYS = {"image", "path", "area", "bbox", "category_id", "id", "image_id"}


def _files(output, pattern="*.tfrecord"):
  return sorted(glob.glob(os.path.join(str(output), pattern)))


def _keys(serialized: bytes):
  import tensorflow as tf
  return set(tf.train.Example.FromString(serialized).features.feature)


# ---------------------------------------------------------------------------------------------
# tutorial
# ---------------------------------------------------------------------------------------------

def read_like_the_tutorial(files):
  """tensorflow.org/tutorials/load_data/tfrecord, "Reading the TFRecord file"."""
  import tensorflow as tf
  image_feature_description = {
      "height": tf.io.FixedLenFeature([], tf.int64),
      "width": tf.io.FixedLenFeature([], tf.int64),
      "depth": tf.io.FixedLenFeature([], tf.int64),
      "label": tf.io.FixedLenFeature([], tf.int64),
      "image_raw": tf.io.FixedLenFeature([], tf.string),
  }

  def _parse_image_function(example_proto):
    return tf.io.parse_single_example(example_proto, image_feature_description)

  return [{k: v.numpy() for k, v in ex.items()}
          for ex in tf.data.TFRecordDataset(files).map(_parse_image_function)]


@pytest.fixture(scope="module")
def classified(tmp_path_factory):
  """One class per image (what the tutorial's readers expect), in several pixel formats, plus
  one image whose objects name two classes."""
  root = str(tmp_path_factory.mktemp("tutorial"))
  coco = bd.Coco(os.path.join(root, "images"), [(1, "cat"), (4, "dog")])
  images = {
      "rgb.jpg": (bd.jpeg((64, 48)), 1),
      "gray.jpg": (bd.jpeg((50, 40), mode="L"), 4),
      "rgba.png": (bd.png((30, 20), mode="RGBA"), 4),
      "gray.png": (bd.png((33, 22), mode="L"), 1),
      "palette.gif": (bd.other_formats()["gif"][0], 1),
      "two_classes.jpg": (bd.jpeg((40, 40)), None),
  }
  for image_id, (name, (data, category)) in enumerate(sorted(images.items()), start=1):
    with Image.open(io.BytesIO(data)) as im:
      coco.image(image_id, name, data, width=im.width, height=im.height)
    for cat in ([category, category] if category else [1, 4]):
      coco.ann(image_id, cat, [1, 1, 5, 5])
  annotations = coco.write(os.path.join(root, "instances.json"))
  return root, images, annotations


def _convert_tutorial(classified, name, *extra):
  root, _, annotations = classified
  run = bd.convert(["--format=coco", f"--input={annotations}",
                    f"--images={os.path.join(root, 'images')}",
                    "--output", os.path.join(root, name), "--schema=tutorial", *extra])
  assert run.code == 0
  return run


@pytest.fixture(scope="module")
def tutorial_run(classified):
  """The plain --schema tutorial conversion, made once; the tests only read it."""
  return _convert_tutorial(classified, "out")


@pytest.mark.e2e
def test_tutorial_read_back_with_its_feature_description(classified, tutorial_run):
  import tensorflow as tf
  root, images, _ = classified
  run = tutorial_run
  files = _files(run.output)
  records = list(tf.data.TFRecordDataset(files).as_numpy_iterator())
  assert all(_keys(r) == TUTORIAL_KEYS for r in records)  # exactly the five keys
  parsed = read_like_the_tutorial(files)
  by_image = {}
  for ex in parsed:
    matches = [n for n, (d, _) in images.items() if d == ex["image_raw"]]
    by_image[matches[0] if matches else "palette.gif"] = ex
  assert sorted(by_image) == sorted(n for n, (_, c) in images.items() if c)
  for name, ex in by_image.items():
    data, category = images[name]
    decoded = tf.io.decode_image(ex["image_raw"]).numpy()
    assert ex["depth"] == decoded.shape[-1]
    with Image.open(io.BytesIO(data)) as im:
      assert (ex["width"], ex["height"]) == im.size == decoded.shape[1::-1]
    assert ex["label"] == category
  assert {ex["depth"] for ex in parsed} >= {1, 3, 4}
  assert [e["reason"] for e in run.errors] == ["not_one_class"]
  assert run.manifest["schema"] == "tutorial"
  assert set(run.manifest["features"]) == TUTORIAL_KEYS


@pytest.mark.e2e
def test_tutorial_with_tf1_names(classified, tutorial_run):
  """--feature-names depth=channels,image_raw=image: the TF1 writers' keys; the manifest (and
  so reader.load) has the final names."""
  import tensorflow as tf
  run = _convert_tutorial(classified, "tf1", "--feature-names=depth=channels,image_raw=image")
  files = _files(run.output)
  spec = {"width": tf.io.FixedLenFeature([], tf.int64),
          "height": tf.io.FixedLenFeature([], tf.int64),
          "channels": tf.io.FixedLenFeature([], tf.int64),
          "label": tf.io.FixedLenFeature([], tf.int64),
          "image": tf.io.FixedLenFeature([], tf.string)}
  tf1 = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(files)]
  plain = read_like_the_tutorial(_files(tutorial_run.output))
  assert len(tf1) == len(plain) == 5
  for new, old in zip(tf1, plain):
    assert new["image"].numpy() == old["image_raw"] and new["channels"] == old["depth"]
  assert set(run.manifest["features"]) == {"width", "height", "channels", "label", "image"}
  assert {k for k in run.examples[0] if "/" not in k} >= {"channels", "image"}


@pytest.mark.parametrize("names", ["nope=x", "depth=label", "depth", "depth=a,depth=b"])
def test_bad_feature_names_are_usage_errors(classified, tmp_path, capsys, names):
  root, _, annotations = classified
  run = bd.convert(["--format=coco", f"--input={annotations}", "--output", str(tmp_path / "o"),
                    "--schema=tutorial", f"--feature-names={names}"], capsys)
  assert run.code == 2 and "--feature-names" in run.stderr
  assert not (tmp_path / "o").exists()


@pytest.mark.e2e
def test_tutorial_is_deterministic(classified, tutorial_run):
  first = tutorial_run  # and a second conversion of the same input
  second = _convert_tutorial(classified, "again")
  names = [os.path.basename(f) for f in _files(first.output)]
  assert names == [os.path.basename(f) for f in _files(second.output)]
  for name in names:
    assert Path(first.output, name).read_bytes() == Path(second.output, name).read_bytes()


# ---------------------------------------------------------------------------------------------
# coco-objects
# ---------------------------------------------------------------------------------------------

def read_like_the_keras_example(files):
  """The "TFRecords the right way" (keras.io creating_tfrecords) parse_tfrecord_fn."""
  import tensorflow as tf

  def parse_tfrecord_fn(example):
    feature_description = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "path": tf.io.FixedLenFeature([], tf.string),
        "area": tf.io.FixedLenFeature([], tf.float32),
        "bbox": tf.io.VarLenFeature(tf.float32),
        "category_id": tf.io.FixedLenFeature([], tf.int64),
        "id": tf.io.FixedLenFeature([], tf.int64),
        "image_id": tf.io.FixedLenFeature([], tf.int64),
    }
    example = tf.io.parse_single_example(example, feature_description)
    example["image"] = tf.io.decode_jpeg(example["image"], channels=3)
    example["bbox"] = tf.sparse.to_dense(example["bbox"])
    return example

  return [{k: v.numpy() for k, v in ex.items()}
          for ex in tf.data.TFRecordDataset(files).map(parse_tfrecord_fn)]


@pytest.fixture(scope="module")
def coco_objects_run(dataset, tmp_path_factory):
  output = tmp_path_factory.mktemp("coco-objects") / "out"
  run = bd.convert(["--format=coco", *dataset.inputs("coco"), "--output", str(output),
                    "--schema=coco-objects"])
  assert run.code == 0 and not run.errors, run.errors
  return run


def _source_annotations(dataset, split):
  """(annotations, {image id: image}) of one split's COCO file (ids are per file)."""
  doc = json.loads(dataset.coco_file(split).read_text(encoding="utf-8"))
  return doc["annotations"], {im["id"]: im for im in doc["images"]}


def _split_files(run, split):
  from beam_tfrecord import reader
  return reader.shard_files(run.output, split)


@pytest.mark.e2e
def test_coco_objects_read_back_like_the_keras_example(coco_objects_run, dataset):
  import tensorflow as tf
  raw = list(tf.data.TFRecordDataset(_files(coco_objects_run.output)).as_numpy_iterator())
  assert all(_keys(r) == COCO_OBJECT_KEYS for r in raw)
  for split in dataset.splits:
    _check_split(dataset, split, read_like_the_keras_example(
        _split_files(coco_objects_run, split)))


def _check_split(dataset, split, parsed):
  import tensorflow as tf
  anns, images = _source_annotations(dataset, split)
  assert sorted(ex["id"] for ex in parsed) == sorted(a["id"] for a in anns)  # crowd included
  by_id = {a["id"]: a for a in anns}
  for ex in parsed:
    ann = by_id[ex["id"]]
    image = images[ann["image_id"]]
    assert ex["image_id"] == ann["image_id"] and ex["category_id"] == ann["category_id"]
    assert ex["path"].decode() == image["file_name"]
    np.testing.assert_allclose(ex["bbox"], ann["bbox"], rtol=1e-6, atol=1e-4)
    assert ex["area"] == pytest.approx(ann["area"], rel=1e-6)
    assert ex["image"].shape == (image["height"], image["width"], 3)
    source = (dataset.image_dir / image["file_name"]).read_bytes()
    if source.startswith(b"\xff\xd8"):  # JPEGs are copied: the same pixels
      np.testing.assert_array_equal(tf.io.decode_jpeg(source, channels=3).numpy(), ex["image"])


@pytest.mark.e2e
def test_coco_objects_keep_each_images_objects_together_in_order(coco_objects_run, dataset):
  for split in dataset.splits:
    anns, _ = _source_annotations(dataset, split)
    order = {a["id"]: i for i, a in enumerate(anns)}
    seen, last = [], None
    for ex in read_like_the_keras_example(_split_files(coco_objects_run, split)):
      if ex["image_id"] != last:
        assert ex["image_id"] not in seen, "an image's objects are split up"
        seen.append(ex["image_id"])
        previous = -1
      assert order[ex["id"]] > previous
      previous, last = order[ex["id"]], ex["image_id"]


@pytest.mark.e2e
def test_coco_objects_png_sources_are_written_as_jpeg(coco_objects_run, dataset):
  parsed = read_like_the_keras_example(_files(coco_objects_run.output))
  pngs = [im.file_name for im in dataset.images if im.format == "png" and im.boxes]
  assert pngs and {ex["path"].decode() for ex in parsed} >= set(pngs)


@pytest.mark.e2e
def test_coco_objects_one_file_named_by_count(dataset, tmp_path):
  """The seed example's layout: 4096 records per file, file_{NN}-{count}.tfrec."""
  train = dataset.coco_file("train")
  objects = len(json.loads(train.read_text(encoding="utf-8"))["annotations"])
  args = ["--format=coco", f"--input={train}", f"--images={dataset.image_dir}",
          "--schema=coco-objects", "--records-per-shard=4096",
          "--shard-name-template=file_{index:02d}-{count}.tfrec"]
  run = bd.convert([*args, "--output", str(tmp_path / "a")])
  assert run.code == 0
  assert [os.path.basename(f) for f in _files(run.output, "*.tfrec")] == \
      [f"file_00-{objects}.tfrec"]
  assert len(read_like_the_keras_example(_files(run.output, "*.tfrec"))) == objects
  again = bd.convert([*args, "--output", str(tmp_path / "b")])  # determinism
  assert again.code == 0
  assert (tmp_path / "a" / f"file_00-{objects}.tfrec").read_bytes() == \
      (tmp_path / "b" / f"file_00-{objects}.tfrec").read_bytes()
  small = bd.convert([*args[:-2], "--records-per-shard=7",
                      "--shard-name-template=file_{index:02d}-{count}.tfrec",
                      "--output", str(tmp_path / "c")])
  counts = [int(os.path.basename(f)[8:-6]) for f in _files(small.output, "*.tfrec")]
  assert sum(counts) == objects and max(counts) <= 7 + 3  # images are never split


@pytest.mark.e2e
def test_coco_objects_scaled_by_resize(dataset, tmp_path):
  run = bd.convert(["--format=coco", *dataset.inputs("coco"), "--output", str(tmp_path / "o"),
                    "--schema=coco-objects", "--max-side=64"])
  for split in dataset.splits:
    _check_scaled(dataset, split, read_like_the_keras_example(_split_files(run, split)))


def _check_scaled(dataset, split, parsed):
  anns, images = _source_annotations(dataset, split)
  by_id = {a["id"]: a for a in anns}
  for ex in parsed:
    ann, image = by_id[ex["id"]], images[by_id[ex["id"]]["image_id"]]
    h, w = ex["image"].shape[:2]
    assert max(h, w) <= 64
    sx, sy = w / image["width"], h / image["height"]
    x, y, bw, bh = ann["bbox"]
    np.testing.assert_allclose(ex["bbox"], [x * sx, y * sy, bw * sx, bh * sy], atol=1e-3)
    assert ex["area"] == pytest.approx(ann["area"] * sx * sy, rel=1e-5)


def test_coco_objects_refuses_png(dataset, tmp_path, capsys):
  run = bd.convert(["--format=coco", *dataset.inputs("coco"), "--output", str(tmp_path / "o"),
                    "--schema=coco-objects", "--image-format=png"], capsys)
  assert run.code == 2 and "--image-format png" in run.stderr


@pytest.mark.e2e
def test_coco_objects_include_crowd_annotations(tmp_path):
  """COCO's crowd regions (iscrowd 1, RLE segmentation) are records like any other."""
  from coco_masks import make_coco
  annotations = make_coco(tmp_path / "data")
  run = bd.convert(["--format=coco", f"--input={annotations}",
                    f"--images={annotations.parent / 'images'}", "--output", str(tmp_path / "o"),
                    "--schema=coco-objects"])
  doc = json.loads(annotations.read_text())
  parsed = read_like_the_keras_example(_files(run.output))
  crowd = [a for a in doc["annotations"] if a["iscrowd"]]
  assert crowd and len(parsed) == len(doc["annotations"])
  by_id = {ex["id"]: ex for ex in parsed}
  for ann in doc["annotations"]:
    np.testing.assert_allclose(by_id[ann["id"]]["bbox"], ann["bbox"], rtol=1e-6)
    assert by_id[ann["id"]]["category_id"] == ann["category_id"]


def test_coco_objects_ids_for_sources_without_them():
  """CSV/VOC objects have no ids: stable hashes of the image key (and position)."""
  import tensorflow as tf

  from beam_tfrecord.records.model import (Box, ImageAnnotation,
                                           ObjectAnnotation)
  from beam_tfrecord.schemas import coco_objects
  from beam_tfrecord.write import images
  ann = ImageAnnotation(key="dir/a.jpg", uri="", source_id="a.jpg", source="x.csv", objects=(
      ObjectAnnotation("cat", Box(1, 2, 11, 22)), ObjectAnnotation("cat", Box(-5, 0, 10, 10))))
  prepared = images.prepare(bd.jpeg((64, 48)))
  first = coco_objects.encode(ann, prepared, {"cat": 3})
  assert first.records == coco_objects.encode(ann, prepared, {"cat": 3}).records
  examples = [tf.train.Example.FromString(r).features.feature for r in first.records]
  ids = [e["id"].int64_list.value[0] for e in examples]
  assert len(set(ids)) == 2 and all(0 <= i < 2 ** 63 for i in ids)
  assert {e["image_id"].int64_list.value[0] for e in examples} == {coco_objects.image_id(ann)}
  assert list(examples[1]["bbox"].float_list.value) == [0, 0, 10, 10]  # clipped
  assert first.clipped == 1


@pytest.mark.parametrize("option", ["od-api", "classification", "tutorial", "coco-objects"])
def test_every_registered_schema_takes_feature_names(option):
  """--feature-names goes through the registry (schemas.Schema) to every schema's encode, and
  the feature spec the manifest records has the same final names as the records."""
  from beam_tfrecord import schemas
  from beam_tfrecord.records.model import (Box, ImageAnnotation,
                                           ObjectAnnotation)
  from beam_tfrecord.write import images
  from beam_tfrecord.write.encode import EncodeOptions
  ann = ImageAnnotation(key="a.jpg", uri="", source_id="7", source="x", objects=(
      ObjectAnnotation("cat", Box(1, 2, 11, 22)),))
  prepared = images.prepare(bd.jpeg((64, 48)))
  spec = schemas.get(option).feature_spec
  old = sorted(spec)[0]
  options = EncodeOptions(schema=option, renames=((old, "renamed"),))
  schema = schemas.from_options(options)
  assert "renamed" in schema.feature_spec and old not in schema.feature_spec
  encoded = schema.encode(ann, prepared, {"cat": 1}, options)
  assert encoded.records and all("renamed" in _keys(r) and old not in _keys(r)
                                 for r in encoded.records)
  assert all(_keys(r) <= set(schema.feature_spec) for r in encoded.records)


@pytest.mark.e2e
def test_verify_and_summary_for_per_object_and_tutorial_outputs(coco_objects_run, tutorial_run,
                                                                 dataset):
  """`verify` reads each schema through the manifest's features; the summary counts records
  (not images) when a schema writes one record per object."""
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.readback import verify
  for run in (coco_objects_run, tutorial_run):
    total, problems, _ = verify.check(run.output)
    assert problems == [] and total == run.manifest["totals"]["examples"]
  totals = coco_objects_run.manifest["totals"]
  assert totals["images"] == len(dataset.images) != totals["examples"]
  text = outputs.summary(coco_objects_run.manifest, coco_objects_run.output)
  assert f"records {totals['examples']} (of {totals['images']} images)" in text
