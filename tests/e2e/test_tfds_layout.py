"""--layout tfds: every box source and class folders converted, then loaded by TensorFlow
Datasets itself (tfds.builder_from_directory, tfds.builder / tfds.load with data_dir) and
compared example by example with the annotations; the keras-io RetinaNet example's
preprocessing runs on it; files are deterministic; a gs:// run (storage emulator) too."""
from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Dict, List

import layouts
import numpy as np
import pytest
from bad_data import convert

tfds = pytest.importorskip("tensorflow_datasets")
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

from beam_tfrecord.finalize import tfds_layout  # noqa: E402

pytestmark = pytest.mark.e2e


def _load(directory: Path, split: str) -> List[Dict]:
  builder = tfds.builder_from_directory(str(directory))
  return list(tfds.as_numpy(builder.as_dataset(split=split)))


def _manifest(directory: Path) -> Dict:
  return json.loads((directory / "manifest.json").read_text())


def _decoded(path: Path) -> np.ndarray:
  with Image.open(path) as im:
    return np.asarray(im.convert("RGB"))


def _check_boxes(out: Path, name: str, images, image_dir: Path, split_of=None) -> None:
  """Every image once, in its split: pixels as TFDS decodes them (3 channels), file name,
  boxes as [ymin, xmin, ymax, xmax] and labels through the ClassLabel's names."""
  split_of = split_of or (lambda im: im.split)
  directory = out / name / "1.0.0"
  builder = tfds.builder_from_directory(str(directory))
  names = builder.info.features["objects"]["label"].names
  assert names == sorted(names, key=names.index) and len(set(names)) == len(names)
  expected_splits = collections.Counter(split_of(im) for im in images)
  assert {s: builder.info.splits[s].num_examples for s in builder.info.splits} == \
      dict(expected_splits)
  by_name = {im.file_name: im for im in images}
  seen = set()
  for split in expected_splits:
    for ex in _load(directory, split):
      base = os.path.basename(ex["image/filename"].decode())
      im = by_name[base]
      assert split_of(im) == split and base not in seen, base
      seen.add(base)
      assert ex["image"].shape == (im.height, im.width, 3)
      assert np.array_equal(ex["image"], _decoded(image_dir / im.file_name)) or \
          im.format == "jpeg"  # a JPEG's decoders may differ by a unit; shape checked
      want = layouts.expected_boxes(im)
      got = ex["objects"]
      assert len(got["label"]) == len(want), base
      for (label, x0, y0, x1, y1), box, label_id in zip(want, got["bbox"], got["label"]):
        assert names[label_id] == label, base
        assert np.allclose(box, [y0, x0, y1, x1], atol=1e-5), (base, box)
      assert got["is_crowd"].dtype == bool and got["area"].dtype == np.int64
  assert seen == set(by_name)


