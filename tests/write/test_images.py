"""write/images.py: sniff, probe and convert image bytes (checked against TensorFlow's decoders),
decompression bombs refused from the header, property tests on arbitrary and mutated bytes, and
preprocessing: --max-side, --resize, --image-format, --jpeg-quality, pure and in real conversions
(a marker rectangle drawn where the box says, an EXIF-rotated photo, PNG/GIF/BMP/WebP/TIFF,
grayscale and RGBA), read back with TensorFlow."""
from __future__ import annotations

import io
import os

import bad_data as bd
import numpy as np
import pytest
from conftest import encoded_image as _encode
from fuzzing import FUZZ, returns_or_input_error
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageDraw

from beam_tfrecord.records.model import InputError
from beam_tfrecord.write import images
from beam_tfrecord.write import images as images_mod


@pytest.mark.parametrize("fmt,name", [("JPEG", "jpeg"), ("PNG", "png"), ("GIF", "gif"),
                                      ("BMP", "bmp"), ("TIFF", "tiff"), ("WEBP", "webp")])
def test_sniff_format_from_bytes(fmt, name):
  assert images.sniff_format(_encode(fmt)) == name


def test_sniff_format_unknown():
  assert images.sniff_format(b"") is None
  assert images.sniff_format(b"hello world, not an image") is None
  assert images.sniff_format(b"RIFF\x00\x00\x00\x00WAVE") is None


def test_probe_png_named_jpg(tmp_path):
  path = tmp_path / "photo.jpg"
  path.write_bytes(_encode("PNG", size=(40, 30)))
  info = images.probe(path.read_bytes())
  assert (info.format, info.width, info.height, info.channels) == ("png", 40, 30, 3)


@pytest.mark.parametrize("fmt,mode,extra", [
    ("JPEG", "L", {}), ("JPEG", "RGB", {}), ("JPEG", "CMYK", {}), ("PNG", "RGB", {}),
    ("PNG", "RGBA", {}), ("PNG", "LA", {}), ("PNG", "L", {}), ("PNG", "1", {}),
    ("PNG", "I;16", {}), ("PNG", "P", {}), ("PNG", "P", {"transparency": 0}),
])
def test_probe_size_and_channels_agree_with_tensorflow(fmt, mode, extra):
  """image/channels is what tf.io.decode_image(channels=0) returns for the bytes."""
  tf = pytest.importorskip("tensorflow")
  data = _encode(fmt, mode=mode, size=(17, 9), **extra)
  info = images.probe(data)
  decoded = tf.io.decode_image(data, channels=0, expand_animations=False)
  assert (info.format, info.width, info.height) == (fmt.lower(), 17, 9)
  assert tuple(decoded.shape) == (9, 17, info.channels)


