"""--schema deeplab end to end: a Pascal VOC segmentation dataset (SegmentationClass/ palette
PNGs, ImageSets/Segmentation lists, written as VOC ships them: tests/voc_segmentation.py) and
COCO, LabelMe and CVAT polygons converted by the CLI, then read back with DeepLab's own parsing.

DeepLab's parsing is `Dataset._parse_function` of research/deeplab/datasets/data_generator.py
in tensorflow/models at commit e2e441f88420deb1a58c3e420fc26a8175c58d34, replicated below with
its TF 2 names (tf.io.FixedLenFeature, tf.io.parse_single_example, tf.io.is_jpeg): the same
feature spec and defaults, the image decoded with channels=3 and the label with channels=1 by
its `_decode_image`, the label's shape checked and set to [height, width, 1]. The keys of its
`sample` are deeplab/common.py's. Every decoded mask is compared pixel by pixel with the
source PNG's palette indices (VOC) or with pycocotools' rasterization painted in order
(polygons; crowds 255).
"""
from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Dict

import bad_data
import numpy as np
import pytest
import voc_segmentation as vs
from PIL import Image, ImageFilter

from beam_tfrecord import sample as samples

pytestmark = pytest.mark.e2e

# deeplab/common.py
IMAGE, IMAGE_NAME, HEIGHT, WIDTH, LABELS_CLASS = (
    "image", "image_name", "height", "width", "labels_class")
DEEPLAB_KEYS = {"image/encoded", "image/filename", "image/format", "image/height",
                "image/width", "image/channels", "image/segmentation/class/encoded",
                "image/segmentation/class/format"}


def deeplab_parse_function(example_proto):
  """data_generator.Dataset._parse_function (see the module docstring), split_name != test."""
  import tensorflow as tf

  def _decode_image(content, channels):
    return tf.cond(
        tf.io.is_jpeg(content),
        lambda: tf.io.decode_jpeg(content, channels),
        lambda: tf.io.decode_png(content, channels))

  features = {
      "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
      "image/filename": tf.io.FixedLenFeature((), tf.string, default_value=""),
      "image/format": tf.io.FixedLenFeature((), tf.string, default_value="jpeg"),
      "image/height": tf.io.FixedLenFeature((), tf.int64, default_value=0),
      "image/width": tf.io.FixedLenFeature((), tf.int64, default_value=0),
      "image/segmentation/class/encoded": tf.io.FixedLenFeature((), tf.string,
                                                                default_value=""),
      "image/segmentation/class/format": tf.io.FixedLenFeature((), tf.string,
                                                               default_value="png"),
  }
  parsed_features = tf.io.parse_single_example(example_proto, features)
  image = _decode_image(parsed_features["image/encoded"], channels=3)
  label = _decode_image(parsed_features["image/segmentation/class/encoded"], channels=1)
  image_name = parsed_features["image/filename"]
  sample = {IMAGE: image, IMAGE_NAME: image_name, HEIGHT: parsed_features["image/height"],
            WIDTH: parsed_features["image/width"]}
  if label.get_shape().ndims == 2:
    label = tf.expand_dims(label, 2)
  elif label.get_shape().ndims == 3 and label.shape.dims[2] == 1:
    pass
  else:
    raise ValueError("Input label shape must be [height, width], or [height, width, 1].")
  label.set_shape([None, None, 1])
  sample[LABELS_CLASS] = label
  return sample


def read_like_deeplab(output: str, split: str) -> Dict[str, dict]:
  """{image name: DeepLab's sample as numpy} of a split, through its _FILE_PATTERN '%s-*'."""
  import tensorflow as tf
  files = sorted(glob.glob(os.path.join(output, f"{split}-*")))
  samples_ = {}
  for parsed in tf.data.TFRecordDataset(files).map(deeplab_parse_function):
    found = {k: v.numpy() for k, v in parsed.items()}
    samples_[found[IMAGE_NAME].decode()] = found
  return samples_


def record_keys(output: str) -> set:
  import tensorflow as tf
  keys = set()
  for path in glob.glob(os.path.join(output, "*.tfrecord")):
    for record in tf.data.TFRecordDataset(path):
      keys |= set(tf.train.Example.FromString(record.numpy()).features.feature)
  return keys


