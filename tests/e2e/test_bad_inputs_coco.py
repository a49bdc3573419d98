"""The COCO bad-input corpus: every input is converted correctly or reported with a reason.

One pipeline run (a module-scoped fixture) carries many cases; each case's outcome is asserted on
its own. The other corpora: test_bad_inputs_voc.py, test_bad_inputs_csv.py; whole-run options:
test_bad_inputs_run_options.py.
"""
from __future__ import annotations

import collections
import io
import json
import os

import bad_data as bd
import numpy as np
import pytest
from bad_checks import (CATEGORIES, DUPLICATE_WARNINGS, GOOD,
                        assert_marker_boxed, check_report_format, from_source)
from PIL import Image

from beam_tfrecord.records.model import InputError
from beam_tfrecord.storage import paths
from beam_tfrecord.write import images as images_mod

DROP = object()                     # marks a field to leave out of a COCO entry


# ============================================================================================
# COCO: the main corpus (one run, default options)

# file name -> (stage, allowed reasons): images rejected as a whole. Each has one GOOD box.
COCO_REJECTED = {
    "trunc_half.jpg": ("decode", {"truncated_image", "corrupt_image"}),
    "trunc_tail.jpg": ("decode", {"truncated_image", "corrupt_image"}),
    "trunc_tail.png": ("decode", {"truncated_image", "corrupt_image"}),
    "corrupt_header.jpg": ("decode", {"corrupt_image"}),
    "empty.jpg": ("decode", {"empty_file"}),
    "text.jpg": ("decode", {"unknown_format"}),
    "bomb.png": ("decode", {"decompression_bomb"}),
    "missing.jpg": ("locate", {"missing_image"}),
    "a_directory.jpg": ("locate", {"missing_image"}),
    # security: names that leave the image root
    "../outside/outside.jpg": ("locate", {"path_traversal"}),
    "sub/../../outside/outside.jpg": ("locate", {"path_traversal"}),
    "ABSOLUTE": ("locate", {"absolute_path"}),             # replaced by a real absolute path
    "file:///etc/passwd": ("locate", {"absolute_path"}),
    "gs://bucket/x.jpg": ("locate", {"absolute_path"}),
    "link_out.jpg": ("locate", {"symlink_escape"}),         # symlink to ../outside/outside.jpg
    "linkdir/outside.jpg": ("locate", {"symlink_escape"}),  # linkdir -> ../outside
    "nul\x00byte.jpg": ("locate", {"unsafe_path"}),
    "": ("parse", {"missing_filename"}),
}

# JPEG/PNG that must pass through byte for byte (file name -> bytes factory)
COCO_PASSTHROUGH = {
    "plain.jpg": lambda: bd.jpeg(),
    "png_named.jpg": lambda: bd.png(),
    "cmyk.jpg": lambda: bd.jpeg(mode="CMYK"),
    "gray.jpg": lambda: bd.jpeg(mode="L"),
    "png16_gray.png": lambda: bd.png(mode="I;16"),
    "png16_rgb.png": lambda: bd.png16_rgb(),
    "palette.png": lambda: bd.png(mode="P"),
    "palette_trns.png": lambda: bd.png(mode="P", transparency=0),
    "rgba.png": lambda: bd.png(mode="RGBA"),
    "la.png": lambda: bd.png(mode="LA"),
}
EXPECTED_CHANNELS = {"plain.jpg": 3, "png_named.jpg": 3, "cmyk.jpg": 3, "gray.jpg": 1,
                     "png16_gray.png": 1, "png16_rgb.png": 3, "palette.png": 3,
                     "palette_trns.png": 4, "rgba.png": 4, "la.png": 2}

COCO_REENCODED = ("other.gif", "animated.gif", "other.bmp", "other.webp", "other.tiff")

# EXIF photos, auto frame: (orientation, annotated size given as, box given in, format)
COCO_EXIF = {
    "exif3.jpg": (3, "displayed", "displayed", "JPEG"),
    "exif6_displayed.jpg": (6, "displayed", "displayed", "JPEG"),
    "exif6_stored.jpg": (6, "stored", "stored", "JPEG"),
    "exif8_displayed.jpg": (8, "displayed", "displayed", "JPEG"),
    "exif8_stored.jpg": (8, "stored", "stored", "JPEG"),
    "exif6_nosize.jpg": (6, None, "displayed", "JPEG"),
    "exif6_stored.png": (6, "stored", "stored", "PNG"),
}

UNICODE_NAMES = ("my photo (1).jpg", "ñandú 猫 [x] #1 'q'.jpg", "sub dir/naïve file.jpg",
                 "semi;colon,comma&amp.jpg", "e\u0301 decomposed.jpg")

