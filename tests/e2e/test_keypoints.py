"""Keypoints (issue 31, item 2): COCO person_keypoints, Ultralytics YOLO pose and CVAT
skeletons converted by the CLI, read back through the TF Object Detection API's decoding of
keypoints, every value checked against the source; bad points become error records.

`od_api_keypoints` replicates, with tf.io, what research TfExampleDecoder(num_keypoints=K)
does with keypoints: tensorflow/models research/object_detection/data_decoders/
tf_example_decoder.py at commit 015ec401bc542f62773c237f212a4ca2c879e1ef (keys_to_features'
VarLenFeatures of image/object/keypoint/{x,y,visibility}; _reshape_keypoints: [y, x] stacked
and reshaped to [-1, num_keypoints, 2]; _reshape_keypoint_visibilities: the visibility when
its size equals x's, else 2 where x is not NaN, then True for 1 or 2, reshaped to
[-1, num_keypoints]; decode(): the points of unlabelled keypoints set to NaN). The research
package itself needs TF1's tf_slim and its protos, which are not installed here.
"""
from __future__ import annotations

import glob
import json
from pathlib import Path

import layouts_keypoints as lk
import numpy as np
import pytest
from bad_data import convert

import tensorflow as tf  # noqa: E402

pytestmark = pytest.mark.e2e
K = len(lk.COCO_KEYPOINTS)


def od_api_keypoints(serialized: bytes, num_keypoints: int):
  """(keypoints [N, K, 2] as (y, x) with NaN where unlabelled, visibilities [N, K] bool,
  boxes [N, 4]) as research TfExampleDecoder(num_keypoints) decodes them."""
  parsed = tf.io.parse_single_example(serialized, {
      "image/object/keypoint/x": tf.io.VarLenFeature(tf.float32),
      "image/object/keypoint/y": tf.io.VarLenFeature(tf.float32),
      "image/object/keypoint/visibility": tf.io.VarLenFeature(tf.int64),
      **{f"image/object/bbox/{c}": tf.io.VarLenFeature(tf.float32)
         for c in ("ymin", "xmin", "ymax", "xmax")}})
  y = tf.expand_dims(tf.sparse.to_dense(parsed["image/object/keypoint/y"]), 1)
  x = tf.expand_dims(tf.sparse.to_dense(parsed["image/object/keypoint/x"]), 1)
  keypoints = tf.reshape(tf.concat([y, x], 1), [-1, num_keypoints, 2])
  x = tf.sparse.to_dense(parsed["image/object/keypoint/x"])
  vis = tf.sparse.to_dense(parsed["image/object/keypoint/visibility"])
  default_vis = tf.where(tf.math.is_nan(x), 0 * tf.ones_like(x, dtype=tf.int64),
                         2 * tf.ones_like(x, dtype=tf.int64))
  vis = tf.cond(tf.equal(tf.size(x), tf.size(vis)), lambda: vis, lambda: default_vis)
  vis = tf.reshape(tf.math.logical_or(tf.equal(vis, 1), tf.equal(vis, 2)),
                   [-1, num_keypoints])
  keypoints = tf.where(tf.tile(tf.expand_dims(vis, -1), [1, 1, 2]), keypoints,
                       np.nan * tf.ones_like(keypoints))
  boxes = tf.stack([tf.sparse.to_dense(parsed[f"image/object/bbox/{c}"])
                    for c in ("ymin", "xmin", "ymax", "xmax")], axis=1)
  return keypoints.numpy(), vis.numpy(), boxes.numpy()


def records(output: str):
  """{file name: (serialized Example, its features)} of every shard."""
  found = {}
  for path in sorted(glob.glob(f"{output}/*.tfrecord")):
    for record in tf.data.TFRecordDataset(path):
      example = tf.train.Example.FromString(record.numpy())
      name = example.features.feature["image/filename"].bytes_list.value[0].decode()
      found[name.rsplit("/", 1)[-1]] = (record.numpy(), example.features.feature)
  return found