# ---------------------------------------------------------------------------------------------
# Pascal VOC: SegmentationClass/ palette PNGs
# ---------------------------------------------------------------------------------------------

# images that must be rejected, beside the good ones of voc_segmentation.IMAGES
BAD = {
    "2007_000129": "class_mask_size_mismatch",   # its PNG is larger than its JPEG
    "2007_000170": "unknown_class_index",        # palette index 42
    "2007_000187": "bad_class_mask",             # RGB with colours outside VOC's map
    "2007_000241": "missing_annotation",         # listed, no PNG
}


def _voc_with_bad_images(root: Path) -> Path:
  voc = vs.write_voc(root)
  seg, jpegs = voc / "SegmentationClass", voc / "JPEGImages"
  triangle = [(2, 2), (20, 2), (10, 20)]
  vs.photo((32, 24), 1).save(jpegs / "2007_000129.jpg")
  vs.class_png((33, 24), [(1, triangle)]).save(seg / "2007_000129.png")
  vs.photo((32, 24), 2).save(jpegs / "2007_000170.jpg")
  vs.class_png((32, 24), [(42, triangle)]).save(seg / "2007_000170.png")
  vs.photo((32, 24), 3).save(jpegs / "2007_000187.jpg")
  # an editor's antialiasing blends VOC's colours at the outlines: no index for those
  vs.rgb_class_png((32, 24), [(3, triangle)]).filter(ImageFilter.SMOOTH).save(
      seg / "2007_000187.png")
  # saved as RGB in VOC's colours (Datumaro's VOC export): read as the indices
  vs.photo((40, 30), 5).save(jpegs / "2007_000250.jpg")
  vs.rgb_class_png((40, 30), [(3, [(2, 2), (30, 4), (12, 26)]),
                              (7, [(20, 10), (38, 12), (36, 28), (22, 27)])]).save(
      seg / "2007_000250.png")
  vs.photo((32, 24), 4).save(jpegs / "2007_000241.jpg")
  train = voc / "ImageSets" / "Segmentation" / "train.txt"
  train.write_text(train.read_text() + "".join(f"{stem}\n" for stem in sorted(BAD)) +
                   "2007_000250\n")
  return voc


@pytest.fixture(scope="module")
def voc_run(tmp_path_factory):
  root = tmp_path_factory.mktemp("deeplab_voc")
  voc = _voc_with_bad_images(root)
  run = bad_data.convert([f"--input={voc}", "--schema", "deeplab",
                          "--output", str(root / "out")])
  assert run.code == 0, (run.stdout, run.stderr)
  return voc, run


def test_voc_masks_read_by_deeplab_equal_the_source_pngs(voc_run):
  voc, run = voc_run
  expected = {"train": ["2007_000032", "2007_000063", "2007_000250"],
              "val": ["2007_000039", "2007_000068"]}
  assert sorted(run.manifest["splits"]) == ["train", "val"]
  for split, stems in expected.items():
    read = read_like_deeplab(run.output, split)
    assert sorted(read) == [f"{stem}.jpg" for stem in stems]
    for stem in stems:
      found = read[f"{stem}.jpg"]
      source = vs.indices(voc / "SegmentationClass" / f"{stem}.png")
      label = found[LABELS_CLASS]
      assert label.shape == source.shape + (1,)
      np.testing.assert_array_equal(label[:, :, 0], source, err_msg=stem)
      jpeg = (voc / "JPEGImages" / f"{stem}.jpg").read_bytes()
      np.testing.assert_array_equal(found[IMAGE], bad_data.decode(jpeg, channels=3))
      assert (found[HEIGHT], found[WIDTH]) == source.shape
  assert {v for stem in ("2007_000032", "2007_000063") for v in np.unique(
      vs.indices(voc / "SegmentationClass" / f"{stem}.png"))} == {0, 1, 8, 12, 15, 255}
  rgb = Image.open(voc / "SegmentationClass" / "2007_000250.png")
  assert rgb.mode == "RGB" and set(np.unique(vs.indices(rgb.filename))) == {0, 3, 7, 255}


