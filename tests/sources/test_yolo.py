"""sources/yolo.py: Ultralytics data.yaml and Darknet obj.data, end to end, read back with TF.

Fixtures are written by tests/layouts.py from the generated sample images, laid out as the
real tools lay them out. Every run goes through the CLI on the in-process runner.
"""
from __future__ import annotations

import collections

import layouts
import pytest
from bad_data import RUNNER, convert

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources import yolo
from beam_tfrecord.sources.yolo import dataset as yolo_dataset
from beam_tfrecord.sources.yolo import labels as yolo_labels

YOLO_IDS = {name: i + 1 for i, name in enumerate(layouts.YOLO_NAMES)}


# ---------------------------------------------------------------------------------------------
# Pure functions


def test_parse_line_box_polygon_and_errors():
  names = ["a", "b"]
  obj = yolo.parse_line("1 0.5 0.25 0.2 0.1", names)
  assert obj.label == "b" and obj.box.normalized
  assert [round(v, 9) for v in (obj.box.xmin, obj.box.ymin, obj.box.xmax, obj.box.ymax)] == \
      [0.4, 0.2, 0.6, 0.3]
  poly = yolo.parse_line("0 0.1 0.2 0.4 0.25 0.35 0.6", names)  # a triangle: its bbox
  assert (poly.box.xmin, poly.box.ymin, poly.box.xmax, poly.box.ymax) == (0.1, 0.2, 0.4, 0.6)
  # a box on the border that rounding pushed past it is the border, not a clipped box
  edge = yolo.parse_line("0 0.9 0.5 0.2000001 0.2", names)
  assert edge.box.xmax == 1.0
  cases = {"2 0.5 0.5 0.1 0.1": "class_out_of_range", "0 0.5 0.5 0.1": "malformed_line",
           "a 0.5 0.5 0.1 0.1": "malformed_line", "0.5 0.5 0.5 0.1 0.1": "malformed_line",
           "0 0.5 0.5 0.1 0.1 0.2": "malformed_line", "0 1.5 0.5 0.1 0.1": "bbox_outside_unit",
           "0 0.5 -0.1 0.1 0.1": "bbox_outside_unit", "0 nan 0.5 0.1 0.1": "malformed_line"}
  for line, reason in cases.items():
    with pytest.raises(InputError) as e:
      yolo.parse_line(line, names)
    assert e.value.reason == reason, line


def test_parse_label_text_keeps_good_lines_and_numbers_bad_ones():
  objects, errors = yolo.parse_label_text("0 0.5 0.5 0.2 0.2\n\n9 0.5 0.5 0.1 0.1\n"
                                          "1 0.1 0.1 0.1 0.1\n", ["a", "b"])
  assert [o.label for o in objects] == ["a", "b"]
  assert [(n, e.reason) for n, e in errors] == [(3, "class_out_of_range")]


def test_label_paths_and_names():
  assert yolo.label_path("/d/images/train/x.y.jpg") == "/d/labels/train/x.y.txt"
  assert yolo.label_path("/d/images/a/images/b.png") == "/d/images/a/labels/b.txt"
  assert yolo.label_path("/d/data/obj/b.jpeg") == "/d/data/obj/b.txt"  # Darknet: beside
  assert yolo.label_dir("/d/train/images") == "/d/train/labels"
  assert yolo.parse_names({0: "x", 1: "y"}, "f") == ("x", "y")
  assert yolo.parse_names(["x", "y"], "f") == ("x", "y")
  from beam_tfrecord.errors import UsageError
  with pytest.raises(UsageError):
    yolo.parse_names({0: "x", 2: "y"}, "f")


def test_missing_split_folder_is_a_usage_error(tmp_path):
  from beam_tfrecord.errors import UsageError
  (tmp_path / "data.yaml").write_text("train: images/train\nnames: [a]\n")
  with pytest.raises(UsageError, match="images/train"):
    yolo.load(str(tmp_path / "data.yaml"))


# ---------------------------------------------------------------------------------------------
# Pipelines


