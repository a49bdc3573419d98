"""records/masks.py and --include-masks: COCO polygons and RLE (crowd included) -> image/object/mask.

The fixture (tests/coco_masks.py) is a COCO instances file laid out like COCO's own: polygons (one
object in two parts), a crowd region as uncompressed RLE (as COCO writes crowds), a compressed RLE
string (as detectron2 / pycocotools.mask.encode write them), an object whose segmentation is broken
and one without any. Every mask is read back the way official/vision's
TfExampleDecoder(include_mask=True) reads it (its parsing is replicated with tf.io, since
tf-models-official is not installed here) and compared with pycocotools' annToMask.
"""
from __future__ import annotations

import bad_data
import numpy as np
import pytest
from coco_masks import H, W, _rle, make_coco
from PIL import Image, ImageDraw

from beam_tfrecord.records.model import InputError
from beam_tfrecord.records import masks


def decode_like_official(serialized: bytes) -> dict:
  """official/vision TfExampleDecoder(include_mask=True).decode, replicated with tf.io:
  its feature spec, dense conversion, and PNG decoding of every mask (channels=1, uint8)."""
  import tensorflow as tf
  spec = {
      "image/encoded": tf.io.FixedLenFeature((), tf.string),
      "image/height": tf.io.FixedLenFeature((), tf.int64, -1),
      "image/width": tf.io.FixedLenFeature((), tf.int64, -1),
      "image/source_id": tf.io.FixedLenFeature((), tf.string),
      "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
      "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
      "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
      "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
      "image/object/class/label": tf.io.VarLenFeature(tf.int64),
      "image/object/area": tf.io.VarLenFeature(tf.float32),
      "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
      "image/object/mask": tf.io.VarLenFeature(tf.string),
  }
  parsed = tf.io.parse_single_example(serialized, spec)
  parsed = {k: tf.sparse.to_dense(v, default_value="" if v.dtype == tf.string else 0)
            if isinstance(v, tf.SparseTensor) else v for k, v in parsed.items()}

  def decode_png_mask(png):
    mask = tf.squeeze(tf.io.decode_png(png, channels=1, dtype=tf.uint8), axis=-1)
    return tf.cast(mask, tf.float32)

  pngs = parsed["image/object/mask"]
  height, width = parsed["image/height"], parsed["image/width"]
  masks_ = (tf.map_fn(decode_png_mask, pngs, fn_output_signature=tf.float32)
            if int(tf.size(pngs)) else tf.zeros([0, height, width], tf.float32))
  return {"source_id": parsed["image/source_id"].numpy().decode(),
          "image": tf.io.decode_image(parsed["image/encoded"], channels=3).numpy(),
          "height": int(height), "width": int(width),
          "classes": parsed["image/object/class/label"].numpy().tolist(),
          "is_crowd": parsed["image/object/is_crowd"].numpy().tolist(),
          "area": parsed["image/object/area"].numpy().tolist(),
          "boxes": np.stack([parsed[f"image/object/bbox/{k}"].numpy()
                             for k in ("ymin", "xmin", "ymax", "xmax")], axis=-1),
          "masks": masks_.numpy(), "pngs": pngs.numpy().tolist()}


@pytest.fixture(scope="module")
def mask_run(tmp_path_factory):
  root = tmp_path_factory.mktemp("masks")
  annotations = make_coco(root / "data")
  output = str(root / "out")
  run = bad_data.convert(["--format=coco", f"--input={annotations}", f"--images={annotations.parent / 'images'}",
                          "--output", output,
                          "--include-masks"])
  assert run.code == 0
  return annotations, run


def _shard_records(output: str):
  import tensorflow as tf

  from beam_tfrecord import reader
  files = reader.shard_files(output, "train")
  return [r.numpy() for r in tf.data.TFRecordDataset(files)]


@pytest.mark.e2e
def test_masks_equal_pycocotools_ann_to_mask(mask_run):
  from pycocotools.coco import COCO
  annotations, run = mask_run
  coco = COCO(str(annotations))
  kept = {1: [101, 102], 2: [103, 104]}  # 105 (bad) and 106 (missing) are dropped
  decoded = {d["source_id"]: d for d in map(decode_like_official, _shard_records(run.output))}
  assert sorted(decoded) == ["1", "2"]
  for image_id, ann_ids in kept.items():
    d = decoded[str(image_id)]
    assert d["masks"].shape == (len(ann_ids), H, W)
    assert len(d["boxes"]) == len(ann_ids) == len(d["classes"])
    for mask, ann_id in zip(d["masks"], ann_ids):
      expected = coco.annToMask(coco.anns[ann_id])
      assert expected.sum() > 0
      np.testing.assert_array_equal(mask.astype(np.uint8), expected, err_msg=str(ann_id))
    assert d["is_crowd"] == [coco.anns[a]["iscrowd"] for a in ann_ids]
    assert d["area"] == pytest.approx([coco.anns[a]["area"] for a in ann_ids])