def test_voc_records_hold_build_data_s_keys_and_voc_s_classes(voc_run):
  import tensorflow as tf
  _, run = voc_run
  assert run.manifest["schema"] == "deeplab"
  assert set(run.manifest["features"]) == DEEPLAB_KEYS == record_keys(run.output)
  assert run.manifest["label_map"] == {name: i for i, name in enumerate(vs.VOC_CLASSES, 1)}
  path = sorted(glob.glob(os.path.join(run.output, "train-*.tfrecord")))[0]
  record = next(iter(tf.data.TFRecordDataset(path))).numpy()
  feature = tf.train.Example.FromString(record).features.feature
  assert feature["image/format"].bytes_list.value == [b"jpeg"]
  assert feature["image/channels"].int64_list.value == [3]
  assert feature["image/segmentation/class/format"].bytes_list.value == [b"png"]
  # the classes counted are those each mask holds
  assert run.manifest["splits"]["train"]["classes"] == {
      "aeroplane": 1, "bird": 1, "car": 1, "cat": 1, "dog": 1, "person": 1}


def test_voc_pngs_that_do_not_fit_are_reported(voc_run):
  _, run = voc_run
  found = {e["key"].split(".")[0]: (e["reason"], e["level"]) for e in run.errors}
  assert found == {stem: (reason, "image") for stem, reason in BAD.items()}
  unknown = next(e for e in run.errors if e["reason"] == "unknown_class_index")
  assert "42" in unknown["message"]
  colours = next(e for e in run.errors if e["reason"] == "bad_class_mask")
  assert "outside VOC's colour map" in colours["message"]
  assert run.manifest["errors"]["by_reason"] == {reason: 1 for reason in BAD.values()}


def test_voc_max_side_resizes_masks_with_nearest_neighbour(tmp_path):
  voc = vs.write_voc(tmp_path)
  run = bad_data.convert([f"--input={voc}", "--schema=deeplab", "--max-side=20",
                          "--output", str(tmp_path / "out")])
  assert run.code == 0
  for split in ("train", "val"):
    for name, found in read_like_deeplab(run.output, split).items():
      source = Image.open(voc / "SegmentationClass" / name.replace(".jpg", ".png"))
      size = (found[WIDTH], found[HEIGHT])
      assert max(size) == 20 and found[IMAGE].shape[:2] == size[::-1]
      expected = np.asarray(source.resize(size, Image.Resampling.NEAREST))
      np.testing.assert_array_equal(found[LABELS_CLASS][:, :, 0], expected, err_msg=name)


def test_show_draws_each_class_in_its_colour(voc_run):
  from beam_tfrecord.readback import show
  voc, run = voc_run
  grid = show.show(run.output, split="val", n=4)
  tile = {t["name"]: t for t in grid.info["tiles"]}["2007_000039.jpg"]
  # tvmonitor (20) fills the rectangle (10, 10)-(38, 50) of the 48x64 image
  cx, cy = (tile["x"] + round(24 * tile["scale"]), tile["y"] + round(30 * tile["scale"]))
  picture = Image.open(voc / "JPEGImages" / "2007_000039.jpg").convert("RGB")
  scaled = picture.resize((round(48 * tile["scale"]), round(64 * tile["scale"])),
                          Image.BILINEAR)
  under = scaled.getpixel((round(24 * tile["scale"]), round(30 * tile["scale"])))
  color = show.box_color("tvmonitor", run.manifest["label_map"])
  blend = tuple(round(g * (1 - show.MASK_ALPHA) + c * show.MASK_ALPHA)
                for g, c in zip(under, color))
  assert all(abs(a - b) <= 2 for a, b in zip(grid.getpixel((cx, cy)), blend))
  # background (0) is not drawn over
  bx, by = (tile["x"] + round(2 * tile["scale"]), tile["y"] + round(2 * tile["scale"]))
  assert grid.getpixel((bx, by)) == scaled.getpixel((round(2 * tile["scale"]),
                                                     round(2 * tile["scale"])))