def test_probe_pixel_limit():
  data = _encode("PNG", size=(100, 50))
  assert images.probe(data, max_pixels=5000).width == 100
  with pytest.raises(InputError) as e:
    images.probe(data, max_pixels=4999)
  assert e.value.reason == "decompression_bomb"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_probe_rejects_truncated_files(fmt):
  data = _encode(fmt, size=(64, 48))
  with pytest.raises(InputError) as e:
    images.probe(data[: len(data) * 2 // 3])
  assert e.value.stage == "decode" and e.value.reason in ("truncated_image", "corrupt_image")


@pytest.mark.parametrize("data,reason", [
    (b"", "empty_file"),
    (b"not an image at all", "unknown_format"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "corrupt_image"),
    (b"\xff\xd8\xff\xe0garbage", "corrupt_image"),
])
def test_probe_errors(data, reason):
  with pytest.raises(InputError) as e:
    images.probe(data)
  assert e.value.reason == reason and e.value.stage == "decode"


def test_prepare_passthrough_and_conversion():
  jpeg, png = _encode("JPEG"), _encode("PNG")
  assert images.prepare(jpeg).encoded == jpeg
  assert images.prepare(png).encoded == png
  for fmt in ("GIF", "BMP", "TIFF", "WEBP"):
    prepared = images.prepare(_encode(fmt))
    assert prepared.info.format == "png" and prepared.encoded.startswith(b"\x89PNG")
    assert (prepared.info.width, prepared.info.height) == (33, 21)


# ============================================================================================
# Decompression bombs: rejected from the header, before any decoding


@pytest.mark.parametrize("garbage_idat", [True, False])
def test_bomb_rejected_from_the_header(garbage_idat):
  for size in ((100_000, 100_000), (70_000, 3_000)):
    with pytest.raises(InputError) as info:
      images_mod.prepare(bd.png_bomb(*size, garbage_idat=garbage_idat))
    assert (info.value.stage, info.value.reason) == ("decode", "decompression_bomb")
  with pytest.raises(InputError) as info:  # the limit is --max-pixels
    images_mod.prepare(bd.jpeg((64, 48)), max_pixels=64 * 48 - 1)
  assert info.value.reason == "decompression_bomb"


def test_bomb_rejected_before_decoding(monkeypatch):
  from PIL import ImageFile
  decoded = []

  def spy(self, *args, **kwargs):
    decoded.append(self.size)
    raise AssertionError("pixels decoded")

  monkeypatch.setattr(ImageFile.ImageFile, "load", spy)
  with pytest.raises(InputError) as info:  # 64 M pixels, --max-pixels 1 M
    images_mod.probe(bd.png_bomb(8_000, 8_000, garbage_idat=False), max_pixels=1_000_000)
  assert info.value.reason == "decompression_bomb"
  assert decoded == []


# ---------------------------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------------------------


SEED_IMAGES = {
    "jpeg": bd.jpeg((24, 16)),
    "gray_jpeg": bd.jpeg((24, 16), mode="L"),
    "cmyk": bd.jpeg((24, 16), mode="CMYK"),
    "png": bd.png((24, 16)),
    "png_p": bd.png((24, 16), mode="P", transparency=0),
    "png16": bd.png16_rgb((12, 8)),
    "exif6": bd.oriented_photo(6, (24, 16), (2, 2, 10, 8)).data,
    **{name: data for name, (data, _) in bd.other_formats().items()},
}
SIGNATURES = [b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*",
              b"RIFF\x00\x00\x00\x00WEBP"]
MAX_PIXELS = 1_000_000  # keeps mutated headers from allocating much


@st.composite
def mutated_images(draw):
  data = bytearray(SEED_IMAGES[draw(st.sampled_from(sorted(SEED_IMAGES)))])
  for _ in range(draw(st.integers(1, 6))):
    kind = draw(st.sampled_from(["flip", "cut", "insert", "zero"]))
    at = draw(st.integers(0, len(data) - 1)) if data else 0
    if kind == "flip" and data:
      data[at] = draw(st.integers(0, 255))
    elif kind == "cut":
      del data[at:at + draw(st.integers(1, 64))]
    elif kind == "insert":
      data[at:at] = draw(st.binary(min_size=1, max_size=16))
    elif data:
      data[at:at + 8] = b"\x00" * len(data[at:at + 8])
  return bytes(data)


def _check_prepared(prepared, verify):
  assert isinstance(prepared, images.PreparedImage)
  assert prepared.info.format in images.PASSTHROUGH
  assert prepared.info.width > 0 and prepared.info.height > 0
  assert prepared.info.orientation == 1


@FUZZ
@given(st.binary(max_size=300) |
       st.tuples(st.sampled_from(SIGNATURES), st.binary(max_size=300)).map(b"".join))
def test_probe_and_prepare_arbitrary_bytes(data):
  returns_or_input_error(images.probe, data, MAX_PIXELS)
  for verify in (False, True):
    prepared = returns_or_input_error(images.prepare, data, MAX_PIXELS, verify)
    if prepared is not None:
      _check_prepared(prepared, verify)


@FUZZ
@given(mutated_images())
def test_probe_and_prepare_mutated_images(data):
  returns_or_input_error(images.probe, data, MAX_PIXELS)
  for verify in (False, True):
    prepared = returns_or_input_error(images.prepare, data, MAX_PIXELS, verify)
    if prepared is not None:
      _check_prepared(prepared, verify)


# ---------------------------------------------------------------------------------------------
# Preprocessing (--max-side, --resize, --image-format, --jpeg-quality)
# ---------------------------------------------------------------------------------------------


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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_images_within_limits_are_copied_byte_for_byte(max_side_run, corpus):
  _, files, _ = corpus
  examples = max_side_run.by_filename()
  for name in ("small.png", "small.jpg"):
    assert examples[name]["image/encoded"] == files[name][0]
  assert examples["big.jpg"]["image/format"] == b"jpeg"  # keep: resized JPEG stays JPEG
  assert examples["wide.png"]["image/format"] == b"png"
  assert examples["gif.img"]["image/format"] == b"png"


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.parametrize("mode", ["L", "RGB", "CMYK"])
@pytest.mark.parametrize("options", [{}, {"progressive": True}, {"quality": 20, "optimize": True},
                                     {"subsampling": 0}])
def test_jpeg_header_fast_path_agrees_with_pillow(mode, options, monkeypatch):
  """probe reads plain JPEG headers itself (Pillow's open cost ~40% of a small image's
  conversion): the same ImageInfo as through Pillow, or None (Pillow decides) for CMYK."""
  for size in ((1, 1), (64, 48), (333, 211), (4000, 3)):
    out = io.BytesIO()
    Image.new(mode, size, (10,) * len(mode)).save(out, "JPEG", **options)
    data = out.getvalue()
    fast = images.probe(data)
    header = images.jpeg_header(data)
    assert (header is None) == (mode == "CMYK")
    with monkeypatch.context() as m:
      m.setattr(images, "jpeg_header", lambda d: None)
      assert images.probe(data) == fast
    if header:
      assert header == (size[0], size[1], 1 if mode == "L" else 3)
      # a header cut short of its scan: Pillow's word, not ours
      for cut in (3, 20, data.index(b"\xff\xda") + 3):
        assert images.jpeg_header(data[:cut]) is None


def test_jpeg_header_leaves_exif_and_odd_frames_to_pillow():
  exif = Image.Exif()
  exif[0x0112] = 6
  out = io.BytesIO()
  Image.new("RGB", (40, 20)).save(out, "JPEG", exif=exif.tobytes())
  data = out.getvalue()
  assert images.jpeg_header(data) is None
  assert images.probe(data).orientation == 6 and images.probe(data).width == 40
  assert images.jpeg_header(b"\xff\xd8\xff\xe0\x00\x02junk") is None
  with pytest.raises(InputError):
    images.probe(b"\xff\xd8\xff\xc0\x00\x0b\x08\x00\x00\x00\x00\x03" + b"\x00" * 20)


# ---------------------------------------------------------------------------------------------
# Error messages are the same in every run


def test_exception_text_has_no_object_addresses():
  class Thing:
    pass
  thing = Thing()
  assert images.exception_text(ValueError(f"cannot use {thing!r} here")) == (
      f"ValueError: cannot use <{__name__}.test_exception_text_has_no_object_addresses."
      "<locals>.Thing object> here")
  for data in (b"GIF89a" + b"\x00" * 20, b"II*\x00" + b"\x00" * 30):
    with pytest.raises(InputError) as e:
      images.probe(data)
    assert e.value.message == "UnidentifiedImageError: cannot identify image file"


@pytest.mark.e2e
def test_corrupt_images_give_the_same_error_report_in_every_run(tmp_path):
  """Pillow names its buffer with its address ('cannot identify image file <_io.BytesIO
  object at 0x7f...>'): two runs over the same corrupt images write byte-identical
  errors-*.jsonl, with no address in it."""
  root = tmp_path / "images"
  coco = bd.Coco(str(root), [(1, "thing")])
  files = {"good.jpg": bd.jpeg(), "gif.gif": b"GIF89a" + b"\x00" * 20,
           "tiff.tif": b"II*\x00" + b"\x00" * 30, "bmp.bmp": b"BM" + b"\x00" * 50}
  for image_id, (name, data) in enumerate(sorted(files.items()), start=1):
    coco.image(image_id, name, data, width=64, height=48)
    coco.ann(image_id, 1, [2, 3, 20, 10])
  annotations = coco.write(str(tmp_path / "instances.json"))
  reports = []
  for name in ("one", "two"):
    run = bd.convert(["--format=coco", f"--input={annotations}", f"--images={root}",
                      "--output", str(tmp_path / name)])
    assert run.code == 0 and sorted(run.by_filename()) == ["good.jpg"]
    assert sorted((e["key"], e["reason"]) for e in run.errors) == [
        ("bmp.bmp", "corrupt_image"), ("gif.gif", "corrupt_image"), ("tiff.tif", "corrupt_image")]
    [report] = (tmp_path / name).glob("errors-*.jsonl")
    reports.append(report.read_bytes())
  assert reports[0] == reports[1]
  assert b"0x" not in reports[0]
  assert b"UnidentifiedImageError: cannot identify image file\"" in reports[0]
