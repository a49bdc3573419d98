"""finalize/fingerprint.py: source fingerprints (every format's sources) and
`convert --if-changed`."""
from __future__ import annotations

import json
import os

import layouts
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord import cli, sample
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.finalize import fingerprint

RUNNER = "--runner=FnApiRunner"

entries = st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 10**9),
                             st.floats(0, 2e9, allow_nan=False)), max_size=20)


@settings(max_examples=50, deadline=None)
@given(entries, st.data())
def test_order_and_duplicates_do_not_matter(items, data):
  shuffled = data.draw(st.permutations(list(items) + list(items[:3])))
  assert fingerprint.compute_from_entries(items) == fingerprint.compute_from_entries(shuffled)


@settings(max_examples=50, deadline=None)
@given(entries.filter(bool), st.integers(0, 2))
def test_any_name_size_or_time_change_is_seen(items, which):
  path, size, mtime = items[0]
  changed = [(path + "x", size, mtime), (path, size + 1, mtime), (path, size, mtime + 1)][which]
  before = fingerprint.compute_from_entries(items)
  after = fingerprint.compute_from_entries([changed] + items[1:])
  assert not fingerprint.same(before, after) or changed in items


def test_settings_and_version_are_part_of_it():
  items = [("a.jpg", 1, 2.0)]
  base = fingerprint.compute_from_entries(items, {"num_shards": 2}, "0.1.0")
  assert fingerprint.same(base, fingerprint.compute_from_entries(items, {"num_shards": 2},
                                                                 "0.1.0"))
  assert not fingerprint.same(base, fingerprint.compute_from_entries(items, {"num_shards": 3},
                                                                     "0.1.0"))
  assert not fingerprint.same(base, fingerprint.compute_from_entries(items, {"num_shards": 2},
                                                                     "0.2.0"))
  assert base["files"] == 1 and base["bytes"] == 1


def test_same_needs_two_fingerprints():
  fp = fingerprint.compute_from_entries([])
  assert fingerprint.same(fp, dict(fp))
  assert not fingerprint.same(fp, None) and not fingerprint.same(None, None)


def test_settings_leave_out_output_and_run_flags():
  a = ConvertConfig(format="coco", inputs=["x.json"], output="/o1", overwrite=True)
  b = ConvertConfig(format="coco", inputs=["x.json"], output="/o2")
  assert fingerprint.settings_of(a) == fingerprint.settings_of(b)
  assert "num_shards" in fingerprint.settings_of(a)


def test_source_patterns_per_format():
  coco = ConvertConfig(format="coco", inputs=["train=/d/ann/train.json", "val=/d/ann/val.json"],
                       images=["train=/d/train", "val=/d/val"], output="/o",
                       label_map="/d/lm.pbtxt")
  assert fingerprint.source_patterns(coco) == [
      ("file", "/d/ann/train.json"), ("file", "/d/ann/val.json"),
      ("tree", "/d/train/**"), ("tree", "/d/val/**"), ("file", "/d/lm.pbtxt")]
  default_root = ConvertConfig(format="csv", inputs=["gs://b/x/labels.csv"], output="gs://b/o")
  assert fingerprint.source_patterns(default_root) == [
      ("file", "gs://b/x/labels.csv"), ("tree", "gs://b/x/**")]
  voc = ConvertConfig(format="voc", inputs=["/d/VOC2012"], output="/o")
  assert fingerprint.source_patterns(voc) == [
      ("tree", "/d/VOC2012/Annotations/**"), ("tree", "/d/VOC2012/ImageSets/**"),
      ("tree", "/d/VOC2012/JPEGImages/**")]


def test_listing_skips_the_output_and_marks_missing_files(tmp_path):
  (tmp_path / "images").mkdir()
  (tmp_path / "images" / "a.jpg").write_bytes(b"abc")
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "manifest.json").write_text("{}")
  found = fingerprint.list_entries([("tree", str(tmp_path / "**")),
                                    ("file", str(tmp_path / "missing.json"))],
                                   exclude=str(tmp_path / "out"))
  paths = {p: s for p, s, _ in found}
  assert paths == {str(tmp_path / "images" / "a.jpg"): 3, str(tmp_path / "missing.json"): -1}


