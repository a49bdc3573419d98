"""sources/labelme.py: folders of LabelMe JSONs, pure functions and end to end, read back
with TF.

Fixtures are written by tests/layouts_labelme.py from the generated sample images, laid out
as labelme lays them out. Every run goes through the CLI on the in-process runner.
"""
from __future__ import annotations

import base64
import dataclasses
import io
import json
import shutil

import layouts
import layouts_labelme as lm_layouts
import numpy as np
import pytest
from bad_data import RUNNER, convert, png, solid
from PIL import Image

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources import labelme
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
from beam_tfrecord.records import masks


def _shape(label, points, shape_type="rectangle", group_id=None, **extra):
  return {"label": label, "points": points, "group_id": group_id, "shape_type": shape_type,
          "flags": {}, **extra}


def _box(obj):
  return (obj.box.xmin, obj.box.ymin, obj.box.xmax, obj.box.ymax)


# ---------------------------------------------------------------------------------------------
# Pure functions


def test_rectangles_polygons_groups_and_ignore():
  """Corners in any order; a polygon's bounding box; a group's union box and its parts as one
  COCO polygon list; __ignore__ skipped without a word; objects in first-shape order."""
  shapes = [
      _shape("cat", [[30.5, 40.0], [10.0, 20.25]]),                        # dragged up-left
      _shape("dog", [[5, 1], [9, 4], [2, 8]], "polygon"),
      _shape("__ignore__", [[0, 0], [99, 99]]),
      _shape("cat", [[50, 50], [60, 70]], group_id=3),
      _shape("cat", [[80, 40], [90, 45], [85, 55]], "polygon", group_id=3),
      _shape("cat", [[1, 1], [2, 2]], group_id=4),                          # a group of one
  ]
  objects, problems = labelme.parse_shapes(shapes, include_masks=True)
  assert problems == []
  assert [(o.label, _box(o)) for o in objects] == [
      ("cat", (10.0, 20.25, 30.5, 40.0)), ("dog", (2.0, 1.0, 9.0, 8.0)),
      ("cat", (50.0, 40.0, 90.0, 70.0)), ("cat", (1.0, 1.0, 2.0, 2.0))]
  assert json.loads(objects[0].segmentation) == [[10.0, 20.25, 30.5, 20.25, 30.5, 40.0,
                                                  10.0, 40.0]]
  assert json.loads(objects[1].segmentation) == [[5.0, 1.0, 9.0, 4.0, 2.0, 8.0]]
  assert json.loads(objects[2].segmentation) == [[50.0, 50.0, 60.0, 50.0, 60.0, 70.0, 50.0,
                                                  70.0], [80.0, 40.0, 90.0, 45.0, 85.0, 55.0]]
  # without --include-masks no segmentation travels through the shuffles
  plain, _ = labelme.parse_shapes(shapes)
  assert [o.segmentation for o in plain] == [None] * 4
  assert [_box(o) for o in plain] == [_box(o) for o in objects]


def test_labelme_3_file_without_shape_type_or_group_id_is_polygons():
  objects, problems = labelme.parse_shapes([{"label": "a", "line_color": None,
                                             "fill_color": None,
                                             "points": [[1, 2], [7, 3], [4, 9]]}])
  assert problems == [] and [_box(o) for o in objects] == [(1.0, 2.0, 7.0, 9.0)]


@pytest.mark.parametrize("shape_type", ["circle", "line", "linestrip", "point", "mask",
                                        "points", "oriented_rectangle"])
def test_unsupported_shapes_are_warnings_naming_type_and_file(shape_type):
  points = [[1, 1]] if shape_type == "point" else [[1, 1], [5, 5]]
  objects, problems = labelme.parse_shapes(
      [_shape("a", points, shape_type), _shape("b", [[0, 0], [3, 3]])], where="/d/x.json")
  assert [o.label for o in objects] == ["b"]
  [(level, error)] = problems
  assert (level, error.reason) == ("warning", "unsupported_shape")
  assert f"'{shape_type}' shape" in error.message and "/d/x.json" in error.message