# file name -> (extra bad box(es), object-level reasons). Each also has one GOOD box.
COCO_BOXES = {
    "box_zero.jpg": ([[10, 10, 0, 5]], ["bbox_empty"]),
    "box_negative.jpg": ([[10, 10, -5, 5]], ["bbox_empty"]),
    "box_outside.jpg": ([[100, 100, 10, 10]], ["bbox_outside"]),
    "box_outside_left.jpg": ([[-30, 5, 10, 10]], ["bbox_outside"]),
    "box_overflow.jpg": ([[1.5e308, 1, 1.5e308, 5]], ["bbox_not_finite"]),  # x + w = inf
    "box_partly_right.jpg": ([[50, 40, 30, 20]], []),    # clipped
    "box_partly_left.jpg": ([[-10, -5, 20, 15]], []),    # clipped
}
CLIPPED_IN_MAIN = 2

# Auxiliary COCO files in the same run (see CocoCorpus.write_aux for how each is broken)
AUX = ("truncated", "malformed", "nan", "inf")  # converted, reported per file
NOT_COCO = ("empty", "not_json", "no_sections")  # refused before running (exit 2)


class CocoCorpus:
  """Writes the main COCO corpus and remembers where every case went."""

  def __init__(self, root):
    self.root = str(root)
    self.images_dir = os.path.join(self.root, "images")
    self.outside = os.path.join(self.root, "outside", "outside.jpg")
    os.makedirs(self.images_dir)
    bd.write_bytes(self.outside, bd.jpeg(color=(1, 2, 3)))
    self.coco = bd.Coco(self.images_dir, CATEGORIES)
    self.coco.categories.append({"id": 99, "supercategory": "x"})  # no name: file level
    self.coco.categories += [{"id": 50, "name": "bird"}, {"id": 50, "name": "plane"}]
    self.next_id = 1
    self.ids = {}           # case name -> image id
    self.ann_index = {}     # case name -> index of its special annotation
    self.photos = {}

  def image(self, name, data=None, size=None, anns=(GOOD,), file_name=None, **extra):
    image_id = extra.pop("image_id", None) or self.next_id
    self.next_id += 1
    file_name = name if file_name is None else file_name
    width, height = size if size else (None, None)
    if data is not None and size is None:
      with Image.open(io.BytesIO(data)) as im:
        width, height = im.size
    self.coco.image(image_id, file_name, data, width, height, **extra)
    for category, bbox in anns:
      self.coco.ann(image_id, category, bbox)
    self.ids[name] = image_id
    return image_id

  def bad_ann(self, name, **fields):
    """An annotation of image `name` with fields replaced (DROP removes a field)."""
    entry = {"id": 10_000 + len(self.coco.annotations), "image_id": self.ids[name],
             "category_id": 1, "bbox": [4, 4, 20, 16], "iscrowd": 0}
    for key, value in fields.items():
      if value is DROP:
        entry.pop(key)
      else:
        entry[key] = value
    self.coco.annotations.append(entry)
    self.ann_index[name + ":" + ",".join(fields)] = len(self.coco.annotations) - 1
    return len(self.coco.annotations) - 1

  def build(self):
    r = self
    no_file = ("missing.jpg", "nul\x00byte.jpg", "", "../outside/outside.jpg",
               "sub/../../outside/outside.jpg", "file:///etc/passwd", "gs://bucket/x.jpg",
               "link_out.jpg", "linkdir/outside.jpg")
    for name in COCO_REJECTED:
      if name in no_file:  # names that do not lead to a file inside the root
        r.image(name, size=(64, 48))
      elif name == "ABSOLUTE":
        r.image(name, size=(64, 48), file_name=self.outside)
      elif name == "a_directory.jpg":
        os.makedirs(os.path.join(self.images_dir, name))
        r.image(name, size=(64, 48))
      else:
        data = {"trunc_half.jpg": lambda: bd.truncated_half(bd.jpeg((160, 120))),
                "trunc_tail.jpg": lambda: bd.truncated_tail(bd.jpeg()),
                "trunc_tail.png": lambda: bd.png()[:-12],
                "corrupt_header.jpg": lambda: b"\xff\xd8\xff\xe0" + b"\x13\x37garbage" * 20,
                "empty.jpg": lambda: b"",
                "text.jpg": lambda: b"this is a text file, not a JPEG\n" * 3,
                "bomb.png": lambda: bd.png_bomb()}[name]()
        size = (100_000, 100_000) if name == "bomb.png" else (64, 48)
        bd.write_bytes(os.path.join(self.images_dir, name), data)
        r.image(name, size=size)
    os.symlink(self.outside, os.path.join(self.images_dir, "link_out.jpg"))
    os.symlink(os.path.dirname(self.outside), os.path.join(self.images_dir, "linkdir"))

    for name, make in COCO_PASSTHROUGH.items():
      r.image(name, make())
    os.symlink(os.path.join(self.images_dir, "plain.jpg"),
               os.path.join(self.images_dir, "link_in.jpg"))
    r.image("link_in.jpg", size=(64, 48))
    for name, (data, _) in zip(COCO_REENCODED, bd.other_formats().values()):
      r.image(name, data)
    for name, (orientation, size_as, box_as, fmt) in COCO_EXIF.items():
      photo = bd.oriented_photo(orientation, fmt=fmt)
      self.photos[name] = photo
      size = {"displayed": photo.displayed_size, "stored": photo.stored_size,
              None: None}[size_as]
      box = photo.displayed_box if box_as == "displayed" else photo.stored_box
      bbox = [box[0], box[1], box[2] - box[0], box[3] - box[1]]
      bd.write_bytes(os.path.join(self.images_dir, name), photo.data)
      image_id = self.next_id
      self.next_id += 1
      self.coco.image(image_id, name, None, *(size or (None, None)))
      self.coco.ann(image_id, 2, bbox)
      self.ids[name] = image_id
    r.image("size_mismatch.jpg", bd.jpeg(), size=(100, 100))
    r.image("bad_zlib_unverified.png", bd.png_bad_zlib())

    # annotation-level problems: every image keeps its GOOD box
    for name in ("bbox_string.jpg", "bbox_short.jpg", "bbox_null.jpg", "bbox_bool.jpg",
                 "ann_no_category.jpg", "ann_no_bbox.jpg", "ann_no_image_id.jpg",
                 "ann_crowd_bad.jpg", "ann_category_float.jpg", "unknown_cat.jpg",
                 "nameless_cat.jpg", "unicode_class.jpg", "dup_category.jpg"):
      r.image(name, bd.jpeg())
    r.bad_ann("bbox_string.jpg", bbox="4,4,20,16")
    r.bad_ann("bbox_short.jpg", bbox=[1, 2, 3])
    r.bad_ann("bbox_null.jpg", bbox=[1, None, 3, 4])
    r.bad_ann("bbox_bool.jpg", bbox=[True, 1, 3, 4])
    r.bad_ann("ann_no_category.jpg", category_id=DROP)
    r.bad_ann("ann_no_bbox.jpg", bbox=DROP)
    r.bad_ann("ann_no_image_id.jpg", image_id=DROP)
    r.bad_ann("ann_crowd_bad.jpg", iscrowd="yes")
    r.bad_ann("ann_category_float.jpg", category_id=1.5)
    self.coco.annotations.append("not an object")
    self.ann_index["not_an_object"] = len(self.coco.annotations) - 1
    self.coco.ann(self.ids["unknown_cat.jpg"], 77, [1, 1, 5, 5])
    self.coco.ann(self.ids["nameless_cat.jpg"], 99, [1, 1, 5, 5])
    self.coco.ann(self.ids["dup_category.jpg"], 50, [30, 20, 10, 10])
    self.coco.ann(self.ids["unicode_class.jpg"], 3, [30, 20, 10, 10])
    self.coco.ann(self.ids["unicode_class.jpg"], 4, [40, 30, 10, 10])

    # image entries that cannot be used
    r.image("width_abc.jpg", bd.jpeg(), size=("abc", 48))          # GOOD ann -> unknown id
    self.coco.images.append({"file_name": "image_no_id.jpg", "width": 64, "height": 48})
    self.coco.images.append({"id": 7777, "width": 64, "height": 48})  # no file_name
    self.coco.images.append({"id": "seven", "file_name": "plain.jpg"})
    self.coco.images.append({"id": 7778, "file_name": 123})
    self.coco.images.append(42)

    # duplicates
    bd.write_bytes(os.path.join(self.images_dir, "dup_id_a.jpg"), bd.jpeg())
    bd.write_bytes(os.path.join(self.images_dir, "dup_id_b.jpg"), bd.jpeg())
    self.coco.image(600, "dup_id_a.jpg", None, 64, 48)
    self.coco.image(600, "dup_id_b.jpg", None, 64, 48)
    self.coco.ann(600, *GOOD)
    r.image("dup_file.jpg", bd.jpeg(), image_id=601)
    r.image("dup_file.jpg", None, size=(64, 48), image_id=602)
    self.coco.ann(9999, *GOOD)                       # no such image
    self.coco.ann(9998, *GOOD)                       # two annotations of a missing image
    self.coco.ann(9998, 2, [1, 1, 5, 5])

    for name in UNICODE_NAMES:
      r.image(name, bd.jpeg())
    for name, (bboxes, _) in COCO_BOXES.items():
      r.image(name, bd.jpeg(), anns=[GOOD] + [(1, b) for b in bboxes])
    self.main_json = self.coco.write(os.path.join(self.root, "main.json"))
    self.aux = {name: self.write_aux(name) for name in AUX + NOT_COCO}

  def write_aux(self, name):
    """A second COCO file whose images live under images/<name>/."""
    coco = bd.Coco(self.images_dir, CATEGORIES)
    for i, letter in enumerate("abc"):
      coco.image(100 + i, f"{name}/{letter}.jpg", bd.jpeg(), 64, 48)
      coco.ann(100 + i, *GOOD)
    path = os.path.join(self.root, f"{name}.json")
    if name == "truncated":       # the usual order; cut inside the third annotation
      text = json.dumps(coco.document(), indent=1)
      cut = text.index('"image_id": 102')
      bd.write_bytes(path, text[:cut].encode())
    elif name == "malformed":     # categories first; garbage between annotations 2 and 3
      text = json.dumps(coco.document(("categories", "images", "annotations")), indent=1)
      at = text.rindex("{", 0, text.index('"image_id": 102'))
      bd.write_bytes(path, (text[:at] + "@@ oops, " + text[at:]).encode())
    elif name == "nan":           # what Python's json.dump writes for float('nan')
      coco.annotations[1]["bbox"] = [float("nan"), 1, 5, 5]
      coco.annotations.append({"id": 9, "image_id": 101, "category_id": 1,
                               "bbox": [2, 2, 10, 10]})
      bd.write_bytes(path, json.dumps(coco.document(), indent=1).encode())
    elif name == "inf":           # a valid JSON number that overflows a double
      text = json.dumps(coco.document(), indent=1)
      text = text.replace('"bbox": [\n    4,', '"bbox": [\n    1e400,', 1)
      assert "1e400" in text
      bd.write_bytes(path, text.encode())
    elif name == "empty":
      bd.write_bytes(path, b"")
    elif name == "not_json":
      bd.write_bytes(path, b"filename,width,height\na.jpg,1,2\n")
    elif name == "no_sections":   # valid JSON, but not a COCO file at all
      bd.write_bytes(path, b'{"info": {"description": "the wrong file"}}')
    return path


