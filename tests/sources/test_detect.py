"""sources/detect.py: --format auto on every layout, Roboflow exports, ambiguous and empty inputs,
flat LabelImg folders."""
from __future__ import annotations

import json
import os
import shutil

import layouts
import pytest
from bad_data import convert

from beam_tfrecord.errors import EXIT_USAGE, UsageError
from beam_tfrecord.sources import detect

NAMES = ["cat", "dog", "person"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory, dataset):
  """Every layout, written once from the shared sample dataset."""
  base = tmp_path_factory.mktemp("layouts")
  images, image_dir = dataset.images, dataset.image_dir
  return layouts.write_every_layout(images, image_dir, base)


def test_each_layout_is_detected(tree, dataset):
  cases = {
      str(dataset.coco_file("train")): ("coco", "COCO JSON", [str(dataset.coco_file("train"))]),
      str(dataset.csv_file("val")): ("csv", "CSV file", [str(dataset.csv_file("val"))]),
      str(dataset.voc_dir): ("voc", "Annotations/", [str(dataset.voc_dir)]),
      str(tree / "ultralytics" / "shapes.yaml"): ("yolo", "shapes.yaml", None),
      str(tree / "darknet" / "data" / "obj.data"): ("yolo", "obj.data, Darknet", None),
      str(tree / "darknet" / "data"): ("yolo", "obj.data, Darknet", None),
      str(tree / "raccoon"): ("voc", "XMLs in annotations/", None),
      str(tree / "raccoon" / "annotations"): ("voc", "XMLs", None),
      str(tree / "folders"): ("folders", "split folders of class folders", None),
      str(tree / "folders" / "train"): ("folders", "class folders", None),
      str(tree / "roboflow-yolo"): ("yolo", "data.yaml", None),
  }
  for path, (fmt, reason, inputs) in cases.items():
    found = detect.detect([path])
    assert (found.format, found.reason) == (fmt, reason), path
    assert found.line() == f"detected: {fmt} ({reason})"
    assert list(found.inputs) == (inputs or [path]), path


def test_roboflow_split_folders_keep_their_names(tree):
  for kind, what in (("coco", "_annotations.coco.json"), ("csv", "_annotations.csv"),
                     ("voc", "XMLs beside the images")):
    root = tree / f"roboflow-{kind}"
    found = detect.detect([str(root)])
    assert found.format == kind
    assert found.reason == f"split folders train, valid with {what}"
    file = {"coco": "/_annotations.coco.json", "csv": "/_annotations.csv", "voc": ""}[kind]
    assert list(found.inputs) == [f"train={root}/train{file}", f"valid={root}/valid{file}"]


def test_split_prefix_is_kept(dataset):
  found = detect.detect([f"val={dataset.coco_file('val')}", f"train={dataset.coco_file('train')}"])
  assert found.format == "coco"
  assert list(found.inputs) == [f"val={dataset.coco_file('val')}",
                                f"train={dataset.coco_file('train')}"]


def test_ambiguous_empty_and_unknown_inputs(tree, tmp_path, dataset):
  both = tmp_path / "both"
  shutil.copytree(tree / "roboflow-yolo", both)
  (both / "extra.xml").write_text(layouts.labelimg_xml(dataset.images[0]))
  with pytest.raises(UsageError) as e:
    detect.detect([str(both)])
  assert "fits more than one format" in str(e.value)
  assert "yolo (data.yaml)" in str(e.value) and "voc (XMLs)" in str(e.value)
  assert "--format voc or --format yolo" in str(e.value)

  (tmp_path / "empty").mkdir()
  with pytest.raises(UsageError, match=r"cannot tell the format of .*empty: found nothing; "
                     r"give --format coco\|voc\|csv\|yolo\|folders"):
    detect.detect([str(tmp_path / "empty")])
  notes = tmp_path / "notes"
  notes.mkdir()
  (notes / "a.txt").write_text("x")
  with pytest.raises(UsageError, match=r"found 1 files \(\.txt\)"):
    detect.detect([str(notes)])
  not_coco = tmp_path / "config.json"
  not_coco.write_text(json.dumps({"model": "x", "layers": [1, 2]}))
  with pytest.raises(UsageError, match="a file of no known format"):
    detect.detect([str(not_coco)])
  with pytest.raises(UsageError, match="does not exist"):
    detect.detect([str(tmp_path / "missing")])
  with pytest.raises(UsageError, match="different formats"):
    detect.detect([str(dataset.coco_file("train")), str(dataset.csv_file("val"))])