def test_bad_shapes_are_object_errors_and_the_rest_is_kept():
  shapes = [
      _shape("a", [[0, 0]]),                                   # rectangle of one point
      _shape("b", [[0, 0], [1, 1]], "polygon"),                # polygon of two points
      _shape("c", [[0, float("nan")], [1, 1]]),                # NaN (json reads NaN)
      _shape("d", [[True, 0], [1, 1]]),                        # a bool is no coordinate
      _shape("e", [[0, 0, 0], [1, 1]]),                        # three values
      _shape("f", "0,0,1,1"),                                  # points not a list
      _shape("", [[0, 0], [1, 1]]),                            # no label
      _shape("g", [[0, 0], [1, 1]], group_id="1"),             # group_id text
      _shape("h", [[0, 0], [1, 1]], shape_type=7),
      "not a shape",
      _shape("x", [[0, 0], [2, 2]], group_id=1),
      _shape("y", [[4, 4], [6, 6]], group_id=1),               # the group mixes labels
      _shape("ok", [[2, 3], [4, 5]]),
  ]
  objects, problems = labelme.parse_shapes(shapes)
  assert [(o.label, _box(o)) for o in objects] == [("ok", (2.0, 3.0, 4.0, 5.0))]
  assert [(level, e.reason) for level, e in problems] == (
      [("object", "malformed_shape")] * 6 + [("object", "missing_label")] +
      [("object", "malformed_shape")] * 3 + [("object", "group_labels_differ")])
  assert "group_id 1" in problems[-1][1].message and "['x', 'y']" in problems[-1][1].message


def test_load_json_budgets_and_foreign_files(monkeypatch):
  from beam_tfrecord.sources.labelme import document as labelme  # MAX_JSON_BYTES read there
  doc = {"version": "5.5.0", "shapes": [], "imagePath": "a.jpg", "imageData": None}
  assert labelme.load_json(b"\xef\xbb\xbf" + json.dumps(doc).encode()) == doc  # BOM
  cases = {b"{\"shapes\": [": "malformed_json", b"\xff\xfe{}": "malformed_json",
           b"[1, 2]": "not_labelme", b'{"images": [], "annotations": []}': "not_labelme",
           b'{"shapes": {}}': "malformed_json",
           b'{"shapes": [], "x": ' + b"[" * 40 + b"]" * 40 + b"}": "too_deep",
           b'{"shapes": ' + b"[" * 100000 + b"]" * 100000 + b"}": "too_deep"}
  for data, reason in cases.items():
    with pytest.raises(InputError) as e:
      labelme.load_json(data)
    assert e.value.reason == reason, data[:40]
  monkeypatch.setattr(labelme, "MAX_JSON_BYTES", 10)
  with pytest.raises(InputError, match="over the 10") as e:
    labelme.load_json(json.dumps(doc).encode())
  assert e.value.reason == "too_large"


def test_shapes_per_file_are_bounded(monkeypatch):
  """With the real MAX_OBJECTS_PER_IMAGE: that many shapes are read; one more is
  too_many_objects, found while streaming, before json builds a shape; a file ijson refuses
  (NaN, which json reads) is counted after json."""
  from beam_tfrecord.sources.labelme import document
  bound = MAX_OBJECTS_PER_IMAGE

  def text(shapes: int) -> bytes:
    return json.dumps({"version": "5.5.0", "flags": {}, "shapes": [_shape("a", [[1, 2], [3, 4]])]
                       * shapes, "imagePath": "a.jpg", "imageData": None}).encode()
  assert len(document.load_json(text(bound))["shapes"]) == bound
  with monkeypatch.context() as patched:
    patched.setattr(document.depth, "loads", lambda *a: pytest.fail("json.loads reached"))
    with pytest.raises(InputError) as e:
      document.load_json(text(bound + 1))
  assert e.value.reason == "too_many_objects"
  assert e.value.message == (f"`shapes` lists more than the {bound:,} one image may have: the "
                             "image is not converted")
  with pytest.raises(InputError) as e:
    document.load_json(text(bound + 1).replace(b'"flags": {}', b'"flags": {}, "x": NaN', 1))
  assert e.value.reason == "too_many_objects"
  assert f"lists {bound + 1:,} shapes, more than the {bound:,}" in e.value.message