@pytest.fixture(scope="module")
def coco_main(tmp_path_factory):
  root = tmp_path_factory.mktemp("coco_main")
  corpus = CocoCorpus(root)
  corpus.build()
  inputs = [corpus.main_json] + [corpus.aux[n] for n in AUX]
  args = ["--format", "coco", "--images", corpus.images_dir, "--output",
          os.path.join(str(root), "out")]
  for path in inputs:
    args += ["--input", path]
  run = bd.convert(args)
  corpus.run = run
  return corpus


def test_coco_run_finishes_and_reports(coco_main):
  """The corpus holds broken files (file-level errors): the run finishes, reports every
  error, and fails with exit 4 ('incomplete', issue 30 item 5) rather than exit 0."""
  run = coco_main.run
  assert run.code == 4
  assert run.manifest["outcome"] == "incomplete"
  assert run.manifest["errors"]["by_level"]["file"] >= 1
  check_report_format(run)


@pytest.mark.parametrize("name", list(COCO_REJECTED))
def test_coco_rejected_image(coco_main, name):
  stage, reasons = COCO_REJECTED[name]
  run = coco_main.run
  file_name = coco_main.outside if name == "ABSOLUTE" else name
  keys = {file_name}
  if stage not in ("locate", "parse"):
    keys.add(paths.clean_name(file_name))
  found = [e for e in run.errors if e["level"] == "image" and e["key"] in keys]
  assert len(found) == 1, (name, found)
  assert found[0]["stage"] == stage
  assert found[0]["reason"] in reasons, found[0]
  assert found[0]["source"].startswith(coco_main.main_json)
  assert not [e for e in run.examples if e["filename"] in keys]