def test_inspect_counts_each_class_of_a_mask_as_an_object(voc_run, capsys):
  """`inspect` on deeplab records: an image's objects are the classes its mask holds (ignore
  aside), each with the box around its pixels, computed here from the source PNGs."""
  from beam_tfrecord import cli
  voc, run = voc_run
  assert cli.main(["inspect", run.output, "--json"]) == 0
  doc = json.loads(capsys.readouterr().out)
  names = {i: name for i, name in enumerate(vs.VOC_CLASSES, 1)}
  for split, stems in {"train": ["2007_000032", "2007_000063", "2007_000250"],
                       "val": ["2007_000039", "2007_000068"]}.items():
    objects, bands, classes = [], {"small": 0, "medium": 0, "large": 0}, {}
    for stem in stems:
      source = vs.indices(voc / "SegmentationClass" / f"{stem}.png")
      values = [int(v) for v in np.unique(source) if v not in (0, 255)]
      objects.append(len(values))
      for value in values:
        ys, xs = np.nonzero(source == value)
        area = (xs.max() + 1 - xs.min()) * (ys.max() + 1 - ys.min())
        bands["small" if area < 32 ** 2 else "medium" if area < 96 ** 2 else "large"] += 1
        classes[names[value]] = classes.get(names[value], 0) + 1
    got = doc["splits"][split]
    assert got["objects"] == sum(objects) and got["box_sizes"] == bands, split
    assert got["objects_per_image"]["max"] == max(objects)
    assert {c["class"]: c["objects"] for c in doc["classes"] if c["split"] == split} == classes
  assert doc["splits"]["train"]["objects"] == 6  # 2 + 2 + 2 classes


# ---------------------------------------------------------------------------------------------
# Polygons: COCO (crowds as RLE), LabelMe, CVAT
# ---------------------------------------------------------------------------------------------

def painted(width: int, height: int, layers) -> np.ndarray:
  """Each (0/1 mask, value) painted in order over background."""
  canvas = np.zeros((height, width), np.uint8)
  for mask, value in layers:
    canvas[mask == 1] = value
  return canvas


def polygon_mask(points, width: int, height: int) -> np.ndarray:
  """One polygon [(x, y), ...] as pycocotools rasterizes it (frPyObjects, decode)."""
  from pycocotools import mask as coco_mask
  flat = [[float(v) for xy in points for v in xy]]
  return coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(flat, height, width)))


def test_coco_polygons_and_crowds_are_painted_like_pycocotools(tmp_path):
  """COCO.annToMask of each annotation, in the file's order; crowds (iscrowd 1, COCO's
  uncompressed RLE) as 255; the broken and the missing segmentation are object errors."""
  from pycocotools.coco import COCO
  from coco_masks import H, W, make_coco
  annotations = make_coco(tmp_path / "data")
  run = bad_data.convert([f"--input={annotations}", f"--images={annotations.parent / 'images'}",
                          "--schema=deeplab",
                          "--output", str(tmp_path / "out")])
  assert run.code == 0
  coco = COCO(str(annotations))
  read = read_like_deeplab(run.output, "train")
  assert sorted(read) == ["a.jpg", "b.png"]
  for image in coco.dataset["images"]:
    anns = [a for a in coco.dataset["annotations"] if a["image_id"] == image["id"]
            and a["id"] not in (105, 106)]  # 105: broken polygon, 106: none
    expected = painted(W, H, [(coco.annToMask(a), 255 if a["iscrowd"] else a["category_id"])
                              for a in anns])
    got = read[image["file_name"]][LABELS_CLASS][:, :, 0]
    np.testing.assert_array_equal(got, expected, err_msg=image["file_name"])
  assert 255 in read["b.png"][LABELS_CLASS]  # the crowd region is ignore
  assert sorted((e["reason"], e["level"]) for e in run.errors) == [
      ("bad_segmentation", "object"), ("missing_segmentation", "object")]


# Two overlapping polygons an image: the later one must win where they overlap.
SIZE = (48, 36)
POLYGONS = [("dog", [(2, 2), (30, 2), (30, 30), (2, 30)]),
            ("cat", [(16, 10), (46, 10), (40, 34), (20, 34)]),
            ("bird", [(4, 20), (14, 20), (9, 35)])]
IDS = {"bird": 1, "cat": 2, "dog": 3}  # sorted names, 1..N


def _expected_overlaps() -> np.ndarray:
  expected = painted(*SIZE, [(polygon_mask(points, *SIZE), IDS[label])
                             for label, points in POLYGONS])
  assert expected[20, 25] == IDS["cat"] and expected[25, 9] == IDS["bird"]  # later wins
  return expected