def test_embedded_image_keys():
  """imageData's image is keyed by imagePath's name as it would be looked up, else (no
  imagePath, one leaving the root, or the JSON itself) by the JSON's name without .json."""
  assert labelme.embedded_key("s/a.json", "a.jpg", False) == "s/a.jpg"
  assert labelme.embedded_key("s/a.json", "a.json", False) == "s/a"
  assert labelme.embedded_key("s/a.json", None, False) == "s/a"
  assert labelme.embedded_key("a.json", "../images/a.jpg", False) == "a.jpg"  # beside
  assert labelme.embedded_key("s/a.json", "../images/a.jpg", True) == "s/a.jpg"


def test_image_names_and_candidates():
  assert labelme.image_name({"imagePath": "..\\images\\a.jpg"}) == "../images/a.jpg"
  assert labelme.image_name({"imagePath": ""}) is None
  assert labelme.image_name({}) is None
  # the input folder as image root: imagePath from the JSON's folder, then beside the JSON
  assert labelme.image_candidates("a.json", "a.jpg", False) == ["a.jpg"]
  assert labelme.image_candidates("ann/a.json", "../images/a.jpg", False) == [
      "images/a.jpg", "ann/a.jpg"]
  assert labelme.image_candidates("a.json", "../images/a.jpg", False) == [
      "../images/a.jpg", "a.jpg"]
  assert labelme.image_candidates("s/a.json", "/home/me/a.jpg", False) == ["s/a.jpg"]
  assert labelme.image_candidates("s/a.json", "C:/Users/me/a.jpg", False) == ["s/a.jpg"]
  # --images: the base name, mirrored under the JSON's sub-folder, then directly
  assert labelme.image_candidates("s/a.json", "../images/a.jpg", True) == ["s/a.jpg", "a.jpg"]
  assert labelme.image_candidates("a.json", "x/a.jpg", True) == ["a.jpg"]


def test_head_detection_is_specific():
  """A 5.x head cut inside a long first polygon is LabelMe; COCO, Roboflow COCO, a list and a
  JSON with `shapes` of something else are not."""
  im = lm_layouts.sample.SampleImage("a.jpg", 640, 480, "jpeg", [], "train", 1)
  long_polygon = lm_layouts._shape("5.5.0", "a", [[float(i), 2.0] for i in range(5000)],
                                   "polygon")
  text = lm_layouts.labelme_json(im, "a.jpg", [long_polygon]).encode()
  assert len(text) > labelme.DETECT_HEAD_BYTES
  head = text[:labelme.DETECT_HEAD_BYTES]
  assert labelme.head_keys(head) == (["version", "flags", "shapes"], ["label", "points"])
  assert labelme.is_labelme_head(head)
  for version in lm_layouts.VERSIONS:
    assert labelme.is_labelme_head(lm_layouts.labelme_json(im, "a.jpg", [], version).encode())
  assert not labelme.is_labelme_head(b'{"info": {}, "images": [], "annotations": []}')
  assert not labelme.is_labelme_head(b'[{"shapes": [], "imagePath": "a"}]')
  assert not labelme.is_labelme_head(b'{"shapes": [{"type": "circle", "r": 1}]}')
  assert not labelme.is_labelme_head(b"not json at all")


# ---------------------------------------------------------------------------------------------
# Pipelines


def _mask_of(png: bytes) -> np.ndarray:
  with Image.open(io.BytesIO(png)) as image:
    return np.array(image)


@pytest.mark.e2e
def test_labelme_5_beside_images_detected_and_read_back(dataset, tmp_path, capsys):
  """labelme's default: each JSON next to its image, imageData embedded, rectangles in both
  corner orders, diamonds and grouped halves: --format auto finds it; every image back with
  its bytes, size and boxes; sorted names -> 1..N; split folders are not splits of a plain
  folder (one --input = train)."""
  ds = dataset
  root = lm_layouts.write_labelme(ds.images, ds.image_dir, tmp_path / "lm", polygons=True,
                                  groups=True, image_data=True)
  run = convert(["--input", str(root), "--output", str(tmp_path / "out"), RUNNER], capsys)
  assert run.code == 0, run.stderr
  # train/ and val/ are split folders: read as an export, one split per folder
  assert "detected: labelme (split folders train, val with LabelMe JSONs)" in run.stdout
  assert run.manifest["format"] == "labelme"
  ids = lm_layouts.label_ids(ds.images)
  assert run.manifest["label_map"] == ids
  layouts.check_od_examples(run, ds.images, ds.image_dir, ids)
  # each split folder is its image root: the key is the name inside it
  assert {e["filename"] for e in run.examples} == {im.file_name for im in ds.images}
  assert run.errors == []