def check_points(output: str, images, size: int, names, dropped=(), atol: float = 0.0):
  """Every object of every image (but `dropped`, (image, object index) pairs) through the
  decoder: (y, x) normalized by the image size, NaN and not labelled where the source's v is
  0; the raw visibility, num and text as research create_coco_tf_record.py writes them.
  `atol`: what the source's own rounding of normalized values allows (YOLO's '%g')."""
  found = records(output)
  assert sorted(found) == sorted(img.name for img in images)
  for img in images:
    serialized, features = found[img.name]
    objects = [obj for i, obj in enumerate(img.objects) if (img.name, i) not in dropped]
    points, visible, boxes = od_api_keypoints(serialized, size)
    assert points.shape == (len(objects), size, 2) and len(boxes) == len(objects)
    raw = list(features["image/object/keypoint/visibility"].int64_list.value)
    assert len(raw) == len(objects) * size
    for n, obj in enumerate(objects):
      expected = lk.expected_points(img, obj, size)
      assert raw[n * size:(n + 1) * size] == [v for _, _, v in expected]
      for k, (x, y, v) in enumerate(expected):
        assert visible[n, k] == (v > 0)
        if v:
          np.testing.assert_allclose(points[n, k], [y, x], rtol=1e-6, atol=atol)
        else:
          assert np.isnan(points[n, k]).all()
    if objects:
      assert list(features["image/object/keypoint/num"].int64_list.value) == [
          sum(1 for p in lk.expected_points(img, o, size) if p[2]) for o in objects]
      assert [t.decode() for t in features["image/object/keypoint/text"].bytes_list.value] \
          == list(names) * len(objects)
    else:
      assert "image/object/keypoint/x" not in features


@pytest.fixture(scope="module")
def coco_run(tmp_path_factory):
  """person_keypoints train and val files (categories last, as the official files) converted
  with the default options, once for the module: (images, run)."""
  tmp_path = tmp_path_factory.mktemp("keypoints_coco")
  root = tmp_path / "coco"
  images = lk.make_images(root)
  inputs = [f"{split}={lk.write_coco(root, images, split)}" for split in ("train", "val")]
  run = convert(["--format", "coco", *sum((["--input", i] for i in inputs), []),
                 "--images", str(root / "images"), "--output", str(tmp_path / "out")])
  return images, run


def test_coco_keypoints_round_trip_through_the_od_api_decoder(coco_run):
  """Each person's 17 points decode as the JSON gives them; the dog (a category without
  keypoints) carries 17 unlabelled points, so that the decoder's [objects, 17] reshape
  holds."""
  images, run = coco_run
  assert run.code == 0 and run.errors == [], run.stderr
  check_points(run.output, images, K, lk.COCO_KEYPOINTS)


def test_coco_bad_keypoints_are_object_errors(tmp_path, capsys):
  """A point off the image, a visibility of 3, 16 points for a 17-point category: each drops
  its object (box, class and points stay aligned) with its reason; the rest is written."""
  root = tmp_path / "coco"
  images = lk.make_images(root)
  persons = [(img, i) for img in images for i, o in enumerate(img.objects) if o.points]
  (off_img, off), (vis_img, vis), (short_img, short) = persons[:3]
  bad = {id(off_img.objects[off]): lambda f: [off_img.width + 5, 1, 2] + f[3:],
         id(vis_img.objects[vis]): lambda f: f[:-1] + [3],
         id(short_img.objects[short]): lambda f: f[:-3]}
  source = lk.write_coco(root, images, "train",
                         lambda obj, flat: bad.get(id(obj), lambda f: f)(flat))
  run = convert(["--input", str(source), "--images", str(root / "images"),
                 "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert sorted((e["reason"], e["level"], e["key"]) for e in run.errors) == sorted([
      ("keypoint_outside_image", "object", off_img.name),
      ("bad_keypoint_visibility", "object", vis_img.name),
      ("keypoint_count_mismatch", "object", short_img.name)])
  train = [img for img in images if img.split == "train"]
  check_points(run.output, train, K, lk.COCO_KEYPOINTS,
               dropped={(off_img.name, off), (vis_img.name, vis), (short_img.name, short)})


