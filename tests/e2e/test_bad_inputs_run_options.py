"""Options that apply to a whole run, on small corpora of bad inputs: --bbox-policy, --exif-frame,
--max-pixels, --verify-images, --allow-absolute-paths, --strict, --max-error-rate."""
from __future__ import annotations

import os

import bad_data as bd
import pytest
from bad_checks import (CATEGORIES, GOOD, assert_coco_accounting,
                        assert_marker_boxed, check_report_format)

# ============================================================================================
# Whole-run options: small runs


@pytest.fixture(scope="module")
def drop_run(tmp_path_factory):
  """--bbox-policy drop --max-pixels 5000 --exif-frame stored --verify-images."""
  root = str(tmp_path_factory.mktemp("drop"))
  images = os.path.join(root, "images")
  coco = bd.Coco(images, CATEGORIES)
  coco.image(1, "partly.jpg", bd.jpeg(), 64, 48)
  coco.ann(1, *GOOD)
  coco.ann(1, 1, [50, 40, 30, 20])                 # partly outside -> dropped
  coco.image(2, "zero.jpg", bd.jpeg(), 64, 48)
  coco.ann(2, *GOOD)
  coco.ann(2, 1, [5, 5, 0, 3])                     # empty -> dropped, always
  coco.image(3, "big.jpg", bd.jpeg((100, 100)), 100, 100)   # 10000 > 5000 pixels
  coco.ann(3, *GOOD)
  photos = {}
  for image_id, (name, orientation) in enumerate((("s3.jpg", 3), ("s6.jpg", 6)), start=4):
    photo = photos[name] = bd.oriented_photo(orientation, (72, 48), (10, 6, 34, 24))
    coco.image(image_id, name, photo.data, *((72, 48) if orientation == 3 else (None, None)))
    box = photo.stored_box
    coco.ann(image_id, 2, [box[0], box[1], box[2] - box[0], box[3] - box[1]])
  coco.image(6, "bad_zlib.png", bd.png_bad_zlib(), 64, 48)
  coco.ann(6, *GOOD)
  coco.image(7, "bad_crc.png", bd.png_bad_crc(), 64, 48)
  coco.ann(7, *GOOD)
  path = coco.write(os.path.join(root, "drop.json"))
  run = bd.convert(["--format", "coco", "--input", path, "--images", images,
                    "--output", os.path.join(root, "out"), "--bbox-policy", "drop",
                    "--max-pixels", "5000", "--exif-frame", "stored", "--verify-images"])
  run.photos = photos
  run.coco = coco
  return run


def test_bbox_policy_drop(drop_run):
  run = drop_run
  assert run.code == 0
  check_report_format(run)
  partly = run.by_filename()["partly.jpg"]
  assert len(partly["image/object/bbox/xmin"]) == 1
  [error] = run.errors_where(key="partly.jpg")
  assert (error["reason"], error["level"], error["stage"]) == (
      "bbox_partly_outside", "object", "validate")
  [error] = run.errors_where(key="zero.jpg")
  assert (error["reason"], error["level"]) == ("bbox_empty", "object")
  assert run.manifest["totals"]["clipped_boxes"] == 0


def test_max_pixels_rejects_normal_image(drop_run):
  [error] = drop_run.errors_where(key="big.jpg")
  assert (error["stage"], error["reason"], error["level"]) == (
      "decode", "decompression_bomb", "image")
  assert "big.jpg" not in drop_run.by_filename()


@pytest.mark.parametrize("name", ["s3.jpg", "s6.jpg"])
def test_exif_frame_stored_override(drop_run, name):
  """--exif-frame stored: boxes are in the raw pixel frame even where 'auto' would have said
  displayed (orientation 3, and orientation 6 without an annotated size)."""
  assert_marker_boxed(drop_run.by_filename()[name], drop_run.photos[name])


def test_verify_images(drop_run):
  [error] = drop_run.errors_where(key="bad_zlib.png")
  assert (error["stage"], error["reason"], error["level"]) == ("decode", "corrupt_image", "image")


def test_verify_images_rejects_bad_crc(drop_run):
  [error] = drop_run.errors_where(key="bad_crc.png")
  assert (error["stage"], error["reason"]) == ("decode", "corrupt_image")


def test_drop_run_accounting(drop_run):
  assert_coco_accounting(drop_run, drop_run.coco)