@pytest.mark.e2e
def test_side_by_side_folders_and_versions(small_dataset, tmp_path, capsys):
  """images/ + annotations/ with imagePath ../images/NAME (labelme 3.x, 4.x and 5.x files
  mixed): the parent folder as --input reads all; the annotations folder alone refuses
  ../ (path_traversal, naming what to give) unless --images points at the images."""
  ds = small_dataset
  root = tmp_path / "lm"
  for i, version in enumerate(lm_layouts.VERSIONS):
    lm_layouts.write_labelme(ds.images[i::3], ds.image_dir, root, version,
                             layout="side_by_side", polygons=True, groups=True)
  run = convert(["--input", str(root), "--output", str(tmp_path / "out"), RUNNER], capsys)
  assert run.code == 0, run.stderr
  assert "detected: labelme (LabelMe JSONs)" in run.stdout
  ids = lm_layouts.label_ids(ds.images)
  layouts.check_od_examples(run, ds.images, ds.image_dir, ids, split_of=lambda im: "train")
  assert {e["filename"] for e in run.examples} == {f"images/{im.file_name}"
                                                   for im in ds.images}
  assert run.errors == []
  # the annotations folder alone: ../images leaves it
  alone = convert(["--format", "labelme", "--input", str(root / "annotations"), "--output",
                   str(tmp_path / "out2"), RUNNER])
  assert alone.code != 0
  assert sorted(e["key"] for e in alone.errors) == sorted(
      f"../images/{im.file_name}" for im in ds.images)
  assert {(e["reason"], e["level"]) for e in alone.errors} == {("path_traversal", "image")}
  assert "give the folder holding both" in alone.errors[0]["message"]
  # ... or with --images: found by base name
  given = convert(["--format", "labelme", "--input", str(root / "annotations"), "--images",
                   str(root / "images"), "--output", str(tmp_path / "out3"), RUNNER])
  assert given.code == 0 and given.errors == []
  layouts.check_od_examples(given, ds.images, ds.image_dir, ids, split_of=lambda im: "train")