@pytest.mark.e2e
def test_masks_are_resized_with_the_image(tmp_path):
  """--max-side: each mask is annToMask at the source size, resized (nearest) to the image."""
  from pycocotools.coco import COCO
  annotations = make_coco(tmp_path / "data")
  output = str(tmp_path / "out")
  run = bad_data.convert(["--format=coco", f"--input={annotations}",
                          f"--images={annotations.parent / 'images'}", "--output", output,
                          "--include-masks", "--max-side=32"])
  assert run.code == 0
  coco = COCO(str(annotations))
  decoded = {d["source_id"]: d for d in map(decode_like_official, _shard_records(output))}
  for image_id, ann_ids in {1: [101, 102], 2: [103, 104]}.items():
    d = decoded[str(image_id)]
    assert d["image"].shape[:2] == (24, 32) == (d["height"], d["width"])
    assert d["masks"].shape == (len(ann_ids), 24, 32)
    for mask, ann_id in zip(d["masks"], ann_ids):
      expected = np.asarray(Image.fromarray(coco.annToMask(coco.anns[ann_id])).resize(
          (32, 24), Image.Resampling.NEAREST))
      np.testing.assert_array_equal(mask.astype(np.uint8), expected)


@pytest.mark.e2e
def test_mask_pngs_use_the_official_encoding(mask_run):
  """8-bit grayscale PNG holding 0 and 1 (not 0/255, not 1-bit), image-sized."""
  _, run = mask_run
  import io
  for d in map(decode_like_official, _shard_records(run.output)):
    for png in d["pngs"]:
      with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG" and image.mode == "L" and image.size == (W, H)
        assert set(np.unique(np.asarray(image))) == {0, 1}


@pytest.mark.e2e
def test_unreadable_segmentations_are_object_errors(mask_run):
  _, run = mask_run
  errors = {e["reason"]: e for e in run.errors}
  assert set(errors) == {"bad_segmentation", "missing_segmentation"}
  assert all(e["level"] == "object" and e["key"] == "b.png" for e in errors.values())
  assert "annotation id 105" in errors["bad_segmentation"]["message"]
  assert "annotation id 106" in errors["missing_segmentation"]["message"]
  assert run.manifest["totals"]["objects"] == 4
  assert run.manifest["features"]["image/object/mask"] == {"dtype": "string", "kind": "var"}


@pytest.mark.e2e
def test_without_include_masks_no_mask_and_no_segmentation_carried(tmp_path):
  """The segmentation only travels (through the shuffles) when masks are asked for."""
  import apache_beam as beam
  from apache_beam.testing.test_pipeline import TestPipeline
  from apache_beam.testing.util import assert_that

  from beam_tfrecord.records import batches
  from beam_tfrecord.sources.coco import ReadCoco
  annotations = make_coco(tmp_path / "data")
  with TestPipeline("FnApiRunner") as p:  # one independent branch each way
    for include in (False, True):
      out = p | f"Read[{include}]" >> ReadCoco(
          [(None, str(annotations), str(tmp_path / "data" / "images"))], include_masks=include)
      carried = out.images | f"Carried[{include}]" >> beam.FlatMap(  # batches of images
          lambda batch: [o.segmentation is not None for a in batches.annotations(batch)
                         for o in a.objects])

      def check(values, include=include):
        assert len(values) == 6 and set(values) == ({True, False} if include else {False})
      assert_that(carried, check, label=f"Check[{include}]")
  run = bad_data.convert(["--format=coco", f"--input={annotations}",
                          f"--images={annotations.parent / 'images'}",
                          "--output", str(tmp_path / "out")])
  assert run.code == 0 and "image/object/mask" not in run.manifest["features"]
  assert all("image/object/mask" not in e for e in run.examples)


def test_include_masks_needs_a_format_with_segmentations(dataset, tmp_path, capsys):
  from beam_tfrecord import cli
  code = cli.main(["convert", "--format=voc", *dataset.inputs("voc"),
                   f"--output={tmp_path / 'out'}", "--include-masks"])
  err = capsys.readouterr().err
  assert code == 2 and "--include-masks" in err and "Traceback" not in err
  assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# The pure functions
# ---------------------------------------------------------------------------------------------

def test_rasterize_matches_ann_to_mask_for_each_kind(tmp_path):
  from pycocotools.coco import COCO
  annotations = make_coco(tmp_path)
  coco = COCO(str(annotations))
  for ann_id in (101, 102, 103, 104):
    ann = coco.anns[ann_id]
    np.testing.assert_array_equal(masks.rasterize_coco(ann["segmentation"], W, H),
                                  coco.annToMask(ann))


def test_compressed_runs_agree_with_pycocotools():
  from pycocotools import mask as coco_mask
  rng = np.random.default_rng(0)
  for _ in range(20):
    mask = (rng.random((37, 23)) > 0.6).astype(np.uint8)
    rle = coco_mask.encode(np.asfortranarray(mask))
    runs = masks._compressed_runs(rle["counts"].decode())
    assert runs == _rle(mask, compressed=False)["counts"]