@pytest.fixture(scope="module")
def error_strict_run(tmp_path_factory):
  """--bbox-policy error --strict."""
  root = str(tmp_path_factory.mktemp("error"))
  images = os.path.join(root, "images")
  coco = bd.Coco(images, CATEGORIES)
  coco.image(1, "partly.jpg", bd.jpeg(), 64, 48)
  coco.ann(1, *GOOD)
  coco.ann(1, 1, [50, 40, 30, 20])
  coco.image(2, "good.jpg", bd.jpeg(), 64, 48)
  coco.ann(2, *GOOD)
  coco.image(3, "zero.jpg", bd.jpeg(), 64, 48)
  coco.ann(3, *GOOD)
  coco.ann(3, 1, [5, 5, 0, 3])
  path = coco.write(os.path.join(root, "error.json"))
  run = bd.convert(["--format", "coco", "--input", path, "--images", images,
                    "--output", os.path.join(root, "out"), "--bbox-policy", "error",
                    "--strict"])
  run.coco = coco
  return run


def test_bbox_policy_error_rejects_image(error_strict_run):
  run = error_strict_run
  check_report_format(run)
  [error] = run.errors_where(key="partly.jpg")
  assert (error["reason"], error["level"], error["stage"]) == (
      "bbox_partly_outside", "image", "validate")
  assert "partly.jpg" not in run.by_filename()
  assert "good.jpg" in run.by_filename()


def test_bbox_policy_error_still_drops_empty_boxes(error_strict_run):
  run = error_strict_run
  example = run.by_filename()["zero.jpg"]
  assert len(example["image/object/bbox/xmin"]) == 1
  [error] = run.errors_where(key="zero.jpg")
  assert (error["reason"], error["level"]) == ("bbox_empty", "object")


def test_error_run_accounting(error_strict_run):
  assert_coco_accounting(error_strict_run, error_strict_run.coco)


def test_strict_fails_with_report(error_strict_run):
  run = error_strict_run
  assert run.code == 3
  assert run.manifest["status"].startswith("failed")
  assert run.errors  # the report is written
  assert run.manifest["errors"]["rate"] > 0


@pytest.fixture(scope="module")
def absolute_rate_run(tmp_path_factory):
  """--allow-absolute-paths --max-error-rate 0.5 --exif-frame displayed."""
  root = str(tmp_path_factory.mktemp("absolute"))
  images = os.path.join(root, "images")
  outside = bd.write_bytes(os.path.join(root, "elsewhere", "abs.jpg"), bd.jpeg())
  coco = bd.Coco(images, CATEGORIES)
  coco.image(1, outside, None, 64, 48)
  coco.ann(1, *GOOD)
  coco.image(2, "good.jpg", bd.jpeg(), 64, 48)
  coco.ann(2, *GOOD)
  coco.image(3, "missing.jpg", None, 64, 48)
  coco.ann(3, *GOOD)
  photo = bd.oriented_photo(6)
  # annotated with the stored size, but boxes drawn on the displayed picture
  coco.image(4, "d6.jpg", photo.data, *photo.stored_size)
  box = photo.displayed_box
  coco.ann(4, 2, [box[0], box[1], box[2] - box[0], box[3] - box[1]])
  path = coco.write(os.path.join(root, "abs.json"))
  run = bd.convert(["--format", "coco", "--input", path, "--images", images, "--output",
                    os.path.join(root, "out"), "--allow-absolute-paths", "--max-error-rate",
                    "0.5", "--exif-frame", "displayed"])
  run.outside = outside
  run.photo = photo
  run.coco = coco
  return run


def test_absolute_run_accounting(absolute_rate_run):
  assert_coco_accounting(absolute_rate_run, absolute_rate_run.coco)


def test_allow_absolute_paths(absolute_rate_run):
  run = absolute_rate_run
  example = run.by_filename()[run.outside]
  assert example["image/encoded"] == open(run.outside, "rb").read()


def test_max_error_rate_tolerates_few_errors(absolute_rate_run):
  run = absolute_rate_run
  assert run.code == 0
  assert run.manifest["status"] == "ok"
  [error] = [e for e in run.errors if e["level"] != "warning"]
  assert (error["reason"], error["key"]) == ("missing_image", "missing.jpg")
  assert run.manifest["errors"]["rate"] == pytest.approx(1 / 4)
  check_report_format(run)


def test_exif_frame_displayed_override(absolute_rate_run):
  """--exif-frame displayed: the annotated size equals the stored size (auto would transform
  the boxes) but the boxes are taken as drawn on the displayed picture."""
  run = absolute_rate_run
  assert_marker_boxed(run.by_filename()["d6.jpg"], run.photo)
  [warning] = run.errors_where(key="d6.jpg")
  assert (warning["reason"], warning["level"]) == ("size_mismatch", "warning")