@pytest.mark.e2e
def test_bad_files_shapes_and_images_become_error_records(small_dataset, tmp_path):
  """A malformed JSON and a COCO JSON in the folder (file), a missing image and one whose
  imageData is not base64 (image), a mixed group and a bad shape (object), a circle and a
  linestrip (warning): each reported with its key; every other image converted with its
  boxes, the one only in imageData too (its bytes decoded from the JSON)."""
  ds = small_dataset
  root = lm_layouts.write_labelme(ds.images, ds.image_dir, tmp_path / "lm", layout="beside")
  boxed = [im for im in ds.images if im.boxes]
  keep = list(ds.images)
  # a file cut short, and a COCO file someone left there
  (root / "train" / "broken.json").write_text('{"version": "5.5.0", "shapes": [', "utf-8")
  shutil.copy(ds.coco_file("train"), root / "train" / "instances.json")
  # the image of one JSON deleted, its bytes only in imageData
  gone = boxed[0]
  folder = root / gone.split
  data = (folder / gone.file_name).read_bytes()
  (folder / gone.file_name).unlink()
  doc = json.loads((folder / f"{lm_layouts.stem(gone.file_name)}.json").read_text("utf-8"))
  doc["imageData"] = base64.b64encode(data).decode()
  (folder / f"{lm_layouts.stem(gone.file_name)}.json").write_text(json.dumps(doc), "utf-8")
  # another one whose imageData is broken
  broken = boxed[3]
  (root / broken.split / broken.file_name).unlink()
  broken_json = root / broken.split / f"{lm_layouts.stem(broken.file_name)}.json"
  doc = json.loads(broken_json.read_text("utf-8"))
  doc["imageData"] = "not base64 at all!"
  broken_json.write_text(json.dumps(doc), "utf-8")
  keep.remove(broken)
  # another image deleted without imageData: locate reports it, naming the JSON
  missing = boxed[1]
  (root / missing.split / missing.file_name).unlink()
  keep.remove(missing)
  # extra shapes on a third image: a circle, a linestrip, a mixed group, one bad shape
  extra = boxed[2]
  path = root / extra.split / f"{lm_layouts.stem(extra.file_name)}.json"
  doc = json.loads(path.read_text("utf-8"))
  doc["shapes"] += [_shape("cat", [[1, 1], [5, 5]], "circle"),
                    _shape("cat", [[1, 1], [5, 5], [9, 1]], "linestrip"),
                    _shape("cat", [[1, 1], [5, 5]], group_id=9),
                    _shape("dog", [[6, 6], [8, 8]], group_id=9),
                    _shape("dog", [[6, 6]], "polygon"),
                    _shape("__ignore__", [[0, 0], [9, 9]])]
  path.write_text(json.dumps(doc, indent=2), "utf-8")
  # a file-level error (not_labelme) fails the run unless --max-error-rate accepts
  # rejections; a broken LabelMe JSON costs its one image (image level)
  run = convert(["--format", "labelme", "--input", str(root), "--max-error-rate", "1",
                 "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0
  ids = lm_layouts.label_ids(ds.images)
  layouts.check_od_examples(run, keep, ds.image_dir, ids, split_of=lambda im: "train")
  got = sorted((e["reason"], e["level"], e["key"], e["source"]) for e in run.errors)
  extra_key, extra_src = f"{extra.split}/{extra.file_name}", str(path)
  assert got == sorted([
      ("malformed_json", "image", str(root / "train" / "broken.json"),
       str(root / "train" / "broken.json")),
      ("not_labelme", "file", str(root / "train" / "instances.json"),
       str(root / "train" / "instances.json")),
      ("bad_image_data", "image", f"{broken.split}/{broken.file_name}", str(broken_json)),
      ("missing_image", "image", f"{missing.split}/{missing.file_name}",
       str(root / missing.split / f"{lm_layouts.stem(missing.file_name)}.json")),
      ("unsupported_shape", "warning", extra_key, extra_src),
      ("unsupported_shape", "warning", extra_key, extra_src),
      ("group_labels_differ", "object", extra_key, extra_src),
      ("malformed_shape", "object", extra_key, extra_src)])
  messages = " ".join(e["message"] for e in run.errors_where(reason="unsupported_shape"))
  assert "'circle'" in messages and "'linestrip'" in messages and extra_src in messages
  assert run.by_filename()[f"{gone.split}/{gone.file_name}"]["image/encoded"] == data
  assert run.manifest["errors"]["by_level"] == {"file": 1, "image": 3, "object": 2,
                                                "warning": 2}


def _set(path, **fields) -> None:
  doc = json.loads(path.read_text("utf-8"))
  doc.update(fields)
  path.write_text(json.dumps(doc, indent=2), "utf-8")


@pytest.mark.e2e
def test_image_data_is_the_image_whenever_present(small_dataset, tmp_path):
  """labelme's rule (LabelFile.load): imageData that is not null is the image, whatever
  imagePath names. A JSON whose imagePath names the JSON itself (labelme's tutorial
  apc2016_obj3.json) and one whose imagePath names another image that exists both give their
  embedded image, read back pixel for pixel; an empty imageData is bad_image_data though its
  file is there; imageData null reads the file."""
  ds = small_dataset
  root = lm_layouts.write_labelme(ds.images, ds.image_dir, tmp_path / "lm", layout="beside")
  itself, other, empty = [im for im in ds.images if im.boxes][:3]
  pictures = {}
  for im, color in ((itself, (250, 200, 10)), (other, (20, 220, 120))):
    pictures[im.file_name] = solid("RGB", (im.width, im.height), color)
    path = root / im.split / f"{lm_layouts.stem(im.file_name)}.json"
    _set(path, imageData=base64.b64encode(png(pictures[im.file_name].size, color=color)).decode())
  _set(root / itself.split / f"{lm_layouts.stem(itself.file_name)}.json",
       imagePath=f"{lm_layouts.stem(itself.file_name)}.json")
  empty_json = root / empty.split / f"{lm_layouts.stem(empty.file_name)}.json"
  _set(empty_json, imageData="")
  run = convert(["--format", "labelme", "--input", str(root), "--output",
                 str(tmp_path / "out"), RUNNER])
  assert run.code == 0, run.stderr
  assert [(e["reason"], e["level"], e["key"], e["source"]) for e in run.errors] == [
      ("bad_image_data", "image", f"{empty.split}/{empty.file_name}", str(empty_json))]
  rest = [im for im in ds.images if im not in (itself, other, empty)]
  written = run.by_filename()
  files_only = dataclasses.replace(run, examples=[written[f"{im.split}/{im.file_name}"]
                                                  for im in rest])
  layouts.check_od_examples(files_only, rest, ds.image_dir, run.manifest["label_map"],
                            split_of=lambda im: "train")
  keys = [(itself, f"{itself.split}/{lm_layouts.stem(itself.file_name)}"),
          (other, f"{other.split}/{other.file_name}")]
  assert sorted(written) == sorted([f"{im.split}/{im.file_name}" for im in rest]
                                   + [key for _, key in keys])
  for im, key in keys:
    ex = written[key]
    assert ex["image/format"] == b"png"
    assert np.array_equal(np.array(Image.open(io.BytesIO(ex["image/encoded"]))),
                          np.array(pictures[im.file_name]))
    assert len(ex["image/object/class/text"]) == len(im.boxes)


@pytest.mark.e2e
def test_a_file_of_too_many_shapes_rejects_its_image(small_dataset, tmp_path):
  """MAX_OBJECTS_PER_IMAGE + 1 shapes (the real bound): that JSON's image is rejected
  (too_many_objects, image level, keyed by the JSON); every other image is converted."""
  ds = small_dataset
  root = lm_layouts.write_labelme(ds.images, ds.image_dir, tmp_path / "lm", layout="beside")
  crowded = ds.images[0]
  path = root / crowded.split / f"{lm_layouts.stem(crowded.file_name)}.json"
  _set(path, shapes=[_shape("cat", [[1, 1], [5, 5]])] * (MAX_OBJECTS_PER_IMAGE + 1))
  run = convert(["--format", "labelme", "--input", str(root), "--output",
                 str(tmp_path / "out"), RUNNER])
  assert run.code == 0, run.stderr
  assert [(e["reason"], e["level"], e["key"]) for e in run.errors] == [
      ("too_many_objects", "image", str(path))]
  rest = [im for im in ds.images if im is not crowded]
  layouts.check_od_examples(run, rest, ds.image_dir, run.manifest["label_map"],
                            split_of=lambda im: "train")


@pytest.mark.e2e
def test_masks_of_polygons_rectangles_and_groups(small_dataset, tmp_path):
  """--include-masks: a diamond's mask is set at its centre and clear in the box's corners; a
  rectangle fills its box; a group's mask is the union of its two halves (its middle set)."""
  ds = small_dataset
  im = ds.images[0]
  root = lm_layouts.write_labelme([im], ds.image_dir, tmp_path / "lm")
  path = root / im.split / f"{lm_layouts.stem(im.file_name)}.json"
  doc = json.loads(path.read_text("utf-8"))
  w, h = im.width, im.height
  x0, y0, x1, y1 = w * 0.2, h * 0.2, w * 0.6, h * 0.8  # a big diamond and a grouped pair
  doc["shapes"] = [
      _shape("cat", lm_layouts.diamond(x0, y0, x1, y1), "polygon"),
      _shape("dog", [[w * 0.65, h * 0.1], [w * 0.8, h * 0.5]], group_id=1),
      _shape("dog", [[w * 0.8, h * 0.1], [w * 0.95, h * 0.5]], group_id=1)]
  path.write_text(json.dumps(doc), "utf-8")
  run = convert(["--format", "labelme", "--input", str(root), "--include-masks", "--output",
                 str(tmp_path / "out"), RUNNER])
  assert run.code == 0 and run.errors == []
  [ex] = run.examples
  assert [t.decode() for t in ex["image/object/class/text"]] == ["cat", "dog"]
  diamond_mask, group_mask = (_mask_of(p) for p in ex["image/object/mask"])
  assert diamond_mask.shape == group_mask.shape == (h, w)
  assert set(np.unique(diamond_mask)) <= {0, 1}
  cx, cy = int((x0 + x1) / 2), int((y0 + y1) / 2)
  assert diamond_mask[cy, cx] == 1
  for x, y in ((x0 + 2, y0 + 2), (x1 - 2, y0 + 2), (x0 + 2, y1 - 2), (x1 - 2, y1 - 2)):
    assert diamond_mask[int(y), int(x)] == 0  # inside the box, outside the diamond
  outline = [v for point in lm_layouts.diamond(x0, y0, x1, y1) for v in point]
  expected = masks.rasterize_polygon(outline, w, h)  # the reference rasterizer's pixels
  assert np.array_equal(diamond_mask, expected)
  assert group_mask[int(h * 0.3), int(w * 0.8)] == 1  # where the halves meet
  assert group_mask[int(h * 0.3), int(w * 0.7)] == 1 and group_mask[int(h * 0.3),
                                                                    int(w * 0.9)] == 1
  assert group_mask[int(h * 0.7), int(w * 0.8)] == 0 and group_mask[int(h * 0.3),
                                                                    int(w * 0.5)] == 0
  assert abs(ex["image/object/bbox/xmin"][1] - 0.65) < 1e-5
  assert abs(ex["image/object/bbox/xmax"][1] - 0.95) < 1e-5


@pytest.mark.e2e
def test_split_dirs_and_windows_paths(small_dataset, tmp_path):
  """SPLIT=DIR inputs give their splits; imagePath with Windows backslashes is read."""
  ds = small_dataset
  root = lm_layouts.write_labelme(ds.images, ds.image_dir, tmp_path / "lm", "4.6.0",
                                  layout="windows")
  splits = sorted({im.split for im in ds.images})
  run = convert(["--format", "labelme", *[f"--input={s}={root / s}" for s in splits],
                 "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0 and run.errors == []
  layouts.check_od_examples(run, ds.images, ds.image_dir, lm_layouts.label_ids(ds.images))


@pytest.mark.e2e
def test_other_formats_are_not_detected_as_labelme(dataset, tmp_path):
  """Every other fixture keeps its own format under --format auto (LabelMe's detect says
  nothing about them), and LabelMe folders are not claimed by the others."""
  from beam_tfrecord.sources import detect
  ds = dataset
  sub = ds.images[:4]
  fixtures = {
      "coco": ds.coco_file("train"), "voc": ds.voc_dir,
      "yolo": layouts.write_ultralytics(sub, ds.image_dir, tmp_path / "yolo"),
      "yolo-darknet": layouts.write_darknet(sub, ds.image_dir, tmp_path / "darknet"),
      "voc-raccoon": layouts.write_raccoon(sub, ds.image_dir, tmp_path / "raccoon"),
      "folders": layouts.write_class_folders(sub, ds.image_dir, tmp_path / "folders"),
      "dataset-root": ds.root}
  for kind in ("coco", "csv", "voc", "yolo"):
    fixtures[f"roboflow-{kind}"] = layouts.write_roboflow(sub, ds.image_dir,
                                                          tmp_path / f"rf-{kind}", kind)
  for name, path in fixtures.items():
    assert labelme.detect(str(path)) is None, name
    if name != "dataset-root":  # (several formats there: its own test's business)
      assert detect.detect([str(path)]).format != "labelme", name
  for layout in ("beside", "side_by_side"):
    root = lm_layouts.write_labelme(sub, ds.image_dir, tmp_path / f"lm-{layout}",
                                    layout=layout)
    assert labelme.detect(str(root)) == "LabelMe JSONs"
    found = detect.detect([str(root)])
    assert found.format == "labelme", layout


@pytest.mark.e2e
def test_bad_command_lines_are_one_line_and_exit_2(small_dataset, tmp_path, capsys):
  ds = small_dataset
  root = lm_layouts.write_labelme(ds.images, ds.image_dir, tmp_path / "lm")
  (tmp_path / "empty").mkdir()
  (tmp_path / "empty" / "a.jpg").write_bytes(b"x")
  cases = {
      "no such directory": ["--input", str(tmp_path / "nowhere")],
      "holds no .json file": ["--input", str(tmp_path / "empty")],
      "takes one --input": ["--input", str(root / "train"), "--input", str(root / "val")],
      "is a file, not a directory": ["--input", str(next(root.rglob("*.json")))],
      "--images": ["--input", str(root), "--images", str(tmp_path / "nowhere")],
      "--csv-normalized applies": ["--input", str(root), "--csv-normalized"],
  }
  for expected, args in cases.items():
    run = convert(["--format", "labelme", *args, "--output", str(tmp_path / "out"), RUNNER],
                  capsys)
    assert run.code == 2, (expected, run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], (expected, lines)
  assert not (tmp_path / "out").exists()