@pytest.mark.parametrize("fmt", ["coco", "voc", "csv"])
def test_file_sources_load_with_tfds(dataset, tmp_path, capsys, fmt):
  """Each file format as a TFDS dataset TFDS loads; the CSV run's card: its TFDS snippet runs
  as written."""
  out = tmp_path / "out"
  run = convert([f"--format={fmt}", *dataset.inputs(fmt), "--output", str(out),
                 "--layout", "tfds", "--dataset-name", "shapes"], capsys)
  assert run.code == 0, run.stderr
  _check_boxes(out, "shapes", dataset.images, dataset.image_dir)
  info = json.loads((out / "shapes" / "1.0.0" / "dataset_info.json").read_text())
  assert info["name"] == "shapes" and info["version"] == "1.0.0"
  if fmt == "coco":  # COCO's category ids renumbered 0..N-1 in id order, as TFDS does
    ids = dataset.coco_category_ids()
    builder = tfds.builder("shapes", data_dir=str(out))
    assert builder.info.features["objects"]["label"].names == sorted(ids, key=ids.get)
  if fmt == "csv":  # the card's TFDS snippet, executed as written, prints the class names
    card = (out / "shapes" / "1.0.0" / "README.md").read_text()
    start = card.index("With TensorFlow Datasets")
    code = card[card.index("```python\n", start) + 10:card.index("```\n", start + 60)]
    capsys.readouterr()
    exec(compile(code, "card", "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == repr(dataset.class_names())


def test_yolo_loads_with_tfds(dataset, tmp_path, capsys):
  yaml_path = layouts.write_ultralytics(dataset.images, dataset.image_dir, tmp_path / "src")
  out = tmp_path / "out"
  run = convert(["--input", str(yaml_path), "--output", str(out), "--layout", "tfds",
                 "--dataset-name", "shapes_yolo"], capsys)
  assert run.code == 0, run.stderr
  _check_boxes(out, "shapes_yolo", dataset.images, dataset.image_dir)
  builder = tfds.builder_from_directory(str(out / "shapes_yolo" / "1.0.0"))
  assert builder.info.features["objects"]["label"].names == list(layouts.YOLO_NAMES)


def test_class_folders_load_as_image_folder(small_dataset, tmp_path, capsys):
  root = layouts.write_class_folders(small_dataset.images, small_dataset.image_dir,
                                     tmp_path / "folders")
  out = tmp_path / "out"
  run = convert(["--input", str(root), "--output", str(out), "--layout", "tfds",
                 "--dataset-name", "shapes_folders"], capsys)
  assert run.code == 0, run.stderr
  directory = out / "shapes_folders" / "1.0.0"
  builder = tfds.builder_from_directory(str(directory))
  names = builder.info.features["label"].names
  assert names == sorted({layouts.image_class(im) for im in small_dataset.images})
  assert builder.info.supervised_keys == ("image", "label")
  by_name = {im.file_name: im for im in small_dataset.images}
  seen = []
  for split in builder.info.splits:
    for ex in tfds.as_numpy(builder.as_dataset(split=split)):
      im = by_name[os.path.basename(ex["image/filename"].decode())]
      assert names[ex["label"]] == layouts.image_class(im) and im.split == split
      assert ex["image"].shape == (im.height, im.width, 3)
      seen.append(im.file_name)
    image, label = next(iter(builder.as_dataset(split=split, as_supervised=True)))
    assert image.shape[-1] == 3 and label.dtype == tf.int64
  assert sorted(seen) == sorted(by_name)


# --- the keras-io RetinaNet example's data loading and preprocessing, with only the dataset
# name changed. Source: keras-team/keras-io, examples/vision/retinanet.py (Srihari Humbarwadi,
# Apache License 2.0): swap_xy, convert_to_xywh, random_flip_horizontal, resize_and_pad_image
# and preprocess_data as written there.

def swap_xy(boxes):
  return tf.stack([boxes[:, 1], boxes[:, 0], boxes[:, 3], boxes[:, 2]], axis=-1)


def convert_to_xywh(boxes):
  return tf.concat(
      [(boxes[..., :2] + boxes[..., 2:]) / 2.0, boxes[..., 2:] - boxes[..., :2]], axis=-1)


def random_flip_horizontal(image, boxes):
  if tf.random.uniform(()) > 0.5:
    image = tf.image.flip_left_right(image)
    boxes = tf.stack([1 - boxes[:, 2], boxes[:, 1], 1 - boxes[:, 0], boxes[:, 3]], axis=-1)
  return image, boxes


def resize_and_pad_image(image, min_side=800.0, max_side=1333.0, jitter=[640, 1024],
                         stride=128.0):
  image_shape = tf.cast(tf.shape(image)[:2], dtype=tf.float32)
  if jitter is not None:
    min_side = tf.random.uniform((), jitter[0], jitter[1], dtype=tf.float32)
  ratio = min_side / tf.reduce_min(image_shape)
  if ratio * tf.reduce_max(image_shape) > max_side:
    ratio = max_side / tf.reduce_max(image_shape)
  image_shape = ratio * image_shape
  image = tf.image.resize(image, tf.cast(image_shape, dtype=tf.int32))
  padded_image_shape = tf.cast(tf.math.ceil(image_shape / stride) * stride, dtype=tf.int32)
  image = tf.image.pad_to_bounding_box(image, 0, 0, padded_image_shape[0],
                                       padded_image_shape[1])
  return image, image_shape, ratio


def preprocess_data(sample):
  image = sample["image"]
  bbox = swap_xy(sample["objects"]["bbox"])
  class_id = tf.cast(sample["objects"]["label"], dtype=tf.int32)
  image, bbox = random_flip_horizontal(image, bbox)
  image, image_shape, _ = resize_and_pad_image(image)
  bbox = tf.stack([bbox[:, 0] * image_shape[1], bbox[:, 1] * image_shape[0],
                   bbox[:, 2] * image_shape[1], bbox[:, 3] * image_shape[0]], axis=-1)
  bbox = convert_to_xywh(bbox)
  return image, bbox, class_id


def test_keras_retinanet_loading_runs_unchanged(dataset, tmp_path, capsys):
  out = tmp_path / "data"
  inputs = [f"--input=train={dataset.coco_file('train')}",
            f"--input=validation={dataset.coco_file('val')}", f"--images={dataset.image_dir}"]
  run = convert(["--format=coco", *inputs, "--output", str(out), "--layout", "tfds",
                 "--dataset-name", "my_coco"], capsys)
  assert run.code == 0, run.stderr
  # the example's own call, the dataset name changed
  (train_dataset, val_dataset), dataset_info = tfds.load(
      "my_coco", split=["train", "validation"], with_info=True, data_dir=str(out))
  assert dataset_info.splits["train"].num_examples == sum(
      im.split == "train" for im in dataset.images)
  tf.random.set_seed(0)
  expected = {im.file_name: im for im in dataset.images if im.split == "train"}
  names = dataset_info.features["objects"]["label"].names
  count = 0
  for sample, (image, bbox, class_id) in zip(train_dataset, train_dataset.map(preprocess_data)):
    im = expected[os.path.basename(sample["image/filename"].numpy().decode())]
    assert image.shape[0] % 128 == 0 and image.shape[1] % 128 == 0 and image.shape[2] == 3
    assert [names[i] for i in class_id.numpy()] == [b[0] for b in im.boxes]
    widths = bbox.numpy()[:, 2] if len(im.boxes) else []
    scale = (image.shape[0] / im.height)  # >= the resize ratio (padding only adds)
    for w, box in zip(widths, im.boxes):
      assert 0 < w <= (box[3] - box[1]) * scale + 1e-3
    count += 1
  assert count == len(expected)


def test_masks_are_tfds_instance_masks(tmp_path, capsys):
  """--include-masks: objects/segmentation, a (h, w, 1) PNG per object, 255 where
  pycocotools' annToMask is 1 (polygons, parts, crowd RLE, compressed RLE)."""
  from coco_masks import make_coco
  from pycocotools.coco import COCO
  annotations = make_coco(tmp_path / "data")
  out = tmp_path / "out"
  run = convert(["--format=coco", "--input", str(annotations), "--images",
                 str(annotations.parent / "images"), "--output", str(out),
                 "--layout", "tfds", "--dataset-name", "shapes_masks", "--include-masks"],
                capsys)
  assert run.code == 0, run.stderr
  coco = COCO(str(annotations))
  by_file = {img["file_name"]: img["id"] for img in coco.dataset["images"]}
  builder = tfds.builder_from_directory(str(out / "shapes_masks" / "1.0.0"))
  checked = 0
  for ex in tfds.as_numpy(builder.as_dataset(split="train")):
    image_id = by_file[ex["image/filename"].decode()]
    assert ex["image/id"] == image_id
    objects = ex["objects"]
    for ann_id, mask in zip(objects["id"], objects["segmentation"]):
      expected = coco.annToMask(coco.anns[int(ann_id)])
      assert mask.shape == expected.shape + (1,)
      assert np.array_equal(mask[:, :, 0], expected * 255), ann_id
      checked += 1
  assert checked == 4  # the two broken segmentations are object errors
  manifest = _manifest(out / "shapes_masks" / "1.0.0")
  assert manifest["errors"]["by_level"]["object"] == 2


def test_deterministic_and_overwrite_and_verify(dataset, tmp_path, capsys):
  args = ["--format=csv", *dataset.inputs("csv"), "--layout", "tfds",
          "--dataset-name", "shapes", "--num-shards", "3"]
  first = convert([*args, "--output", str(tmp_path / "a")], capsys)
  second = convert([*args, "--output", str(tmp_path / "b")], capsys)
  assert first.code == second.code == 0
  a, b = tmp_path / "a" / "shapes" / "1.0.0", tmp_path / "b" / "shapes" / "1.0.0"
  names = sorted(p.name for p in a.iterdir())
  assert names == sorted(p.name for p in b.iterdir())
  assert {"dataset_info.json", "features.json", "objects-label.labels.txt", "manifest.json",
          "README.md", "shapes-train.tfrecord-00000-of-00003"} <= set(names)
  for name in names:
    if name in ("manifest.json", "README.md"):  # run id and time
      continue
    if name == "dataset_info.json":  # names its inputs: equal but for nothing
      assert (a / name).read_text() == (b / name).read_text()
    assert (a / name).read_bytes() == (b / name).read_bytes(), name
  info = json.loads((a / "dataset_info.json").read_text())
  for split in info["splits"]:
    lengths = [int(n) for n in split["shardLengths"]]
    assert len(lengths) == 3 and sum(lengths) == _manifest(a)["splits"][split["name"]][
        "examples"]
  # the manifest owns TFDS's files: --overwrite replaces them, verify checks the shards
  again = convert([*args, "--output", str(tmp_path / "a"), "--overwrite", "--num-shards", "2"],
                  capsys)
  assert again.code == 0, again.stderr
  left = sorted(p.name for p in a.iterdir() if "tfrecord" in p.name)
  assert left == [f"shapes-{s}.tfrecord-0000{i}-of-00002" for s in ("train", "val")
                  for i in range(2)]
  from beam_tfrecord.readback import verify
  assert verify.run(str(a)) == 0
  builder = tfds.builder_from_directory(str(a))
  assert builder.info.splits["train"].num_shards == 2


@pytest.mark.parametrize("extra,message", [
    ([], "--layout tfds needs --dataset-name"),
    (["--dataset-name", "Bad-Name"], "TFDS names are lower case"),
    (["--dataset-name", "ok", "--dataset-version", "1.0"], "give MAJOR.MINOR.PATCH"),
    (["--dataset-name", "ok", "--schema", "od-api"], "does not fit it"),
    (["--dataset-name", "ok", "--shard-name-template", "{split}-{index}.rec"],
     "leave out --shard-name-template"),
])
def test_bad_options_are_exit_2(dataset, tmp_path, capsys, extra, message):
  run = convert(["--format=csv", *dataset.inputs("csv"), "--output", str(tmp_path / "o"),
                 "--layout", "tfds", *extra], capsys)
  assert run.code == 2 and message in run.stderr, run.stderr
  assert not (tmp_path / "o").exists()


def test_label_map_must_be_a_class_label(dataset, tmp_path, capsys):
  label_map = layouts.write_label_map(tmp_path / "map.pbtxt",
                                      {n: i for i, n in enumerate(dataset.class_names(), 1)})
  run = convert(["--format=csv", *dataset.inputs("csv"), "--output", str(tmp_path / "o"),
                 "--layout", "tfds", "--dataset-name", "ok", "--label-map", str(label_map)],
                capsys)
  assert run.code == 2 and "ids must be 0, 1, ... N-1" in run.stderr


def test_features_json_is_what_tfds_writes():
  """Our features.json against TFDS's own serialization of the same FeaturesDict."""
  coco = tfds.features.FeaturesDict({
      "image": tfds.features.Image(),
      "image/filename": tfds.features.Text(),
      "image/id": np.int64,
      "objects": tfds.features.Sequence({
          "area": np.int64, "bbox": tfds.features.BBoxFeature(), "id": np.int64,
          "is_crowd": np.bool_, "label": tfds.features.ClassLabel(num_classes=3),
          "segmentation": tfds.features.Image(shape=(None, None, 1), encoding_format="png")}),
  })
  assert tfds_layout.features(tfds_layout.DETECTION, 3, include_masks=True) == \
      json.loads(_to_json(coco))
  folder = tfds.features.FeaturesDict({
      "image": tfds.features.Image(encoding_format="jpeg"),
      "image/filename": tfds.features.Text(), "label": tfds.features.ClassLabel(num_classes=5)})
  assert tfds_layout.features(tfds_layout.IMAGE_FOLDER, 5, image_encoding="jpeg") == \
      json.loads(_to_json(folder))


def _to_json(features) -> str:
  from google.protobuf import json_format
  return json_format.MessageToJson(features.to_proto(), sort_keys=True)


def test_gcs_output(tmp_path, capsys):
  """A gs:// run (storage emulator): TFDS's files land in OUT/NAME/VERSION; copied down, TFDS
  loads them."""
  pytest.importorskip("gcp_storage_emulator")
  import gcs_emulator
  from apache_beam.io.filesystems import FileSystems

  from beam_tfrecord import cli, sample
  bucket = "tfr-tfds"
  with gcs_emulator.running(bucket):
    local = tmp_path / "data"
    images = sample.make_dataset(str(local), count=6)
    data = f"gs://{bucket}/data"
    for name in ["train_labels.csv", "val_labels.csv"] + [
        f"images/{n}" for n in os.listdir(local / "images")]:
      with FileSystems.create(f"{data}/{name}") as f:
        f.write((local / name).read_bytes())
    out = f"gs://{bucket}/out"
    code = cli.main(["convert", "--format", "csv", "--input", f"train={data}/train_labels.csv",
                     "--input", f"val={data}/val_labels.csv", "--images", f"{data}/images",
                     "--output", out, "--layout", "tfds", "--dataset-name", "remote",
                     "--runner=FnApiRunner"])
    assert code == 0, capsys.readouterr().err
    prefix = f"{out}/remote/1.0.0/"
    found = [m.path for m in FileSystems.match([prefix + "**"])[0].metadata_list]
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in found:
      with FileSystems.open(path, compression_type="uncompressed") as f:
        (copy / path[len(prefix):]).write_bytes(f.read())
  assert {"dataset_info.json", "features.json", "manifest.json"} <= {p.name for p in
                                                                     copy.iterdir()}
  builder = tfds.builder_from_directory(str(copy))
  counts = collections.Counter(im.split for im in images)
  assert {s: builder.info.splits[s].num_examples for s in builder.info.splits} == dict(counts)
  seen = sum(1 for s in counts for _ in builder.as_dataset(split=s))
  assert seen == len(images)