def test_coco_overlaps_are_painted_in_file_order_with_crowds_as_ignore(tmp_path):
  """The annotations in file order: dog, a crowd region (uncompressed RLE) over it, then cat
  and bird over both."""
  from coco_masks import _rle
  folder = tmp_path / "coco"
  folder.mkdir()
  vs.photo(SIZE, 0).save(folder / "shapes.jpg")
  crowd = np.zeros(SIZE[::-1], np.uint8)
  crowd[5:25, 10:44] = 1
  segmentations = [("dog", [[float(v) for xy in POLYGONS[0][1] for v in xy]], 0),
                   ("cat", _rle(crowd, compressed=False), 1),
                   *[(label, [[float(v) for xy in points for v in xy]], 0)
                     for label, points in POLYGONS[1:]]]
  names = {"dog": 3, "cat": 5, "bird": 7}
  doc = {"images": [{"id": 1, "file_name": "shapes.jpg", "width": SIZE[0], "height": SIZE[1]}],
         "annotations": [{"id": i, "image_id": 1, "category_id": names[label],
                          "segmentation": seg, "iscrowd": crowd_flag, "area": 1.0,
                          "bbox": [1.0, 1.0, 10.0, 10.0]}
                         for i, (label, seg, crowd_flag) in enumerate(segmentations, 1)],
         "categories": [{"id": i, "name": n} for n, i in names.items()]}
  (folder / "instances.json").write_text(json.dumps(doc))
  run = bad_data.convert([f"--input={folder / 'instances.json'}", "--schema=deeplab",
                          "--output", str(tmp_path / "out")])
  assert run.code == 0 and run.errors == []
  expected = painted(*SIZE, [(polygon_mask(POLYGONS[0][1], *SIZE), 3), (crowd, 255)] + [
      (polygon_mask(points, *SIZE), names[label]) for label, points in POLYGONS[1:]])
  assert {3, 5, 7, 255} <= set(np.unique(expected))
  got = read_like_deeplab(run.output, "train")["shapes.jpg"][LABELS_CLASS][:, :, 0]
  np.testing.assert_array_equal(got, expected)


def test_labelme_polygons_are_painted_later_over_earlier(tmp_path):
  from layouts_labelme import _shape, labelme_json
  folder = tmp_path / "labelme"
  folder.mkdir()
  vs.photo(SIZE, 0).save(folder / "shapes.jpg")
  im = samples.SampleImage("shapes.jpg", *SIZE, "jpeg", [], "train", 1)
  shapes = [_shape("5.5.0", label, [list(map(float, p)) for p in points], "polygon")
            for label, points in POLYGONS]
  (folder / "shapes.json").write_text(labelme_json(im, "shapes.jpg", shapes))
  run = bad_data.convert(["--format=labelme", f"--input={folder}", "--schema=deeplab",
                          "--output", str(tmp_path / "out")])
  assert run.code == 0 and run.errors == []
  assert run.manifest["label_map"] == IDS
  got = read_like_deeplab(run.output, "train")["shapes.jpg"][LABELS_CLASS][:, :, 0]
  np.testing.assert_array_equal(got, _expected_overlaps())


def test_cvat_polygons_are_painted_later_over_earlier(tmp_path):
  from layouts_cvat import polygon_attrs, write_cvat
  images = tmp_path / "images"
  images.mkdir()
  vs.photo(SIZE, 0).save(images / "shapes.jpg")
  im = samples.SampleImage("shapes.jpg", *SIZE, "jpeg", [], "train", 1)
  extra = {"shapes.jpg": [("polygon", polygon_attrs(label, points))
                          for label, points in POLYGONS]}
  xml = write_cvat([im], images, tmp_path / "cvat", labels=sorted(IDS), extra=extra)
  run = bad_data.convert(["--format=cvat", f"--input={xml}", "--schema=deeplab",
                          "--output", str(tmp_path / "out")])
  assert run.code == 0 and run.errors == []
  got = read_like_deeplab(run.output, "train")["shapes.jpg"][LABELS_CLASS][:, :, 0]
  np.testing.assert_array_equal(got, _expected_overlaps())