def test_outside_file_never_read(coco_main):
  """Nothing outside the image root made it into the output (the outside file is a valid
  JPEG, so reading it would have produced an example)."""
  with open(coco_main.outside, "rb") as f:
    outside = f.read()
  plain = open(os.path.join(coco_main.images_dir, "plain.jpg"), "rb").read()
  assert outside != plain
  assert not [e for e in coco_main.run.examples if e["image/encoded"] == outside]


@pytest.mark.parametrize("name", list(COCO_PASSTHROUGH))
def test_coco_passthrough(coco_main, name):
  example = coco_main.run.by_filename()[name]
  with open(os.path.join(coco_main.images_dir, name), "rb") as f:
    original = f.read()
  assert example["image/encoded"] == original, "JPEG/PNG must pass through byte for byte"
  assert example["image/format"] == images_mod.sniff_format(original).encode()
  natural = bd.decode(example["image/encoded"])
  assert example["image/channels"] == natural.shape[-1] == EXPECTED_CHANNELS[name]
  rgb = bd.decode(example["image/encoded"], channels=3)
  assert rgb.shape == (example["image/height"], example["image/width"], 3)
  with Image.open(io.BytesIO(original)) as im:
    assert (example["image/width"], example["image/height"]) == im.size
    if not name.startswith("png16"):  # TF scales 16 bits down, Pillow clips: not comparable
      pillow = np.asarray(im.convert("RGB")).astype(int)
      assert np.abs(rgb.astype(int) - pillow).max() <= 8, "TF decodes other colours"
  assert len(example["image/object/class/text"]) == 1