@pytest.mark.parametrize("segmentation", [
    [], [[1, 2, 3, 4]], [[1, 2, 3, 4, 5]], [[1, 2, 3, 4, 5, float("nan")]], [["a"] * 6],
    {"size": [H, W], "counts": [5, 3, 10]},            # runs cover too few pixels
    {"size": [H, W], "counts": [5, 3, 10 ** 6]},       # too many (pycocotools would overrun)
    {"size": [H, W], "counts": [-1, W * H + 1]},
    {"size": [H, W], "counts": "zzzz"},                # valid characters, wrong total
    {"size": [H, W], "counts": "\x7f\x00"},           # invalid characters
    {"size": [H + 1, W], "counts": [(H + 1) * W]},     # not the image's size
    {"counts": [W * H]}, {"size": [H, W]}, "polygon", 7,
])
def test_bad_segmentations_raise_input_error(segmentation):
  with pytest.raises(InputError) as e:
    masks.rasterize_coco(segmentation, W, H)
  assert e.value.reason == "bad_segmentation"


def test_rasterize_polygon_in_pixels_covers_the_drawn_shape():
  """A YOLO-style polygon (normalized points times the image size) covers the shape drawn
  there and nothing far outside it."""
  image = Image.new("L", (W, H), 0)
  points = [(10, 8), (50, 12), (30, 40)]
  ImageDraw.Draw(image).polygon(points, fill=1)
  drawn = np.asarray(image)
  normalized = [v for x, y in points for v in (x / W, y / H)]
  pixel = [v * (W if i % 2 == 0 else H) for i, v in enumerate(normalized)]
  mask = masks.rasterize_polygon(pixel, W, H)
  assert mask.shape == (H, W) and mask.dtype == np.uint8
  overlap = (mask & drawn).sum() / drawn.sum()
  assert overlap > 0.9 and mask.sum() <= drawn.sum() * 1.1
  assert mask[20, 30] == 1 and mask[45, 5] == 0


def test_transform_turns_and_resizes_like_the_image():
  mask = np.zeros((4, 6), np.uint8)
  mask[0, 0] = 1  # top-left of the stored image
  turned = masks.transform(mask, 6)  # rotated 90 clockwise to display: top-right
  assert turned.shape == (6, 4) and turned[0, 3] == 1 and turned.sum() == 1
  bigger = masks.transform(mask, 1, (12, 8))
  assert bigger.shape == (8, 12) and bigger[:2, :2].all() and bigger.sum() == 4


# ---------------------------------------------------------------------------------------------
# YOLO segmentation lines
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_yolo_segmentation_polygons_become_masks(tmp_path):
  """Ultralytics segmentation labels (`class x1 y1 x2 y2 ...`, normalized): each polygon is
  scaled to the image and rasterized like COCO's (masks.rasterize_polygon); a box-only line
  has no segmentation, so with --include-masks it is an object-level error."""
  root = tmp_path / "seg"
  (root / "images" / "train").mkdir(parents=True)
  (root / "labels" / "train").mkdir(parents=True)
  Image.new("RGB", (W, H), (90, 120, 150)).save(root / "images" / "train" / "a.png")
  triangle = [0.1, 0.1, 0.6, 0.2, 0.3, 0.8]
  square = [0.5, 0.5, 0.9, 0.5, 0.9, 0.9, 0.5, 0.9]
  (root / "labels" / "train" / "a.txt").write_text(
      "0 " + " ".join(map(str, triangle)) + "\n1 " + " ".join(map(str, square)) +
      "\n0 0.5 0.5 0.2 0.2\n", encoding="utf-8")
  (tmp_path / "seg.yaml").write_text("path: seg\ntrain: images/train\nnames:\n  0: cat\n"
                                     "  1: dog\n", encoding="utf-8")
  output = str(tmp_path / "out")
  run = bad_data.convert(["--format=yolo", f"--input={tmp_path / 'seg.yaml'}", "--output",
                          output, "--include-masks"])
  assert run.code == 0
  assert "image/object/mask" in run.manifest["features"]
  [decoded] = map(decode_like_official, _shard_records(output))
  assert decoded["classes"] == [1, 2] and decoded["masks"].shape == (2, H, W)
  for mask, polygon in zip(decoded["masks"], (triangle, square)):
    pixels = [v * (W if i % 2 == 0 else H) for i, v in enumerate(polygon)]
    np.testing.assert_array_equal(mask.astype(np.uint8),
                                  masks.rasterize_polygon(pixels, W, H))
    assert mask.sum() > 0
  assert [e["reason"] for e in run.errors] == ["missing_segmentation"]
  # without --include-masks the same labels give three boxes and no mask
  plain = bad_data.convert(["--format=yolo", f"--input={tmp_path / 'seg.yaml'}", "--output",
                            str(tmp_path / "plain")])
  assert plain.code == 0 and "image/object/mask" not in plain.manifest["features"]
  assert plain.manifest["totals"]["objects"] == 3


def test_polygon_json_round_trip():
  text = masks.polygon_json([0.0, 0.0, 1.0, 0.0, 1.0, 1.0], normalized=True)
  np.testing.assert_array_equal(masks.from_json(text, 8, 4),
                                masks.rasterize_polygon([0, 0, 8, 0, 8, 4], 8, 4))
  with pytest.raises(InputError):
    masks.from_json(masks.polygon_json([0.0, 0.0, 1.0]), 8, 4)