@pytest.mark.e2e
def test_ultralytics_yaml(dataset, tmp_path, capsys):
  """COCO128-style yaml beside the dataset folder, names as {index: name}, background images
  without label files: every image back, boxes to 1e-5, id = YOLO index + 1."""
  yaml_path = layouts.write_ultralytics(dataset.images, dataset.image_dir, tmp_path / "src")
  run = convert(["--input", str(yaml_path), "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert "detected: yolo (shapes.yaml)" in run.stdout
  assert run.manifest["format"] == "yolo" and run.manifest["schema"] == "od_api"
  assert run.manifest["label_map"] == YOLO_IDS
  assert (tmp_path / "out" / "label_map.pbtxt").read_text() == (
      "item {\n  name: \"person\"\n  id: 1\n}\nitem {\n  name: \"dog\"\n  id: 2\n}\n"
      "item {\n  name: \"cat\"\n  id: 3\n}\n")
  assert layouts.split_counts(run) == dict(collections.Counter(im.split for im in dataset.images))
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, YOLO_IDS)
  backgrounds = [im.file_name for im in dataset.images if not im.boxes]
  assert backgrounds and all(run.by_filename()[f"images/{im.split}/{im.file_name}"]
                             ["image/object/class/text"] == [] for im in dataset.images
                             if not im.boxes)
  assert run.errors == [] and run.manifest["totals"]["clipped_boxes"] == 0


@pytest.mark.e2e
def test_darknet_obj_data_with_label_map(dataset, tmp_path):
  """obj.data in data/ naming data/-prefixed lists; --label-map overrides index + 1."""
  obj_data = layouts.write_darknet(dataset.images, dataset.image_dir, tmp_path / "darknet")
  obj = tmp_path / "darknet" / "data" / "obj"
  (obj / "classes.txt").write_text("\n".join(layouts.YOLO_NAMES))  # LabelImg writes it here
  (obj / "ghost.txt").write_text("0 0.5 0.5 0.1 0.1\n")  # its image was deleted
  ids = {"cat": 7, "dog": 8, "person": 9}
  label_map = layouts.write_label_map(tmp_path / "map.pbtxt", ids)
  run = convert(["--format", "yolo", "--input", str(obj_data), "--label-map", str(label_map),
                 "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0
  assert run.manifest["label_map"] == ids
  split_of = lambda im: "train" if im.split == "train" else "valid"  # noqa: E731
  assert layouts.split_counts(run) == dict(collections.Counter(map(split_of, dataset.images)))
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, ids, split_of)
  assert {e["filename"] for e in run.examples} == {
      f"data/obj/{im.file_name}" for im in dataset.images}
  # train.txt and valid.txt share data/obj: only the label no image claims is an orphan
  assert [(e["reason"], e["level"], e["source"]) for e in run.errors] == [
      ("orphan_label", "image", str(obj / "ghost.txt"))]


@pytest.mark.e2e
def test_bad_labels_become_error_records(small_dataset, tmp_path):
  """Orphan label file, class out of range, malformed lines, a box outside [0, 1]: each an
  error record at its level; the good lines of the same file and background images are kept;
  a polygon line gives its bounding box."""
  ds = small_dataset
  yaml_path = layouts.write_ultralytics(ds.images, ds.image_dir, tmp_path / "src")
  root = tmp_path / "src" / "shapes"
  boxed = next(im for im in ds.images if im.boxes)
  label = root / "labels" / boxed.split / f"{layouts.stem(boxed.file_name)}.txt"
  good = label.read_text()
  label.write_text(good + "7 0.5 0.5 0.1 0.1\n0 0.5 0.5\n0 1.25 0.5 0.1 0.1\n"
                   "2 0.1 0.2 0.4 0.2 0.4 0.6 0.1 0.6\n")
  (root / "labels" / "train" / "ghost.txt").write_text("0 0.5 0.5 0.1 0.1\n")
  empty = next(im for im in ds.images if im is not boxed and im.boxes)
  (root / "labels" / empty.split / f"{layouts.stem(empty.file_name)}.txt").write_text("")
  run = convert(["--input", str(yaml_path), "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0
  by_reason = {e["reason"]: e for e in run.errors}
  assert sorted(by_reason) == ["bbox_outside_unit", "class_out_of_range", "malformed_line",
                               "orphan_label"]
  assert len(run.errors) == 4
  assert by_reason["orphan_label"]["level"] == "image"
  assert by_reason["orphan_label"]["source"].endswith("labels/train/ghost.txt")
  lines = len(good.splitlines())
  for reason, offset in (("class_out_of_range", 1), ("malformed_line", 2),
                         ("bbox_outside_unit", 3)):
    assert by_reason[reason]["level"] == "object"
    assert by_reason[reason]["source"] == f"{label}:{lines + offset}"
    assert by_reason[reason]["key"] == f"images/{boxed.split}/{boxed.file_name}"
  examples = run.by_filename()
  assert len(examples) == len(ds.images)  # background and emptied images kept
  ex = examples[f"images/{boxed.split}/{boxed.file_name}"]
  assert len(ex["image/object/class/text"]) == len(boxed.boxes) + 1
  assert ex["image/object/class/text"][-1] == b"cat"
  last = [ex[f"image/object/bbox/{k}"][-1] for k in ("xmin", "ymin", "xmax", "ymax")]
  assert all(abs(a - b) < 1e-6 for a, b in zip(last, (0.1, 0.2, 0.4, 0.6)))
  assert examples[f"images/{empty.split}/{empty.file_name}"]["image/object/class/text"] == []
  assert run.manifest["errors"]["by_level"] == {"image": 1, "object": 3}


# ---------------------------------------------------------------------------------------------
# Pose, line lengths, one folder in two splits, Darknet lists from another machine


def test_pose_line_box_is_the_four_numbers_after_the_class():
  """coco8-pose style (kpt_shape [17, 3], visibility 2): the keypoints spread wider than the
  box must not widen it, and visibility values are not coordinates."""
  names = ["person"]
  keypoints = " ".join(f"{0.05 + 0.05 * i:.2f} {0.9 - 0.04 * i:.2f} 2" for i in range(17))
  obj = yolo.parse_line(f"0 0.5 0.5 0.2 0.4 {keypoints}", names, kpt_shape=(17, 3))
  assert [round(v, 9) for v in (obj.box.xmin, obj.box.ymin, obj.box.xmax, obj.box.ymax)] == \
      [0.4, 0.3, 0.6, 0.7]
  two = yolo.parse_line("0 0.5 0.5 0.2 0.2 0.1 0.1 0.9 0.9", names, kpt_shape=(2, 2))
  assert (two.box.xmin, two.box.xmax) == (0.4, 0.6) and two.segmentation is None
  assert yolo.parse_line("0 0.5 0.5 0.2 0.2 0.1 0.1 0.9 0.9", names, include_masks=True,
                         kpt_shape=(2, 2)).segmentation is None
  for line, reason in {"0 0.5 0.5 0.2 0.2": "malformed_line",          # no keypoints
                       "0 0.5 0.5 0.2 0.2 0.1 0.1 0.9": "malformed_line",  # one value short
                       "0 0.5 0.5 0.2 0.2 0.1 0.1 0.9 0.9 0.5": "malformed_line",
                       "0 0.5 0.5 0.2 0.2 1.5 0.1 0.9 0.9": "keypoint_outside_image",
                       "0 1.5 0.5 0.2 0.2 0.1 0.1 0.9 0.9": "bbox_outside_unit"}.items():
    with pytest.raises(InputError) as e:
      yolo.parse_line(line, names, kpt_shape=(2, 2))
    assert e.value.reason == reason, line
  with pytest.raises(InputError, match="9 fields, the yaml's kpt_shape"):
    yolo.parse_line("0 0.5 0.5 0.2 0.2", names, kpt_shape=(2, 2))


@pytest.mark.parametrize("count, kpt_shape, shape", [
    (5, None, "box"), (7, None, "polygon"), (9, None, "polygon"), (4, None, None),
    (6, None, None), (8, None, None), (3, None, None),
    (56, (17, 3), "pose"), (5, (17, 3), None), (39, (17, 3), None), (13, (4, 2), "pose")])
def test_line_shape(count, kpt_shape, shape):
  """Without kpt_shape a line of class + 6 numbers is a triangle (Ultralytics reads every line
  longer than 5 as a segment); an odd count of coordinates or fewer than 3 points fits
  nothing."""
  assert yolo.line_shape(count, kpt_shape) == shape


def test_kpt_shape_is_read_and_checked(tmp_path):
  from beam_tfrecord.errors import UsageError
  (tmp_path / "images").mkdir()
  (tmp_path / "pose.yaml").write_text("train: images\nkpt_shape: [17, 3]\nnames: [person]\n")
  assert yolo.load(str(tmp_path / "pose.yaml")).kpt_shape == (17, 3)
  for bad in ("[17]", "[17, 4]", "[0, 2]", "seventeen"):
    (tmp_path / "pose.yaml").write_text(f"train: images\nkpt_shape: {bad}\nnames: [p]\n")
    with pytest.raises(UsageError, match="kpt_shape"):
      yolo.load(str(tmp_path / "pose.yaml"))


def test_trailing_candidates_stay_under_their_base():
  assert yolo.trailing_candidates("/content/drive/MyDrive/obj/1.jpg", ["/d"]) == [
      "/d/content/drive/MyDrive/obj/1.jpg", "/d/drive/MyDrive/obj/1.jpg",
      "/d/MyDrive/obj/1.jpg", "/d/obj/1.jpg", "/d/1.jpg"]
  assert yolo.trailing_candidates("/x/../../etc/passwd", ["/d"]) == [
      "/d/x/etc/passwd", "/d/etc/passwd", "/d/passwd"]
  assert yolo.trailing_candidates("C:\\Users\\me\\obj\\1.jpg", ["/d"])[-2:] == [
      "/d/obj/1.jpg", "/d/1.jpg"]


def _pose_dataset(ds, target):
  """An Ultralytics pose dataset (tiger-pose style: kpt_shape [4, 2]) from the sample: each
  box line followed by 4 keypoints spread over the whole image, wider than the box."""
  yaml_path = layouts.write_ultralytics(ds.images, ds.image_dir, target)
  for label in (target / "shapes" / "labels").rglob("*.txt"):
    label.write_text("".join(
        f"{line} 0.0200000000 0.0300000000 0.9700000000 0.0300000000 "
        "0.9700000000 0.9800000000 0.0200000000 0.9800000000\n"
        for line in label.read_text().splitlines()))
  yaml_path.write_text(yaml_path.read_text() + "kpt_shape: [4, 2]\nflip_idx: [1, 0, 3, 2]\n")
  return yaml_path


@pytest.mark.e2e
def test_pose_dataset_boxes(small_dataset, tmp_path, capsys):
  """The box of a pose line is its own, not the hull of box and keypoints; a line of the
  wrong length in a pose dataset is a malformed_line, the image and its other boxes kept."""
  ds = small_dataset
  yaml_path = _pose_dataset(ds, tmp_path / "src")
  boxed = next(im for im in ds.images if im.boxes)
  label = tmp_path / "src" / "shapes" / "labels" / boxed.split / \
      f"{layouts.stem(boxed.file_name)}.txt"
  label.write_text(label.read_text() + "0 0.5 0.5 0.1 0.1\n")  # a box line without keypoints
  run = convert(["--input", str(yaml_path), "--output", str(tmp_path / "out"), RUNNER], capsys)
  assert run.code == 0, run.stderr
  layouts.check_od_examples(run, ds.images, ds.image_dir, YOLO_IDS)
  assert [(e["reason"], e["level"], e["source"]) for e in run.errors] == [
      ("malformed_line", "object", f"{label}:{len(boxed.boxes) + 1}")]


@pytest.mark.e2e
def test_one_folder_in_two_splits_is_read_once_per_split(small_dataset, tmp_path):
  """COCO128's yaml: train and val name the same folder. The source emits each image once
  for each split it is listed in, with that split (the writer decides what to keep)."""
  import apache_beam as beam
  from apache_beam.testing.test_pipeline import TestPipeline
  from apache_beam.testing.util import assert_that, equal_to
  ds = small_dataset
  yaml_path = layouts.write_ultralytics(ds.images, ds.image_dir, tmp_path / "src")
  root = tmp_path / "src" / "shapes"
  for im in ds.images:  # one folder, as coco128/images/train2017
    if im.split != "train":
      (root / "images" / im.split / im.file_name).rename(root / "images" / "train" / im.file_name)
      label = root / "labels" / im.split / f"{layouts.stem(im.file_name)}.txt"
      if label.exists():
        label.rename(root / "labels" / "train" / label.name)
  yaml_path.write_text("path: shapes\ntrain: images/train\nval: images/train\n"
                       "names: [person, dog, cat]\n")
  dataset = yolo.load(str(yaml_path))
  with TestPipeline(runner="FnApiRunner", argv=[]) as p:
    out = p | yolo.ReadYolo([dataset])
    assert_that(out.images | "Pairs" >> beam.Map(
        lambda a: (a.split, a.key, len(a.objects))), equal_to(
        [(split, f"images/train/{im.file_name}", len(im.boxes))
         for im in ds.images for split in ("train", "val")]), label="Images")
    assert_that(out.errors, equal_to([]), label="NoErrors")


@pytest.mark.e2e
def test_darknet_list_of_colab_paths(dataset, tmp_path, capsys):
  """A train.txt written on Colab (/content/drive/MyDrive/darknet/data/obj/1.jpg) with the
  images next to it here: each found by its trailing components inside the dataset, one
  warning for the list; a path found nowhere is a missing_image naming the problem."""
  obj_data = layouts.write_darknet(dataset.images, dataset.image_dir, tmp_path / "darknet")
  data = tmp_path / "darknet" / "data"
  for name in ("train.txt", "valid.txt"):
    lines = (data / name).read_text().split()
    (data / name).write_text("".join(f"/content/drive/MyDrive/darknet/{line}\n"
                                     for line in lines))
  with open(data / "train.txt", "a") as f:
    f.write("/content/drive/MyDrive/darknet/data/obj/deleted.jpg\n")
  run = convert(["--input", str(obj_data), "--output", str(tmp_path / "out"), RUNNER], capsys)
  assert run.code == 0, run.stderr
  split_of = lambda im: "train" if im.split == "train" else "valid"  # noqa: E731
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, YOLO_IDS, split_of)
  assert {e["filename"] for e in run.examples} == {
      f"data/obj/{im.file_name}" for im in dataset.images}
  relocated = run.errors_where(reason="relocated_image")
  assert sorted(e["source"] for e in relocated) == [str(data / "train.txt"),
                                                     str(data / "valid.txt")]
  assert all(e["level"] == "warning" for e in relocated)
  [missing] = run.errors_where(reason="missing_image")
  assert missing["key"] == "/content/drive/MyDrive/darknet/data/obj/deleted.jpg"
  assert "absolute path that does not exist here" in missing["message"]
  assert len(run.errors) == 3


@pytest.mark.e2e
def test_files_over_their_budget_are_refused(small_dataset, tmp_path, monkeypatch):
  """A label file over MAX_LABEL_BYTES is one image-level error (its image is not converted,
  the others are); a dataset yaml over MAX_YAML_BYTES is a usage error. Neither is read whole."""
  from beam_tfrecord.errors import UsageError
  ds = small_dataset
  yaml_path = layouts.write_ultralytics(ds.images, ds.image_dir, tmp_path / "src")
  root = tmp_path / "src" / "shapes"
  boxed = next(im for im in ds.images if im.boxes)
  label = root / "labels" / boxed.split / f"{layouts.stem(boxed.file_name)}.txt"
  limit = max(p.stat().st_size for p in (root / "labels").rglob("*.txt"))
  label.write_text("0 0.5 0.5 0.1 0.1\n" * (limit // 18 + 1))  # one byte and more over
  monkeypatch.setattr(yolo_labels, "MAX_LABEL_BYTES", limit)
  run = convert(["--input", str(yaml_path), "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0
  [error] = run.errors
  assert (error["reason"], error["level"]) == ("too_large", "image")
  assert f"more than {limit} bytes" in error["message"]
  assert error["key"] == f"images/{boxed.split}/{boxed.file_name}"
  assert len(run.by_filename()) == len(ds.images) - 1
  monkeypatch.setattr(yolo_dataset, "MAX_YAML_BYTES", 16)
  with pytest.raises(UsageError, match="more than 16 bytes"):
    yolo.load(str(yaml_path))