def test_png_named_jpg_keeps_png(coco_main):
  example = coco_main.run.by_filename()["png_named.jpg"]
  assert example["image/format"] == b"png"


def test_symlink_inside_root_is_fine(coco_main):
  example = coco_main.run.by_filename()["link_in.jpg"]
  assert example["image/encoded"] == open(os.path.join(coco_main.images_dir, "plain.jpg"),
                                          "rb").read()


@pytest.mark.parametrize("name", COCO_REENCODED)
def test_coco_reencoded_as_png(coco_main, name):
  example = coco_main.run.by_filename()[name]
  assert example["image/format"] == b"png"
  with open(os.path.join(coco_main.images_dir, name), "rb") as f:
    original = f.read()
  mode = dict(zip(COCO_REENCODED, (m for _, m in bd.other_formats().values())))[name]
  with Image.open(io.BytesIO(original)) as im:
    expected = np.asarray(im.convert(mode))
    size = im.size
  assert (example["image/width"], example["image/height"]) == size
  decoded = bd.decode(example["image/encoded"], channels=len(mode))
  np.testing.assert_array_equal(decoded, expected)
  assert example["image/channels"] == bd.decode(example["image/encoded"]).shape[-1]


@pytest.mark.parametrize("name", list(COCO_EXIF))
def test_coco_exif_auto_frame(coco_main, name):
  example = coco_main.run.by_filename()[name]
  fmt = b"png" if name.endswith(".png") else b"jpeg"
  assert_marker_boxed(example, coco_main.photos[name], fmt)
  # sizes agree with the chosen frame (the corpus writes some EXIF photos twice, which the
  # copies report names: not this test's subject)
  assert not [e for e in coco_main.run.errors_where(key=name)
              if e["reason"] != "duplicate_content"]


def test_coco_reoriented_count(coco_main):
  assert coco_main.run.manifest["totals"]["reoriented_images"] == len(COCO_EXIF)


def test_corrupt_pixels_pass_without_verify_images(coco_main):
  """Documented trade-off: without --verify-images only the header and the end marker are
  checked, so a PNG with complete structure but corrupt pixel data is passed through (and TF
  cannot decode it). --verify-images catches it: see test_verify_images."""
  example = coco_main.run.by_filename()["bad_zlib_unverified.png"]
  with open(os.path.join(coco_main.images_dir, "bad_zlib_unverified.png"), "rb") as f:
    assert example["image/encoded"] == f.read()
  with pytest.raises(Exception):
    bd.decode(example["image/encoded"], channels=3)


def test_size_mismatch_is_a_warning(coco_main):
  run = coco_main.run
  example = run.by_filename()["size_mismatch.jpg"]
  assert (example["image/width"], example["image/height"]) == (64, 48)
  [warning] = run.errors_where(key="size_mismatch.jpg")
  assert (warning["reason"], warning["level"], warning["stage"]) == (
      "size_mismatch", "warning", "validate")


