"""sources/voc/class_pngs.py and the VOC checks with --schema deeplab: SegmentationClass/ PNGs
joined with ImageSets/Segmentation by id, and what is refused before running. The layout is
VOC's own (tests/voc_segmentation.py); the conversion itself is in
tests/e2e/test_deeplab_end_to_end.py."""
from __future__ import annotations

import pytest
import voc_segmentation as vs

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records import masks
from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.sources import voc
from beam_tfrecord.sources.voc import class_pngs


def _reader(voc_dir, scope=("train", "trainval", "val"), split=None):
  """As ReadVocSegmentation makes it: the lists make the splits, unless `split` is given."""
  lists = {} if split else voc.split_files(str(voc_dir), class_pngs.SETS_FOLDER)
  reader = class_pngs.Reader(str(voc_dir / "JPEGImages"), scope if lists else (), lists, split)
  return lambda element: list(reader(element))


def _png(voc_dir, stem):
  return str(voc_dir / "SegmentationClass" / f"{stem}.png")


def test_voc_classes_are_the_palette_indices():
  assert class_pngs.categories()[0] == ("aeroplane", 1)
  assert class_pngs.categories()[-1] == ("tvmonitor", 20)
  assert tuple(name for name, _ in class_pngs.categories()) == vs.VOC_CLASSES
  assert list(vs.VOC_CLASSES) == sorted(vs.VOC_CLASSES)  # what sorted names would give too


def test_an_id_becomes_its_image_with_the_png_bytes_as_its_object(tmp_path):
  voc_dir = vs.write_voc(tmp_path)
  reader = _reader(voc_dir)
  stem = "2007_000032"
  [ann] = reader((stem, {"png": [_png(voc_dir, stem)], "lists": ["train", "trainval"]}))
  assert isinstance(ann, ImageAnnotation)
  assert (ann.key, ann.split, ann.source_id) == (f"{stem}.jpg", "train", stem)
  assert ann.uri.endswith(f"JPEGImages/{stem}.jpg") and ann.source == _png(voc_dir, stem)
  [obj] = ann.objects
  assert masks.carried_class_png(obj.segmentation) == (
      voc_dir / "SegmentationClass" / f"{stem}.png").read_bytes()
  assert class_pngs.png_stem(_png(voc_dir, stem)) == stem
  assert class_pngs.class_png_files(str(voc_dir)) == sorted(
      _png(voc_dir, s) for s in vs.IMAGES)


def test_ids_without_png_or_split_are_reported(tmp_path):
  voc_dir = vs.write_voc(tmp_path)
  reader = _reader(voc_dir)
  [missing] = reader(("2009_000001", {"png": [], "lists": ["train", "trainval"]}))
  assert (missing.reason, missing.level, missing.key) == ("missing_annotation", "image",
                                                          "2009_000001")
  assert "ImageSets/Segmentation/train" in missing.message
  assert "SegmentationClass/ has no 2009_000001.png" in missing.message
  assert reader(("2009_000002", {"png": [], "lists": []})) == []  # listed nowhere: no image
  stem = "2007_000039"
  [unlisted] = reader((stem, {"png": [_png(voc_dir, stem)], "lists": []}))
  assert (unlisted.reason, unlisted.level) == ("not_in_split", "image")
  assert "no ImageSets/Segmentation list" in unlisted.message
  [excluded] = _reader(voc_dir, scope=("train",))(
      (stem, {"png": [_png(voc_dir, stem)], "lists": ["val"]}))
  assert (excluded.reason, excluded.level) == ("excluded_by_image_sets", "warning")


def test_two_pngs_of_one_id_and_oversized_pngs(tmp_path, monkeypatch):
  voc_dir = vs.write_voc(tmp_path)
  stem = "2007_000032"
  upper = voc_dir / "SegmentationClass" / f"{stem}.PNG"
  upper.write_bytes((voc_dir / "SegmentationClass" / f"{stem}.png").read_bytes())
  found = list(_reader(voc_dir, split="train")(
      (stem, {"png": [str(upper), _png(voc_dir, stem)], "lists": []})))
  assert [type(f) for f in found] == [ErrorRecord, ImageAnnotation]
  assert (found[0].reason, found[0].level) == ("duplicate_image", "warning")
  monkeypatch.setattr(class_pngs, "MAX_CLASS_PNG_BYTES", 10)
  [large] = _reader(voc_dir)((stem, {"png": [_png(voc_dir, stem)], "lists": ["train"]}))
  assert (large.reason, large.level) == ("too_large", "image")


def test_splits_come_from_image_sets_segmentation(tmp_path):
  voc_dir = vs.write_voc(tmp_path)
  (voc_dir / "ImageSets" / "Segmentation" / "train_aug.txt").write_text("2007_000032\n")
  assert sorted(voc.split_files(str(voc_dir), "Segmentation")) == [
      "train", "train_aug", "trainval", "val"]
  assert sorted(voc.split_files(str(voc_dir))) == ["train", "trainval", "val"]


def test_a_segmentation_only_voc_directory_is_detected(tmp_path):
  voc_dir = vs.write_voc(tmp_path, annotations=False)
  (voc_dir / "Annotations").rmdir()
  assert voc.detect(str(voc_dir)) == "SegmentationClass/"
  assert not voc.is_flat(str(voc_dir))
  with pytest.raises(UsageError, match="give --schema deeplab"):
    voc.check_input([str(voc_dir)])


def test_deeplab_checks_before_running(tmp_path):
  voc_dir = vs.write_voc(tmp_path)
  voc.checks.check_segmentation([str(voc_dir)], "train,val")
  with pytest.raises(UsageError, match="--label-map"):
    voc.checks.check_segmentation([str(voc_dir)], selecting=True)
  with pytest.raises(UsageError, match="Segmentation .it has train, trainval, val"):
    voc.checks.check_segmentation([str(voc_dir)], "test")
  empty = tmp_path / "empty"
  (empty / "Annotations").mkdir(parents=True)
  with pytest.raises(UsageError, match="no SegmentationClass/\\*.png"):
    voc.checks.check_segmentation([str(empty)])
