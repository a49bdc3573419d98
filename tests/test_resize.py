"""Preprocessing at conversion time: --max-side, --resize, --image-format, --jpeg-quality.

Real pipeline runs on Pillow-made images (a marker rectangle drawn where the box says, an EXIF-
rotated photo, PNG/GIF/BMP/WebP/TIFF, grayscale and RGBA), read back with TensorFlow.
"""
from __future__ import annotations

import io
import os

import bad_data as bd
import numpy as np
import pytest
from PIL import Image, ImageDraw

from beam_tfrecord.write import images

MAX_SIDE = 128


def _marker_jpeg(size, box) -> bytes:
  image = Image.new("RGB", size, bd.BACKGROUND)
  ImageDraw.Draw(image).rectangle([box[0], box[1], box[2] - 1, box[3] - 1], fill=bd.MARKER)
  return bd.save(image, "JPEG", quality=95, subsampling=0)


def _corpus(root: str):
  """{file name: (bytes, (w, h) displayed, marker box or None)} and its COCO file."""
  rot = bd.oriented_photo(6, displayed_size=(300, 200), box=(60, 40, 180, 150))
  files = {
      "big.jpg": (_marker_jpeg((400, 300), (100, 80, 220, 180)), (400, 300), (100, 80, 220, 180)),
      "rot6.jpg": (rot.data, rot.displayed_size, rot.displayed_box),
      "wide.png": (bd.png((500, 100)), (500, 100), None),
      "small.png": (bd.png((50, 40)), (50, 40), None),
      "small.jpg": (bd.jpeg((60, 40)), (60, 40), None),
      "gray.png": (bd.png((150, 90), mode="L"), (150, 90), None),
      "rgba.png": (bd.png((90, 150), mode="RGBA"), (90, 150), None),
  }
  for name, (data, _) in bd.other_formats().items():
    files[f"{name}.img"] = (data, (40, 30), None)
  coco = bd.Coco(os.path.join(root, "images"), [(1, "thing")])
  for image_id, (name, (data, size, box)) in enumerate(sorted(files.items()), start=1):
    coco.image(image_id, name, data, width=size[0], height=size[1])
    x0, y0, x1, y1 = box or (size[0] * 0.25, size[1] * 0.25, size[0] * 0.75, size[1] * 0.5)
    coco.ann(image_id, 1, [x0, y0, x1 - x0, y1 - y0], area=float((x1 - x0) * (y1 - y0)) - 7)
  return files, coco.write(os.path.join(root, "instances.json"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("resize"))
  files, annotations = _corpus(root)
  return root, files, annotations


def _run(corpus, name, *options):
  root, _, annotations = corpus
  run = bd.convert(["--format=coco", f"--input={annotations}",
                    f"--images={os.path.join(root, 'images')}",
                    "--output", os.path.join(root, name), *options])
  assert run.code == 0 and not run.errors, run.errors
  return run


@pytest.fixture(scope="module")
def max_side_run(corpus):
  return _run(corpus, "max-side", f"--max-side={MAX_SIDE}")


@pytest.fixture(scope="module")
def jpeg_run(corpus):
  return _run(corpus, "jpeg", "--image-format=jpeg", "--jpeg-quality=80")


def _decoded_size(encoded: bytes):
  height, width = bd.decode(encoded).shape[:2]
  return width, height


def test_max_side_bounds_the_longest_side_and_keeps_aspect(max_side_run, corpus):
  _, files, _ = corpus
  examples = max_side_run.by_filename()
  assert sorted(examples) == sorted(files)
  for name, (data, (w, h), _) in files.items():
    example = examples[name]
    size = _decoded_size(example["image/encoded"])
    assert size == (example["image/width"], example["image/height"]), name  # header = decoded
    if max(w, h) <= MAX_SIDE:
      assert size == (w, h)
    else:
      assert max(size) == MAX_SIDE, name
      assert size[0] / size[1] == pytest.approx(w / h, rel=0.02), name


def test_resize_keeps_normalized_boxes_and_scales_area(max_side_run, corpus):
  _, files, annotations = corpus
  import json
  doc = json.load(open(annotations))
  by_file = {im["file_name"]: im["id"] for im in doc["images"]}
  anns = {a["image_id"]: a for a in doc["annotations"]}
  for name, example in max_side_run.by_filename().items():
    ann = anns[by_file[name]]
    (w, h), (x, y, bw, bh) = files[name][1], ann["bbox"]
    got = [example[f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")]
    np.testing.assert_allclose(got, [x / w, y / h, (x + bw) / w, (y + bh) / h], atol=1e-6)
    sx, sy = example["image/width"] / w, example["image/height"] / h
    assert example["image/object/area"][0] == pytest.approx(ann["area"] * sx * sy, rel=1e-5)


@pytest.mark.parametrize("name", ["big.jpg", "rot6.jpg"])
def test_box_centre_still_on_the_drawn_object(max_side_run, corpus, name):
  example = max_side_run.by_filename()[name]
  image = bd.decode(example["image/encoded"], channels=3).astype(int)
  height, width = image.shape[:2]
  assert max(width, height) == MAX_SIDE
  cx = (example["image/object/bbox/xmin"][0] + example["image/object/bbox/xmax"][0]) / 2
  cy = (example["image/object/bbox/ymin"][0] + example["image/object/bbox/ymax"][0]) / 2
  centre = image[int(cy * height), int(cx * width)]
  assert np.abs(centre - np.array(bd.MARKER)).max() <= 40
  # and the marker, found in the pixels, is where the normalized box says
  found = bd.marker_bbox(Image.fromarray(image.astype(np.uint8)))
  expected = [example[f"image/object/bbox/{k}"][0] * s
              for k, s in (("xmin", width), ("ymin", height), ("xmax", width), ("ymax", height))]
  np.testing.assert_allclose(found, expected, atol=1.5)


def test_images_within_limits_are_copied_byte_for_byte(max_side_run, corpus):
  _, files, _ = corpus
  examples = max_side_run.by_filename()
  for name in ("small.png", "small.jpg"):
    assert examples[name]["image/encoded"] == files[name][0]
  assert examples["big.jpg"]["image/format"] == b"jpeg"  # keep: resized JPEG stays JPEG
  assert examples["wide.png"]["image/format"] == b"png"
  assert examples["gif.img"]["image/format"] == b"png"


def test_image_format_jpeg_decodes_with_decode_jpeg_for_every_input(jpeg_run, corpus):
  import tensorflow as tf
  _, files, _ = corpus
  examples = jpeg_run.by_filename()
  assert len(examples) == len(files)
  for name, example in examples.items():
    assert example["image/format"] == b"jpeg"
    decoded = tf.io.decode_jpeg(example["image/encoded"], channels=3).numpy()
    assert decoded.shape[1::-1] == (example["image/width"], example["image/height"]), name
    assert (example["image/width"], example["image/height"]) == files[name][1], name
  # JPEGs that need nothing are copied; the rest were encoded at --jpeg-quality
  assert examples["small.jpg"]["image/encoded"] == files["small.jpg"][0]
  assert examples["small.png"]["image/encoded"] != files["small.png"][0]


def test_image_format_png_and_resize_stretch(corpus):
  run = _run(corpus, "stretch", "--resize=100x50", "--image-format=png")
  for name, example in run.by_filename().items():
    assert example["image/format"] == b"png"
    assert _decoded_size(example["image/encoded"]) == (100, 50) == \
        (example["image/width"], example["image/height"]), name


# ---------------------------------------------------------------------------------------------
# The pure parts
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size,pre,expected", [
    ((400, 300), images.Preprocess(max_side=128), (128, 96)),
    ((300, 400), images.Preprocess(max_side=128), (96, 128)),
    ((1000, 3), images.Preprocess(max_side=100), (100, 1)),
    ((100, 50), images.Preprocess(max_side=100), (100, 50)),
    ((100, 50), images.Preprocess(resize=(640, 640)), (640, 640)),
    ((100, 50), images.Preprocess(), (100, 50)),
])
def test_target_size(size, pre, expected):
  assert images.target_size(*size, pre) == expected


@pytest.mark.parametrize("text", ["640", "0x10", "axb", "10x", "-1x5", "10x10x10"])
def test_parse_size_rejects(text):
  with pytest.raises(ValueError):
    images.parse_size(text)


def test_draft_mode_used_when_shrinking_jpegs(monkeypatch):
  from PIL import JpegImagePlugin
  calls = []
  real = JpegImagePlugin.JpegImageFile.draft
  monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft",
                      lambda self, mode, size: calls.append(size) or real(self, mode, size))
  data = _marker_jpeg((800, 600), (100, 100, 300, 300))
  prepared = images.prepare(data, pre=images.Preprocess(max_side=200))
  assert calls == [(200, 150)] and (prepared.info.width, prepared.info.height) == (200, 150)
  images.prepare(data, pre=images.Preprocess(max_side=2000, image_format="png"))
  assert len(calls) == 1  # not shrinking: no draft


def test_sixteen_bit_png_to_jpeg():
  prepared = images.prepare(bd.png16_rgb((64, 48)), pre=images.Preprocess(image_format="jpeg"))
  assert prepared.info.format == "jpeg" and (prepared.info.width, prepared.info.height) == (64, 48)
  gray16 = bd.png((64, 48), mode="I;16")
  prepared = images.prepare(gray16, pre=images.Preprocess(image_format="jpeg", max_side=32))
  with Image.open(io.BytesIO(prepared.encoded)) as im:
    assert im.mode == "L" and im.size == (32, 24)
    # 40000/65535 of full scale, as 8 bits
    assert abs(im.getpixel((30, 22)) - 40000 * 255 // 65535) <= 3