# annotation entry problems: (case key in ann_index, reason). All object level, at parse.
COCO_BAD_ANNOTATIONS = {
    "bbox_string.jpg:bbox": "wrong_type",
    "bbox_short.jpg:bbox": "wrong_type",
    "bbox_null.jpg:bbox": "wrong_type",
    "bbox_bool.jpg:bbox": "wrong_type",
    "ann_no_category.jpg:category_id": "missing_field",
    "ann_no_bbox.jpg:bbox": "missing_field",
    "ann_no_image_id.jpg:image_id": "missing_field",
    "ann_crowd_bad.jpg:iscrowd": "wrong_type",
    "ann_category_float.jpg:category_id": "wrong_type",
    "not_an_object": "wrong_type",
}


@pytest.mark.parametrize("case", list(COCO_BAD_ANNOTATIONS))
def test_coco_bad_annotation_entry(coco_main, case):
  run = coco_main.run
  index = coco_main.ann_index[case]
  [error] = [e for e in run.errors
             if e["source"] == f"{coco_main.main_json}#annotations[{index}]"]
  assert (error["stage"], error["reason"], error["level"]) == (
      "parse", COCO_BAD_ANNOTATIONS[case], "object")
  if case != "not_an_object":  # the image is kept with its good box
    example = run.by_filename()[case.split(":")[0]]
    assert len(example["image/object/bbox/xmin"]) == 1


BAD_IMAGE_ENTRIES = {  # index in `images` (from the end) -> reason
    -5: "missing_field",   # no id
    -4: "missing_field",   # no file_name
    -3: "wrong_type",      # id "seven"
    -2: "wrong_type",      # file_name 123
    -1: "wrong_type",      # not an object
}


@pytest.mark.parametrize("offset", list(BAD_IMAGE_ENTRIES))
def test_coco_bad_image_entry(coco_main, offset):
  # the 5 bad entries were appended right after width_abc.jpg
  first = [i for i, e in enumerate(coco_main.coco.images)
           if isinstance(e, dict) and e.get("file_name") == "width_abc.jpg"][0]
  index = first + 6 + offset
  [error] = [e for e in coco_main.run.errors
             if e["source"] == f"{coco_main.main_json}#images[{index}]"]
  assert (error["stage"], error["reason"], error["level"]) == (
      "parse", BAD_IMAGE_ENTRIES[offset], "image")


def test_coco_wrong_typed_width(coco_main):
  """width "abc": the image entry is rejected; its annotation is reported, not lost."""
  run = coco_main.run
  index = [i for i, e in enumerate(coco_main.coco.images)
           if isinstance(e, dict) and e.get("file_name") == "width_abc.jpg"][0]
  [error] = [e for e in run.errors if e["source"] == f"{coco_main.main_json}#images[{index}]"]
  assert (error["reason"], error["level"]) == ("wrong_type", "image")
  image_id = coco_main.ids["width_abc.jpg"]
  [orphan] = [e for e in run.errors if e["reason"] == "unknown_image_id"
              and f"image id {image_id}," in e["message"]]
  assert (orphan["reason"], orphan["level"]) == ("unknown_image_id", "object")
  assert "width_abc.jpg" not in run.by_filename()


def test_coco_unknown_category(coco_main):
  run = coco_main.run
  for name in ("unknown_cat.jpg", "nameless_cat.jpg"):
    [error] = run.errors_where(key=name)
    assert (error["stage"], error["reason"], error["level"]) == (
        "parse", "unknown_category_id", "object")
    assert len(run.by_filename()[name]["image/object/bbox/xmin"]) == 1  # image kept


def test_coco_category_without_name_is_reported(coco_main):
  index = [i for i, c in enumerate(coco_main.coco.categories) if c["id"] == 99][0]
  [error] = [e for e in coco_main.run.errors
             if e["source"] == f"{coco_main.main_json}#categories[{index}]"]
  assert (error["reason"], error["level"]) == ("missing_field", "file")


def test_coco_duplicate_category_id_is_reported(coco_main):
  run = coco_main.run
  assert [e for e in from_source(run, coco_main.main_json)
          if "duplicate" in e["reason"] and "categor" in e["reason"]]
  ids = list(run.manifest["label_map"].values())
  assert len(ids) == len(set(ids)), run.manifest["label_map"]


def test_coco_duplicate_category_id_object_kept(coco_main):
  example = coco_main.run.by_filename()["dup_category.jpg"]
  assert example["image/object/class/label"] == [1, 50]


def test_coco_duplicate_image_id(coco_main):
  run = coco_main.run
  [warning] = [e for e in run.errors if e["source"] == f"{coco_main.main_json}#image_id=600"]
  assert (warning["reason"], warning["level"]) == ("duplicate_image_id", "warning")
  written = [n for n in ("dup_id_a.jpg", "dup_id_b.jpg") if n in run.by_filename()]
  assert written == ["dup_id_a.jpg"]
  assert len(run.by_filename()["dup_id_a.jpg"]["image/object/bbox/xmin"]) == 1


