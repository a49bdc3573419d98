"""Checks the bad-input corpora share (tests/e2e/test_bad_inputs_*.py): the error report's
format, nothing dropped silently, and the box around the marker of an EXIF-rotated photo."""
from __future__ import annotations

import collections
import io

import bad_data as bd
import numpy as np
from PIL import Image

from beam_tfrecord.records.model import LEVELS, STAGES

GOOD = (1, [4, 4, 20, 16])          # (category_id, COCO bbox) inside every 64x48 test image


DUPLICATE_WARNINGS = ("duplicate_image", "duplicate_image_id")


def check_report_format(run):
  """Every error record has the documented fields; the manifest counts equal the jsonl."""
  assert run.manifest is not None
  for error in run.errors:
    assert set(error) == {"source", "key", "stage", "reason", "message", "level"}, error
    assert error["stage"] in STAGES, error
    assert error["level"] in LEVELS, error
    assert isinstance(error["source"], str) and error["source"], error
    assert isinstance(error["reason"], str) and error["reason"], error
    assert isinstance(error["message"], str) and error["message"], error
  reasons = collections.Counter(e["reason"] for e in run.errors)
  levels = collections.Counter(e["level"] for e in run.errors)
  assert run.manifest["errors"]["by_reason"] == dict(reasons)
  assert run.manifest["errors"]["by_level"] == dict(levels)
  assert run.manifest["errors"]["count"] == len(run.errors)
  assert run.manifest["totals"]["examples"] == len(run.examples)
  assert run.manifest["totals"]["objects"] == sum(
      len(e["image/object/class/text"]) for e in run.examples)


def assert_coco_accounting(run, coco):
  """A one-file COCO run: every image entry is written, rejected at image level or the dropped
  copy of a duplicate; every annotation is written, reported at object level, or went with
  its image's image-level error."""
  levels = collections.Counter(e["level"] for e in run.errors)
  duplicates = [e for e in run.errors if e["reason"] in DUPLICATE_WARNINGS]
  assert len(run.examples) + levels["image"] + len(duplicates) == len(coco.images)
  names = {i["id"]: i["file_name"] for i in coco.images}
  per_name = collections.Counter(names.get(a["image_id"]) for a in coco.annotations)
  lost = sum(per_name[e["key"]] for e in run.errors if e["level"] == "image")
  written = sum(len(e["image/object/class/text"]) for e in run.examples)
  assert written + levels["object"] + lost == len(coco.annotations)


def from_source(run, source):
  """Errors of one annotation file (COCO/CSV sources are `uri`, `uri#...` or `uri:line`)."""
  return [e for e in run.errors if e["source"] == source or e["source"].startswith(source + "#")
          or e["source"].startswith(source + ":")]


CATEGORIES = [(1, "cat"), (2, "dog"), (3, "café ☕"), (4, '猫 "neko"')]


def assert_marker_boxed(example, photo, fmt=b"jpeg"):
  """The output is upright (decoded size = displayed size) and its one box holds the marker."""
  image = bd.decode(example["image/encoded"], channels=3).astype(int)
  height, width = image.shape[:2]
  assert (width, height) == photo.displayed_size
  assert (example["image/width"], example["image/height"]) == photo.displayed_size
  assert example["image/format"] == fmt
  assert len(example["image/object/bbox/xmin"]) == 1
  box = (example["image/object/bbox/xmin"][0] * width, example["image/object/bbox/ymin"][0] *
         height, example["image/object/bbox/xmax"][0] * width,
         example["image/object/bbox/ymax"][0] * height)
  np.testing.assert_allclose(box, photo.displayed_box, atol=0.01)
  x0, y0, x1, y1 = (int(round(v)) for v in box)
  inside = image[y0 + 2:y1 - 2, x0 + 2:x1 - 2]
  assert np.abs(inside - np.array(bd.MARKER)).max() <= 40, "box does not hold the marker"
  ring = np.concatenate([image[max(y0 - 3, 0), x0:x1], image[min(y1 + 2, height - 1), x0:x1]])
  assert np.abs(ring - np.array(bd.BACKGROUND)).max() <= 40, "marker larger than the box"
  # the EXIF tag is gone: viewers and TensorFlow now agree
  with Image.open(io.BytesIO(example["image/encoded"])) as im:
    assert im.getexif().get(0x0112, 1) == 1