def test_compute_follows_the_files(tmp_path):
  sample.make_dataset(str(tmp_path), count=4)
  config = ConvertConfig(format="coco", inputs=[str(tmp_path / "instances_train.json")],
                         images=[str(tmp_path / "images")], output=str(tmp_path / "out"))
  first = fingerprint.compute(config)
  assert fingerprint.same(first, fingerprint.compute(config))
  assert first["files"] == 5  # the annotation file and four images
  image = tmp_path / "images" / sorted(os.listdir(tmp_path / "images"))[0]
  st_ = image.stat()
  os.utime(image, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000_000))
  assert not fingerprint.same(first, fingerprint.compute(config))
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "x.tfrecord").write_bytes(b"")
  os.utime(image, ns=(st_.st_atime_ns, st_.st_mtime_ns))
  assert fingerprint.same(first, fingerprint.compute(config))  # output files do not count


@pytest.fixture
def dataset(tmp_path):
  data = tmp_path / "data"
  sample.make_dataset(str(data), count=6)
  return data


def _convert(data, out, *extra):
  return cli.main(["convert", "--format", "csv", "--input", f"train={data}/train_labels.csv",
                   "--input", f"val={data}/val_labels.csv", "--images", f"{data}/images",
                   "--output", str(out), "--num-shards", "1", RUNNER, *extra])


@pytest.mark.e2e
def test_if_changed_skips_converts_and_replaces(dataset, tmp_path, capsys):
  out = tmp_path / "out"
  assert _convert(dataset, out, "--if-changed") == 0
  manifest = json.loads((out / "manifest.json").read_text())
  recorded = manifest["source_fingerprint"]
  assert recorded["files"] == 2 + len(os.listdir(dataset / "images"))
  capsys.readouterr()

  before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
  assert _convert(dataset, out, "--if-changed") == 0
  assert "skipped" in capsys.readouterr().out
  assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # untouched

  # A new image in the image root: convert again, replacing the finished run (no --overwrite).
  (dataset / "images" / "extra.jpg").write_bytes(
      (dataset / "images" / sorted(os.listdir(dataset / "images"))[0]).read_bytes())
  assert _convert(dataset, out, "--if-changed") == 0
  assert "skipped" not in capsys.readouterr().out
  again = json.loads((out / "manifest.json").read_text())
  assert again["source_fingerprint"]["files"] == recorded["files"] + 1
  assert again["totals"] == manifest["totals"]  # the CSV does not list the new file

  # Other settings: not the same conversion, so not skipped.
  assert _convert(dataset, out, "--if-changed", "--bbox-policy", "drop") == 0
  assert "skipped" not in capsys.readouterr().out


@pytest.mark.e2e
def test_if_changed_ignores_a_failed_run_and_keeps_foreign_files(dataset, tmp_path, capsys):
  out = tmp_path / "out"
  assert _convert(dataset, out, "--if-changed") == 0
  path = out / "manifest.json"
  manifest = json.loads(path.read_text())
  manifest["status"] = "failed: error rate 0.5 exceeds --max-error-rate 0.1"
  path.write_text(json.dumps(manifest))
  capsys.readouterr()
  assert _convert(dataset, out, "--if-changed") == 0  # not the last *successful* run
  assert "skipped" not in capsys.readouterr().out

  foreign = tmp_path / "foreign"
  foreign.mkdir()
  (foreign / "notes.txt").write_text("mine")
  assert _convert(dataset, foreign, "--if-changed") == 2  # not an earlier run of ours
  assert (foreign / "notes.txt").read_text() == "mine"


def test_fingerprint_covers_new_sources(small_dataset, tmp_path):
  ds = small_dataset
  yaml_path = layouts.write_ultralytics(ds.images, ds.image_dir, tmp_path / "y")
  root = tmp_path / "y" / "shapes"
  patterns = fingerprint.source_patterns(ConvertConfig(format="yolo", inputs=[str(yaml_path)],
                                                       output="/o"))
  assert ("file", str(yaml_path)) in patterns and ("tree", f"{root}/**") in patterns
  assert ("tree", f"{root}/labels/train/**") in patterns
  folders = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "f")
  assert fingerprint.source_patterns(ConvertConfig(format="folders", inputs=[str(folders)],
                                                   output="/o")) == [("tree", f"{folders}/**")]
  raccoon = layouts.write_raccoon(ds.images, ds.image_dir, tmp_path / "r")
  assert fingerprint.source_patterns(ConvertConfig(
      format="voc", inputs=[str(raccoon / "annotations")], images=[str(raccoon / "images")],
      output="/o")) == [("tree", f"{raccoon}/annotations/**"), ("tree", f"{raccoon}/images/**")]