def test_coco_duplicate_file_name(coco_main):
  run = coco_main.run
  [warning] = run.errors_where(key="dup_file.jpg")
  assert (warning["reason"], warning["level"]) == ("duplicate_image", "warning")
  example = run.by_filename()["dup_file.jpg"]  # by_filename asserts it is written once
  assert example["image/source_id"] == b"601"


def test_coco_unknown_image_id(coco_main):
  [error] = [e for e in coco_main.run.errors if e["reason"] == "unknown_image_id"
             and "image id 9999," in e["message"]]
  assert (error["stage"], error["reason"], error["level"]) == (
      "parse", "unknown_image_id", "object")


def test_coco_unknown_image_id_reports_each_annotation(coco_main):
  errors = [e for e in coco_main.run.errors if e["reason"] == "unknown_image_id"
            and "image id 9998," in e["message"]]
  assert len(errors) == 2
  assert len({e["source"] for e in errors}) == 2  # each names its own annotation


def test_coco_unicode_class_names(coco_main, tmp_path):
  run = coco_main.run
  example = run.by_filename()["unicode_class.jpg"]
  texts = [t.decode("utf-8") for t in example["image/object/class/text"]]
  assert sorted(texts) == sorted(["cat", "café ☕", '猫 "neko"'])
  labels = dict(zip(texts, example["image/object/class/label"]))
  assert labels == {"cat": 1, "café ☕": 3, '猫 "neko"': 4}
  with open(os.path.join(run.output, "label_map.pbtxt"), encoding="utf-8") as f:
    text = f.read()
  assert "café ☕" in text  # raw UTF-8, not octal escapes
  from beam_tfrecord.records import label_map
  parsed = label_map.parse(text)
  assert parsed["café ☕"] == 3 and parsed['猫 "neko"'] == 4
  assert run.manifest["label_map"]["café ☕"] == 3


@pytest.mark.parametrize("name", UNICODE_NAMES)
def test_coco_unusual_file_names(coco_main, name):
  example = coco_main.run.by_filename()[name]
  assert example["image/filename"] == name.encode("utf-8")
  assert len(example["image/object/bbox/xmin"]) == 1


@pytest.mark.parametrize("name", list(COCO_BOXES))
def test_coco_boxes(coco_main, name):
  run = coco_main.run
  _, reasons = COCO_BOXES[name]
  example = run.by_filename()[name]
  errors = run.errors_where(key=name)
  assert sorted(e["reason"] for e in errors) == sorted(reasons)
  assert all(e["level"] == "object" and e["stage"] == "validate" for e in errors)
  kept = len(example["image/object/bbox/xmin"])
  assert kept == 1 + len(COCO_BOXES[name][0]) - len(reasons)
  for key in ("xmin", "ymin", "xmax", "ymax"):
    values = example[f"image/object/bbox/{key}"]
    assert all(0.0 <= v <= 1.0 for v in values), (key, values)
  for xmin, xmax in zip(example["image/object/bbox/xmin"], example["image/object/bbox/xmax"]):
    assert xmin < xmax


def test_coco_clipped_boxes_counted(coco_main):
  run = coco_main.run
  assert run.manifest["totals"]["clipped_boxes"] == CLIPPED_IN_MAIN
  right = run.by_filename()["box_partly_right.jpg"]
  assert max(right["image/object/bbox/xmax"]) == 1.0
  assert max(right["image/object/bbox/ymax"]) == 1.0
  left = run.by_filename()["box_partly_left.jpg"]
  assert min(left["image/object/bbox/xmin"]) == 0.0


