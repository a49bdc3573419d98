"""Nothing vanishes with exit 0 (issue "Trust, second round", item 8).

A split the input declares and that ends with no example fails the run (exit 4, naming it);
a file the source puts in two splits (Ultralytics' coco128.yaml: train = val) is written to
both, with one warning per file; a run whose every object was rejected (a label map that
matches no class) fails (exit 4). A shard whose images were all rejected is an empty, valid
TFRecord file listed with 0 examples, and verify and inspect agree with the manifest.
Each case was reproduced on the code before: exit 0, val missing or every box gone.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict

import pytest
from conftest import read_output
from layouts import write_label_map

from beam_tfrecord import cli
from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.pipeline import declared_splits


def convert(*args) -> int:
  return cli.main(["convert", "--format=coco", "--runner=DirectRunner", *map(str, args)])


def files(out: Path) -> Dict[str, bytes]:
  """The output's own files, byte for byte (a failed run's report directory aside)."""
  return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def failure_line(err: str) -> str:
  """The one line a failed run prints on stderr (after the summary, on stdout)."""
  assert "Traceback" not in err, err
  [line] = [l for l in err.splitlines() if l.startswith("beam-tfrecord:")]
  return line


def report(out: Path) -> Dict:
  [run] = [p for p in out.iterdir() if p.name.startswith(outputs.RUN_PREFIX)]
  return json.loads((run / "manifest.json").read_text(encoding="utf-8"))


def test_declared_splits_are_the_sources_or_those_of_split_fractions():
  assert declared_splits(None, ["val", "train"]) == ["train", "val"]
  assert declared_splits(None, []) == []  # one unnamed input: only 'nothing at all' fails
  assert declared_splits({"train": 1.0, "val": 0.0}, ["a"]) == ["train"]  # val=0: asked


def test_a_declared_split_that_loses_every_image_fails(small_dataset, tmp_path, capsys):
  """COCO val whose images are all missing (a Darknet list with Colab paths lost all of
  train the same way): exit 4 naming the split and why; the earlier output is untouched."""
  ds, out = small_dataset, tmp_path / "out"
  assert convert(*ds.inputs("coco"), f"--output={out}") == 0
  before = files(out)
  val = [im.file_name for im in ds.images if im.split == "val"]
  assert val and len(val) < len(ds.images)
  for name in val:
    (ds.image_dir / name).unlink()
  capsys.readouterr()
  assert convert(*ds.inputs("coco"), f"--output={out}", "--overwrite") == 4
  line = failure_line(capsys.readouterr().err)
  assert "split 'val' declared by the input ended with no example" in line, line
  assert f"main reasons: missing_image {len(val)}" in line and "unchanged" in line, line
  assert files(out) == before
  manifest = report(out)
  assert manifest["outcome"] == "empty" and list(manifest["splits"]) == ["train"]


def test_a_split_fraction_that_gets_no_image_fails(small_dataset, tmp_path, capsys):
  ds, out = small_dataset, tmp_path / "out"
  args = (f"--input={ds.coco_file('train')}", f"--images={ds.image_dir}")
  assert convert(*args, f"--output={out}", "--split=train=0.999,holdout=0.001") == 4
  assert "split 'holdout' declared" in failure_line(capsys.readouterr().err)
  assert convert(*args, f"--output={tmp_path / 'zero'}", "--split=train=1,holdout=0") == 0


@pytest.mark.parametrize("sink", ["shards", "beam"])
def test_a_file_in_two_splits_is_written_to_both(small_dataset, tmp_path, sink):
  """train = val: every image in both splits, the same example in each, one warning per
  image; a file twice in ONE split (a copy of train's file) stays one image there. Train's
  shard is byte for byte that of a run without val."""
  ds = small_dataset
  train, copy = ds.coco_file("train"), tmp_path / "copy.json"
  shutil.copy(train, copy)
  out, alone = tmp_path / "out", tmp_path / "alone"
  common = (f"--images={ds.image_dir}", f"--sink={sink}", "--num-shards=1")
  assert convert(f"--input=train={train}", f"--input=train={copy}", f"--input=val={train}",
                 *common, f"--output={out}") == 0
  run = read_output(out)
  names = sorted(im.file_name for im in ds.images if im.split == "train")
  written = {split: sorted(r.values["image/filename"].decode() for r in records)
             for split, records in run.records.items()}
  assert written == {"train": names, "val": names}
  assert ({r.serialized for r in run.records["train"]} ==
          {r.serialized for r in run.records["val"]})
  warnings = sorted((e["reason"], e["level"], e["key"]) for e in run.errors)
  assert warnings == sorted([("in_two_splits", "warning", n) for n in names] +
                            [("duplicate_image", "warning", n) for n in names])
  assert run.manifest["outcome"] == "ok"
  assert {s: e["examples"] for s, e in run.manifest["splits"].items()} == {
      "train": len(names), "val": len(names)}
  assert cli.main(["verify", str(out)]) == 0
  assert convert(f"--input=train={train}", *common, f"--output={alone}") == 0
  assert run.shard_files["train"][0].read_bytes() == \
      (alone / run.shard_files["train"][0].name).read_bytes()


def test_every_object_rejected_fails(small_dataset, tmp_path, capsys):
  """A label map that matches no class: the images would be written without one box."""
  ds, out = small_dataset, tmp_path / "out"
  label_map = write_label_map(tmp_path / "label_map.pbtxt", {"zebra": 1})
  objects = sum(len(im.boxes) for im in ds.images)
  assert convert(*ds.inputs("coco"), f"--output={out}", f"--label-map={label_map}") == 4
  line = failure_line(capsys.readouterr().err)
  assert f"every object was rejected ({objects} objects" in line, line
  assert "unknown_class" in line and "no output was made" in line, line
  assert not (out / "manifest.json").exists()
  manifest = report(out)
  assert manifest["outcome"] == "empty"
  assert (manifest["totals"]["images"], manifest["totals"]["objects"]) == (len(ds.images), 0)


def test_a_shard_whose_images_were_all_rejected_is_empty_and_listed(small_dataset, tmp_path,
                                                                    capsys):
  """The decision: shard names say '-of-N', so the shard is kept as an empty, valid TFRecord
  file (TensorFlow reads it as no record), listed with 0 examples and 0 bytes; verify,
  inspect and the reader all agree with the manifest."""
  ds, out = small_dataset, tmp_path / "out"
  train = sorted(im.file_name for im in ds.images if im.split == "train")
  (ds.image_dir / train[0]).write_bytes(b"not an image")  # the first of shard 0 of 2
  assert convert(f"--input=train={ds.coco_file('train')}", f"--images={ds.image_dir}",
                 f"--output={out}", "--num-shards=2") == 0
  run = read_output(out)
  first, second = run.manifest["splits"]["train"]["shards"]
  assert (first["examples"], first["bytes"]) == (0, 0)
  assert (out / first["path"]).stat().st_size == 0
  assert second["examples"] == len(run.records["train"]) == len(train) - 1
  assert [e["key"] for e in run.errors if e["level"] == "image"] == [train[0]]
  capsys.readouterr()
  assert cli.main(["verify", str(out)]) == 0
  assert "OK" in capsys.readouterr().out
  assert cli.main(["inspect", "--json", str(out)]) == 0
  stats = json.loads(capsys.readouterr().out)
  assert stats["records_match_manifest"]
  assert stats["splits"]["train"]["records"] == len(train) - 1


def _coco_doc(ds, split: str) -> Dict:
  return json.loads(Path(ds.coco_file(split)).read_text(encoding="utf-8"))


def test_a_cut_annotation_file_fails_unless_a_rate_is_accepted(small_dataset, tmp_path,
                                                                capsys):
  """Issue 30, item 5: a COCO file cut short inside `annotations` (its categories first, as
  some exporters write them) kept the boxes before the cut with exit 0. Now exit 4 naming
  the file-level error, once (not once per section), the earlier output untouched;
  --max-error-rate accepts it (the error counts one) and the boxes before the cut are
  written."""
  ds, out = small_dataset, tmp_path / "out"
  doc = _coco_doc(ds, "train")
  doc = {"categories": doc["categories"], "images": doc["images"],
         "annotations": doc["annotations"]}
  text = json.dumps(doc)
  assert len(doc["annotations"]) >= 3, doc
  cut = text.index(json.dumps(doc["annotations"][2]))  # two whole annotations before it
  (tmp_path / "cut.json").write_text(text[:cut + 10], encoding="utf-8")
  args = (f"--input=train={tmp_path / 'cut.json'}", f"--images={ds.image_dir}")
  assert convert(*args, f"--output={out}") == 4
  line = failure_line(capsys.readouterr().err)
  assert "1 annotation file error" in line and "malformed_json 1" in line, line
  assert "no output was made" in line, line
  manifest = report(out)
  assert manifest["outcome"] == "incomplete"
  assert (manifest["errors"]["by_reason"], manifest["errors"]["by_level"]) == (
      {"malformed_json": 1}, {"file": 1}), manifest["errors"]
  assert not (out / "manifest.json").exists()
  accepted = tmp_path / "accepted"
  assert convert(*args, f"--output={accepted}", "--max-error-rate=0.5") == 0
  run = read_output(accepted)
  assert run.manifest["totals"]["objects"] == 2  # the boxes before the cut, nothing more
  [error] = [e for e in run.errors if e["level"] == "file"]
  assert error["reason"] == "malformed_json"
  assert "the file breaks after 2 entries of `annotations`" in error["message"], error


def test_one_over_deep_annotation_rejects_itself_alone(small_dataset, tmp_path, capsys):
  """Issue 30, item 5: one annotation nested 34 levels deep rejected its whole file ("objects
  0, classes 0", exit 0). Now that annotation alone is rejected (too_deep, object level),
  on either parse path, and every other box is written."""
  ds = small_dataset
  doc = _coco_doc(ds, "train")
  nested: object = 1
  for _ in range(34):
    nested = [nested]
  doc["annotations"][1]["attributes"] = {"occluded": nested}
  deep = tmp_path / "deep.json"
  deep.write_text(json.dumps(doc), encoding="utf-8")
  out = tmp_path / "out"
  assert convert(f"--input=train={deep}", f"--images={ds.image_dir}", f"--output={out}") == 0
  run = read_output(out)
  assert [(e["reason"], e["level"], e["source"]) for e in run.errors] == [
      ("too_deep", "object", f"{deep}#annotations[1]")]
  assert run.manifest["totals"]["objects"] == len(doc["annotations"]) - 1