def test_datumaro_zero_based_skeleton_keeps_every_point(tmp_path, capsys):
  """Datumaro (CVAT's COCO Keypoints export) writes the skeleton 0-based: it is read so (the
  manifest's 0-based skeleton is the file's as it is) and every person's 17 points are
  written. A skeleton that fits neither numbering is left out with one bad_skeleton warning;
  the points are written all the same."""
  root = tmp_path / "coco"
  images = lk.make_images(root, count=3)
  zero_based = [[a - 1, b - 1] for a, b in lk.COCO_SKELETON]
  source = lk.write_datumaro_coco(root, images, zero_based)
  run = convert(["--input", str(source), "--images", str(root / "images"),
                 "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0 and run.errors == [], run.stderr
  assert run.manifest["keypoints"]["skeleton"] == zero_based
  train = [img for img in images if img.split == "train"]
  check_points(run.output, train, K, lk.COCO_KEYPOINTS)

  source = lk.write_datumaro_coco(root, images, [[0, 1], [16, 17]])  # 0 and K: neither
  run = convert(["--input", str(source), "--images", str(root / "images"),
                 "--output", str(tmp_path / "out2")], capsys)
  assert run.code == 0, run.stderr
  assert [(e["reason"], e["level"]) for e in run.errors] == [("bad_skeleton", "warning")]
  assert "'person'" in run.errors[0]["message"]
  assert run.manifest["keypoints"]["skeleton"] == []
  assert run.manifest["keypoints"]["names"] == list(lk.COCO_KEYPOINTS)
  check_points(run.output, train, K, lk.COCO_KEYPOINTS)


@pytest.mark.parametrize("dims", [3, 2])
def test_yolo_pose(tmp_path, capsys, dims):
  """Ultralytics pose labels (kpt_shape [17, 3] with COCO's visibilities; [17, 2] without,
  every point labelled as Ultralytics' loss counts it) decode as the label lines give them,
  named by the yaml's kpt_names."""
  root = tmp_path / "yolo"
  images = lk.make_images(root)
  yaml_path = lk.write_yolo_pose(root, images, dims)
  if dims == 2:  # no visibility: every point labelled where the line puts it (a dog's at 0, 0)
    for img in images:
      for obj in img.objects:
        obj.points = [(x, y, 2) for x, y, _ in obj.points or [(0, 0, 0)] * K]
  run = convert(["--input", str(yaml_path), "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0 and run.errors == [], run.stderr
  check_points(run.output, images, K, lk.COCO_KEYPOINTS, atol=5e-7)  # '%g': 6 digits


def test_cvat_skeletons(tmp_path, capsys):
  """CVAT skeletons: the points in the svg's order, outside as unlabelled, occluded as 1; each
  skeleton's box bounds its labelled points; boxes of other labels carry unlabelled points.
  A skeleton missing a point is a keypoint_count_mismatch."""
  names = ("head", "left_hand", "right_hand", "tail")
  root = tmp_path / "cvat"
  images = lk.make_images(root, keypoints=len(names), other="car")
  for img in images:  # the box CVAT gives a skeleton: around its labelled points
    for obj in img.objects:
      labelled = [(x, y) for x, y, v in obj.points or () if v]
      if obj.points and len(labelled) < 2:
        obj.points[0], obj.points[1] = (3, 4, 2), (9, 11, 1)
  target = images[1].objects[0]

  def drop_one(img, obj, attrs):
    return None if obj is target and attrs["label"] == "tail" else attrs

  xml = lk.write_cvat_skeletons(root, images, names, [(0, 1), (0, 2), (0, 3)],
                                element=drop_one)
  run = convert(["--format", "cvat", "--input", str(xml), "--images", str(root / "images"),
                 "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert [(e["reason"], e["level"], e["key"]) for e in run.errors] == [
      ("keypoint_count_mismatch", "object", images[1].name)]
  check_points(run.output, images, len(names), names, dropped={(images[1].name, 0)})
  found = records(run.output)
  for img in images:
    kept = [o for i, o in enumerate(img.objects) if (img.name, i) != (images[1].name, 0)]
    xmin = found[img.name][1]["image/object/bbox/xmin"].float_list.value
    for n, obj in enumerate(kept):
      labelled = [x for x, _, v in obj.points or () if v]
      want = min(labelled) if labelled else obj.box[0]
      assert xmin[n] == pytest.approx(want / img.width, rel=1e-6)


def test_datasets_without_keypoints_write_no_keypoint_key(tmp_path, capsys):
  """An instances file (no category with keypoints): no keypoint key in any record."""
  root = tmp_path / "coco"
  images = lk.make_images(root)
  source = lk.write_coco(root, [lk.Img(i.name, "train", i.width, i.height, [
      lk.Obj(o.label, o.box) for o in i.objects]) for i in images], "train")
  doc = json.loads(source.read_text())
  doc["categories"][0].pop("keypoints")
  doc["categories"][0].pop("skeleton")
  source.write_text(json.dumps(doc))
  run = convert(["--input", str(source), "--images", str(root / "images"),
                 "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0 and run.errors == [], run.stderr
  assert not any("keypoint" in key for _, features in records(run.output).values()
                 for key in features)


def test_files_with_other_keypoints_fail_the_run(tmp_path, capsys):
  """train has the person's 17 points, val's file no keypoints at all: one dataset, two
  layouts; val's file is a keypoints_differ file error, which fails the run (exit 4)."""
  root = tmp_path / "coco"
  images = lk.make_images(root)
  train = lk.write_coco(root, images, "train")
  val = lk.write_coco(root, images, "val")
  doc = json.loads(val.read_text())
  for ann in doc["annotations"]:
    ann.pop("keypoints", None)
  doc["categories"][0].pop("keypoints")
  val.write_text(json.dumps(doc))
  run = convert(["--input", f"train={train}", "--input", f"val={val}",
                 "--images", str(root / "images"), "--output", str(tmp_path / "out")], capsys)
  assert run.code == 4, run.stderr
  assert [(e["reason"], e["level"], e["key"]) for e in run.errors] == [
      ("keypoints_differ", "file", str(val))]
  assert "no keypoints" in run.errors[0]["message"] and str(train) in run.errors[0]["message"]


# The dataset's layout reaches the manifest, the card and --layout tfds's features.json through
# Finalize, and keypoints follow --max-side and EXIF turns in write/encode.py.


def test_manifest_card_and_reader_name_the_keypoints(coco_run):
  """manifest.json `keypoints`: K, the 17 names, the skeleton as 0-based pairs, the class
  that owns them; the keypoint keys in `features`, so that reader.load parses them; the card's
  Keypoints section."""
  images, run = coco_run
  assert run.code == 0, run.stderr
  assert run.manifest["keypoints"] == {
      "num_keypoints": K, "names": list(lk.COCO_KEYPOINTS),
      "skeleton": [[a - 1, b - 1] for a, b in lk.COCO_SKELETON],
      "classes": {"person": {"first": 0, "count": K}}}
  assert {k: v["dtype"] for k, v in run.manifest["features"].items() if "keypoint" in k} == {
      "image/object/keypoint/x": "float32", "image/object/keypoint/y": "float32",
      "image/object/keypoint/visibility": "int64", "image/object/keypoint/num": "int64",
      "image/object/keypoint/text": "string"}
  by_name = lk.by_name(images)
  for example in run.examples:  # reader.load, dense
    img = by_name[example["filename"]]
    expected = [p for o in img.objects for p in lk.expected_points(img, o, K)]
    assert list(example.get("image/object/keypoint/visibility", [])) == [
        v for _, _, v in expected]
    np.testing.assert_allclose(example.get("image/object/keypoint/x", []),
                               [x for x, _, _ in expected], rtol=1e-6)
  card = (Path(run.output) / "README.md").read_text()
  assert "## Keypoints" in card and "num_keypoints=17" in card
  assert "| 16 | right\\_ankle | person |" in card or "| 16 | right_ankle | person |" in card
  assert "15-13" in card  # COCO's edge [16, 14], 0-based


def test_feature_names_rename_keypoint_keys_and_show_draws_the_points(tmp_path, capsys):
  """--feature-names renames the keypoint keys like any other: the records hold them under
  the new names (parsed here with TensorFlow as the OD API decoder would, its keys renamed),
  the manifest declares them, and `show` finds them there and draws each labelled point as a
  dot of its class colour where the record puts it."""
  from beam_tfrecord.readback import show
  root = tmp_path / "coco"
  images = lk.make_images(root, count=3)
  source = lk.write_coco(root, images, "train")
  renames = {"image/object/keypoint/x": "kp/x", "image/object/keypoint/y": "kp/y",
             "image/object/keypoint/visibility": "kp/v"}
  run = convert(["--input", str(source), "--images", str(root / "images"), "--output",
                 str(tmp_path / "out"), "--feature-names",
                 ",".join(f"{old}={new}" for old, new in renames.items())], capsys)
  assert run.code == 0 and run.errors == [], run.stderr
  assert {"kp/x", "kp/y", "kp/v"} <= set(run.manifest["features"])
  assert not set(renames) & set(run.manifest["features"])
  train = [img for img in images if img.split == "train"]
  found = records(run.output)
  for img in train:
    features = found[img.name][1]
    assert not set(renames) & set(features)
    expected = [p for o in img.objects for p in lk.expected_points(img, o, K)]
    np.testing.assert_allclose(features["kp/x"].float_list.value, [x for x, _, _ in expected],
                               rtol=1e-6)
    np.testing.assert_allclose(features["kp/y"].float_list.value, [y for _, y, _ in expected],
                               rtol=1e-6)
    assert list(features["kp/v"].int64_list.value) == [v for _, _, v in expected]

  grid = show.show(run.output, split="train", n=len(train))
  tiles = {t["name"]: t for t in grid.info["tiles"]}
  person = show.box_color("person", run.manifest["label_map"])
  checked = 0
  for img in train:
    tile = tiles[img.name]
    s, ox, oy = tile["scale"], tile["x"], tile["y"]
    for obj in img.objects:
      for x, y, v in obj.points or ():
        if v and y - obj.box[1] > 24 / s:  # below where the class name is written
          assert grid.getpixel((ox + round(x * s), oy + round(y * s))) == person, (img.name, x, y)
          checked += 1
  assert checked >= 5


def test_tfds_layout_with_keypoints(tmp_path, capsys):
  """--layout tfds: objects/keypoints (K, 2) as [y, x] and objects/keypoint_visibility (K,),
  declared in features.json and loaded by TensorFlow Datasets itself."""
  tfds = pytest.importorskip("tensorflow_datasets")
  root = tmp_path / "coco"
  images = lk.make_images(root)
  source = lk.write_coco(root, images, "train")
  run = convert(["--input", str(source), "--images", str(root / "images"), "--output",
                 str(tmp_path / "out"), "--layout", "tfds", "--dataset-name", "poses"], capsys)
  assert run.code == 0, run.stderr
  builder = tfds.builder_from_directory(str(tmp_path / "out" / "poses" / "1.0.0"))
  by_name = lk.by_name(images)
  seen = 0
  for ex in tfds.as_numpy(builder.as_dataset(split="train")):
    img = by_name[ex["image/filename"].decode().rsplit("/", 1)[-1]]
    expected = [lk.expected_points(img, o, K) for o in img.objects]
    assert ex["objects"]["keypoints"].shape == (len(expected), K, 2)
    for n, points in enumerate(expected):
      np.testing.assert_allclose(ex["objects"]["keypoints"][n], [[y, x] for x, y, _ in points],
                                 rtol=1e-6)
      assert list(ex["objects"]["keypoint_visibility"][n]) == [v for _, _, v in points]
    seen += 1
  assert seen == sum(1 for img in images if img.split == "train")


def test_keypoints_follow_resize_and_exif(tmp_path, capsys):
  """--max-side: normalized points do not move (COCO pixels and YOLO's normalized alike). An
  EXIF orientation 6 photo annotated in its stored frame (--exif-frame stored): each point
  turns with the image, (x, y) -> (h - y, x), normalized by the upright size."""
  root = tmp_path / "coco"
  images = lk.make_images(root)
  source = lk.write_coco(root, images, "train")
  run = convert(["--input", str(source), "--images", str(root / "images"),
                 "--output", str(tmp_path / "small"), "--max-side", "40"], capsys)
  assert run.code == 0 and run.errors == [], run.stderr
  check_points(run.output, [i for i in images if i.split == "train"], K, lk.COCO_KEYPOINTS,
               atol=1e-6)
  yolo_root = tmp_path / "yolo"
  yolo_images = lk.make_images(yolo_root)
  run = convert(["--input", str(lk.write_yolo_pose(yolo_root, yolo_images)),
                 "--output", str(tmp_path / "yolo_small"), "--max-side", "40"], capsys)
  assert run.code == 0 and run.errors == [], run.stderr
  check_points(run.output, yolo_images, K, lk.COCO_KEYPOINTS, atol=5e-7)

  from PIL import Image
  turned = root / "images" / images[0].name
  with Image.open(turned) as im:
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(turned, "JPEG", exif=exif.tobytes())
  run = convert(["--input", str(source), "--images", str(root / "images"), "--exif-frame",
                 "stored", "--output", str(tmp_path / "turned")], capsys)
  assert run.code == 0, run.stderr
  img = images[0]
  upright = lk.Img(img.name, img.split, img.height, img.width, [
      lk.Obj(o.label, o.box, o.points and [(img.height - y, x, v) if v else (0, 0, 0)
                                           for x, y, v in o.points]) for o in img.objects])
  check_points(run.output, [upright] + [i for i in images[1:] if i.split == "train"], K,
               lk.COCO_KEYPOINTS, atol=1e-6)