def test_coco_accounting(coco_main):
  """Nothing dropped silently (main.json): every image entry is written, rejected at image
  level, or the dropped copy of a duplicate; every annotation is written, reported at object
  level, or went with its image's image-level error (or duplicate warning)."""
  run, coco, main = coco_main.run, coco_main.coco, coco_main.main_json
  errors = from_source(run, main)
  aux_prefixes = tuple(f"{n}/" for n in AUX)
  examples = [e for e in run.examples if not e["filename"].startswith(aux_prefixes)]
  levels = collections.Counter(e["level"] for e in errors)
  duplicates = [e for e in errors if e["reason"] in DUPLICATE_WARNINGS]
  assert len(examples) + levels["image"] + len(duplicates) == len(coco.images)

  anns_per_id = collections.Counter(a["image_id"] for a in coco.annotations
                                    if isinstance(a, dict) and "image_id" in a)
  ids_by_key = collections.defaultdict(set)
  for entry in coco.images:
    if isinstance(entry, dict) and isinstance(entry.get("file_name"), str):
      ids_by_key[entry["file_name"]].add(entry.get("id"))
      try:
        ids_by_key[paths.clean_name(entry["file_name"])].add(entry.get("id"))
      except InputError:
        pass
  lost_with_image = 0
  for error in errors:
    # an entry of `images` that does not parse (source ...#images[i], keyed by its file name)
    # takes no annotation with it: they are reported as unknown_image_id objects
    if error["level"] == "image" and "#images[" not in error["source"]:
      lost_with_image += sum(anns_per_id[i] for i in ids_by_key[error["key"]])
    if error["reason"] == "duplicate_image":
      written = int(run.by_filename()[error["key"]]["image/source_id"])
      lost_with_image += sum(anns_per_id[i] for i in ids_by_key[error["key"]] - {written})
  object_errors = levels["object"]
  objects_written = sum(len(e["image/object/class/text"]) for e in examples)
  assert objects_written + object_errors + lost_with_image == len(coco.annotations)


# --- the auxiliary, broken COCO files of the same run ----------------------------------------


def test_coco_truncated_json(coco_main):
  """Cut inside `annotations` (categories come after): a file-level malformed_json; every
  image and annotation before the cut is converted or reported."""
  run, path = coco_main.run, coco_main.aux["truncated"]
  file_errors = [e for e in from_source(run, path) if e["level"] == "file"]
  assert file_errors and {e["reason"] for e in file_errors} == {"malformed_json"}
  assert all(e["stage"] == "parse" for e in file_errors)
  written = run.by_filename()
  for letter in "abc":
    assert f"truncated/{letter}.jpg" in written
  for letter in "ab":  # annotations before the cut: written, or reported at object level
    name = f"truncated/{letter}.jpg"
    objects = len(written[name]["image/object/bbox/xmin"])
    reported = [e for e in run.errors_where(key=name) if e["level"] == "object"]
    assert objects + len(reported) == 1, (name, objects, reported)


def test_coco_malformed_json(coco_main):
  """Garbage between annotations 2 and 3 (categories first): records before it convert."""
  run, path = coco_main.run, coco_main.aux["malformed"]
  file_errors = [e for e in from_source(run, path) if e["level"] == "file"]
  assert file_errors and {e["reason"] for e in file_errors} == {"malformed_json"}
  written = run.by_filename()
  assert len(written["malformed/a.jpg"]["image/object/bbox/xmin"]) == 1
  assert len(written["malformed/b.jpg"]["image/object/bbox/xmin"]) == 1
  assert "malformed/c.jpg" in written  # its annotation is past the break (file error)


@pytest.mark.parametrize("name,says", [("empty", "is empty"),
                                       ("not_json", "looks like a CSV file; use --format csv"),
                                       ("no_sections", "has no `images` array")])
def test_coco_input_that_is_not_coco_is_refused_before_running(coco_main, tmp_path, capsys,
                                                               name, says):
  """Beside good inputs, one that is not a COCO file stops the run before anything is
  written: exit 2, one line naming the file, no output directory."""
  output = str(tmp_path / "out")
  run = bd.convert(["--format", "coco", "--images", coco_main.images_dir, "--output", output,
                    "--input", coco_main.main_json, "--input", coco_main.aux[name]], capsys)
  assert run.code == 2
  [line] = run.stderr.strip().splitlines()
  assert coco_main.aux[name] in line and says in line and "Traceback" not in run.stderr
  assert not os.path.exists(output)


@pytest.mark.parametrize("name", ["nan", "inf"])
def test_coco_non_finite_json_numbers_converted_or_reported(coco_main, name):
  run, path = coco_main.run, coco_main.aux[name]
  errors = from_source(run, path)
  assert errors
  written = run.by_filename()
  file_level = [e for e in errors if e["level"] == "file"]
  for letter in "abc":
    image = f"{name}/{letter}.jpg"
    assert image in written or file_level


@pytest.mark.parametrize("name", ["nan", "inf"])
def test_coco_non_finite_box_is_dropped_not_the_file(coco_main, name):
  run, path = coco_main.run, coco_main.aux[name]
  assert not [e for e in from_source(run, path) if e["level"] == "file"]
  [error] = [e for e in from_source(run, path) if e["level"] == "object"]
  assert error["reason"] in ("bbox_not_finite", "wrong_type")
  written = run.by_filename()
  assert all(f"{name}/{letter}.jpg" in written for letter in "abc")