def test_cli_ambiguous_exits_2_before_writing(tree, tmp_path, dataset, capsys):
  both = tmp_path / "both"
  shutil.copytree(tree / "roboflow-coco", both)
  (both / "data.yaml").write_text("train: train\nnames: [a]\n")
  out = tmp_path / "out"
  run = convert(["--input", str(both), "--output", str(out)], capsys)
  assert run.code == EXIT_USAGE
  assert run.stdout == ""
  lines = run.stderr.strip().splitlines()
  assert len(lines) == 1 and "--format coco or --format yolo" in lines[0]
  assert not out.exists()


@pytest.mark.e2e
def test_roboflow_coco_export_drops_the_id0_category(tree, dataset, tmp_path, capsys):
  """One command for the whole export: splits train/valid as named, the unused id-0 dataset
  category dropped with a warning, never in label_map.pbtxt."""
  out = tmp_path / "out"
  run = convert(["--input", str(tree / "roboflow-coco"), "--output", str(out)], capsys)
  assert run.code == 0, run.stderr
  assert ("detected: coco (split folders train, valid with _annotations.coco.json)"
          in run.stdout)
  ids = {n: i for i, n in enumerate(NAMES, start=1)}
  assert run.manifest["label_map"] == ids
  assert "id: 0" not in (out / "label_map.pbtxt").read_text()
  warnings = run.errors_where(reason="background_category")
  assert len(warnings) == 2 and {w["level"] for w in warnings} == {"warning"}
  assert all("shapes" in w["message"] for w in warnings)
  assert len(run.errors) == 2
  split_of = lambda im: layouts.ROBOFLOW_SPLIT[im.split]  # noqa: E731
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, ids, split_of)


@pytest.mark.e2e
def test_roboflow_yolo_export_keeps_valid(tree, dataset, tmp_path, capsys):
  run = convert(["--input", str(tree / "roboflow-yolo"), "--output", str(tmp_path / "o")],
                capsys)
  assert run.code == 0 and "detected: yolo (data.yaml)" in run.stdout
  assert sorted(run.manifest["splits"]) == ["train", "valid"]
  ids = {n: i for i, n in enumerate(NAMES, start=1)}
  assert run.manifest["label_map"] == ids
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, ids,
                            lambda im: layouts.ROBOFLOW_SPLIT[im.split])


@pytest.mark.e2e
def test_roboflow_csv_export_keeps_its_background_images(tree, dataset, tmp_path, capsys):
  """Roboflow's CSV has rows only for images with boxes; the images beside it without a row
  are background images, kept as the same export in the other formats keeps them."""
  backgrounds = [im for im in dataset.images if not im.boxes]
  assert backgrounds
  run = convert(["--input", str(tree / "roboflow-csv"), "--output", str(tmp_path / "o")],
                capsys)
  assert run.code == 0 and "detected: csv (split folders" in run.stdout
  ids = {n: i for i, n in enumerate(NAMES, start=1)}
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, ids,
                            lambda im: layouts.ROBOFLOW_SPLIT[im.split])
  assert run.errors == []
  # a CSV whose images live elsewhere (--images) is not a Roboflow export: nothing is added
  plain = tmp_path / "plain"
  plain.mkdir()
  shutil.copy(tree / "roboflow-csv" / "train" / "_annotations.csv", plain / "boxes.csv")
  run = convert(["--input", str(plain / "boxes.csv"), "--images",
                 str(tree / "roboflow-csv" / "train"), "--output", str(tmp_path / "p")], capsys)
  assert run.code == 0
  listed = {im.file_name for im in dataset.images if im.boxes and im.split == "train"}
  assert {os.path.basename(e["filename"]) for e in run.examples} == listed


@pytest.mark.e2e
def test_raccoon_layout_with_and_without_images(tree, dataset, tmp_path, capsys):
  """XMLs in annotations/, images in images/: --images names the folder; without it the
  run stops before starting and says which option to give."""
  racoon = tree / "raccoon"
  run = convert(["--format", "voc", "--input", str(racoon / "annotations"), "--output",
                 str(tmp_path / "none")], capsys)
  assert run.code == EXIT_USAGE and "--images" in run.stderr and str(racoon / "images") in \
      run.stderr
  run = convert(["--input", str(racoon / "annotations"), "--images", str(racoon / "images"),
                 "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0 and "detected: voc (XMLs)" in run.stdout
  ids = {n: i for i, n in enumerate(NAMES, start=1)}
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, ids, lambda im: "train")
  assert sorted(e["filename"] for e in run.examples) == sorted(
      im.file_name for im in dataset.images)
