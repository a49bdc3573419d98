"""finalize/fingerprint.py: source fingerprints (every format's sources), listed pattern by
pattern in constant memory, and SourceFingerprint, the same value computed in a pipeline.
Whole `convert --if-changed` runs: tests/e2e/test_if_changed.py."""
from __future__ import annotations

import hashlib
import os

import apache_beam as beam
import layouts
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

import beam_tfrecord
from beam_tfrecord import sample
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.finalize import fingerprint

entries = st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 10**9),
                             st.floats(0, 2e9, allow_nan=False)), max_size=20, unique=True)


def _digest(kind, pattern, listing):
  files, size, digest = fingerprint.digest_entries(listing)
  return {"kind": kind, "pattern": pattern, "files": files, "bytes": size, "digest": digest}


# --- one pattern's digest: order-free, constant memory ------------------------------------

@settings(max_examples=50, deadline=None)
@given(entries, st.data())
def test_a_listing_in_any_order_has_one_digest(items, data):
  shuffled = data.draw(st.permutations(items))
  assert fingerprint.digest_entries(items) == fingerprint.digest_entries(shuffled)


@settings(max_examples=50, deadline=None)
@given(entries.filter(bool), st.integers(0, 3))
def test_any_name_size_time_or_count_change_is_seen(items, which):
  path, size, mtime = items[0]
  changed = [[(path + "x", size, mtime)] + items[1:], [(path, size + 1, mtime)] + items[1:],
             [(path, size, mtime + 1)] + items[1:], items[1:]][which]
  assert fingerprint.digest_entries(changed) != fingerprint.digest_entries(items)


def test_digest_is_the_sum_of_the_entries_hashes():
  items = [("a.jpg", 3, 1.5), ("b/c.png", 10, 2.0), ("gone.json", -1, -1.0)]
  total = sum(int(hashlib.sha256(f"{p}\t{s}\t{m:.6f}\n".encode()).hexdigest(), 16)
              for p, s, m in items) % (1 << 256)
  assert fingerprint.digest_entries(iter(items)) == (3, 13, f"{total:064x}")
  assert fingerprint.digest_entries([]) == (0, 0, "0" * 64)


def test_digest_reads_the_listing_once_and_keeps_nothing():
  """A generator of a million entries: consumed in one pass, never turned into a list."""
  seen = []

  def listing():
    for i in range(1_000_000):
      if i % 250_000 == 0:
        seen.append(i)
      yield (f"img/{i}.jpg", i, 1.0)

  files, size, _ = fingerprint.digest_entries(listing())
  assert (files, size, seen) == (1_000_000, sum(range(1_000_000)), [0, 250_000, 500_000, 750_000])


# --- combining pattern digests ----------------------------------------------------------

def test_combine_orders_patterns_and_counts_them():
  a = _digest("tree", "/d/images/**", [("/d/images/1.jpg", 5, 1.0)])
  b = _digest("file", "/d/ann.json", [("/d/ann.json", 7, 2.0)])
  first = fingerprint.combine([a, b], {"num_shards": 2}, "0.1.0")
  assert first == fingerprint.combine([b, a], {"num_shards": 2}, "0.1.0")
  assert {k: first[k] for k in ("version", "files", "bytes", "patterns")} == {
      "version": 3, "files": 2, "bytes": 12, "patterns": 2}
  expected = hashlib.sha256(
      b"beam-tfrecord-fingerprint/3\n0.1.0\n" + b'{"num_shards": 2}\n'
      + f"file\t/d/ann.json\t1\t7\t{b['digest']}\n".encode()
      + f"tree\t/d/images/**\t1\t5\t{a['digest']}\n".encode()).hexdigest()
  assert first["sha256"] == expected


def test_settings_version_and_pattern_names_are_part_of_it():
  a = _digest("tree", "/d/images/**", [("/d/images/1.jpg", 5, 1.0)])
  base = fingerprint.combine([a], {"num_shards": 2}, "0.1.0")
  assert fingerprint.same(base, fingerprint.combine([dict(a)], {"num_shards": 2}, "0.1.0"))
  assert not fingerprint.same(base, fingerprint.combine([a], {"num_shards": 3}, "0.1.0"))
  assert not fingerprint.same(base, fingerprint.combine([a], {"num_shards": 2}, "0.2.0"))
  moved = dict(a, pattern="/e/images/**")
  assert not fingerprint.same(base, fingerprint.combine([moved], {"num_shards": 2}, "0.1.0"))


def test_same_needs_two_fingerprints():
  fp = fingerprint.combine([])
  assert fingerprint.same(fp, dict(fp))
  assert not fingerprint.same(fp, None) and not fingerprint.same(None, None)
  # a version-1 fingerprint (one sorted listing) never equals a version-2 one
  assert not fingerprint.same(fp, {"sha256": "0" * 64, "files": 0, "bytes": 0})


def test_settings_leave_out_output_and_run_flags():
  a = ConvertConfig(format="coco", inputs=["x.json"], output="/o1", overwrite=True)
  b = ConvertConfig(format="coco", inputs=["x.json"], output="/o2",
                    source_fingerprint=fingerprint.REQUESTED)
  assert fingerprint.settings_of(a) == fingerprint.settings_of(b)
  assert "num_shards" in fingerprint.settings_of(a)
  assert fingerprint.requested(b) and not fingerprint.requested(a)


# --- patterns ---------------------------------------------------------------------------

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


def test_prune_drops_what_a_tree_already_lists():
  patterns = [("tree", "/d/root/**"), ("tree", "/d/root/images/train/**"),
              ("file", "/d/root/train.txt"), ("file", "/d/data.yaml"), ("tree", "/d/root/**"),
              ("tree", "/d/rootless/**"), ("file", "gs://b/x/labels.csv"),
              ("tree", "gs://b/x/**"), ("tree", "gs://b/xy/**")]
  assert fingerprint.prune(patterns) == [
      ("file", "/d/data.yaml"), ("tree", "/d/root/**"), ("tree", "/d/rootless/**"),
      ("tree", "gs://b/x/**"), ("tree", "gs://b/xy/**")]
  assert fingerprint.prune([]) == []


def test_fingerprint_covers_new_sources(small_dataset, tmp_path):
  ds = small_dataset
  yaml_path = layouts.write_ultralytics(ds.images, ds.image_dir, tmp_path / "y")
  root = tmp_path / "y" / "shapes"
  config = ConvertConfig(format="yolo", inputs=[str(yaml_path)], output="/o")
  patterns = fingerprint.source_patterns(config)
  assert ("file", str(yaml_path)) in patterns and ("tree", f"{root}/**") in patterns
  assert ("tree", f"{root}/labels/train/**") in patterns
  # the dataset root lists its image and label folders: listed once
  assert fingerprint.patterns_of(config) == [("file", str(yaml_path)), ("tree", f"{root}/**")]
  folders = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "f")
  assert fingerprint.source_patterns(ConvertConfig(format="folders", inputs=[str(folders)],
                                                   output="/o")) == [("tree", f"{folders}/**")]
  raccoon = layouts.write_raccoon(ds.images, ds.image_dir, tmp_path / "r")
  assert fingerprint.source_patterns(ConvertConfig(
      format="voc", inputs=[str(raccoon / "annotations")], images=[str(raccoon / "images")],
      output="/o")) == [("tree", f"{raccoon}/annotations/**"), ("tree", f"{raccoon}/images/**")]


# --- listing ----------------------------------------------------------------------------

def _stat(path):
  st_ = os.stat(path)
  return (str(path), st_.st_size, f"{st_.st_mtime_ns}:{st_.st_ino}:{st_.st_ctime_ns}")


def test_listing_skips_the_output_and_marks_missing_files(tmp_path):
  (tmp_path / "images" / "deep" / "er").mkdir(parents=True)
  (tmp_path / "images" / "a.jpg").write_bytes(b"abc")
  (tmp_path / "images" / "deep" / "er" / "b.jpg").write_bytes(b"abcdef")
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "manifest.json").write_text("{}")
  tree = sorted(fingerprint.list_pattern(("tree", str(tmp_path / "**")),
                                         exclude=str(tmp_path / "out")))
  assert tree == [_stat(tmp_path / "images" / "a.jpg"),
                  _stat(tmp_path / "images" / "deep" / "er" / "b.jpg")]
  missing = str(tmp_path / "missing.json")
  assert list(fingerprint.list_pattern(("file", missing))) == [(missing, -1, -1.0)]
  assert list(fingerprint.list_pattern(("file", str(tmp_path / "images" / "a.jpg")))) == [
      _stat(tmp_path / "images" / "a.jpg")]
  assert list(fingerprint.list_pattern(("tree", str(tmp_path / "nothing" / "**")))) == []
  digest = fingerprint.digest_pattern(("tree", str(tmp_path / "**")), str(tmp_path / "out"))
  assert digest == {"kind": "tree", "pattern": str(tmp_path / "**"), "files": 2, "bytes": 9,
                    "digest": fingerprint.digest_entries(tree)[2]}


def test_symlinked_folders_only_with_follow_symlinks_and_never_in_a_loop(tmp_path):
  (tmp_path / "root" / "cat").mkdir(parents=True)
  (tmp_path / "root" / "cat" / "1.jpg").write_bytes(b"1")
  (tmp_path / "elsewhere").mkdir()
  (tmp_path / "elsewhere" / "2.jpg").write_bytes(b"22")
  os.symlink(tmp_path / "elsewhere", tmp_path / "root" / "dog")
  os.symlink(tmp_path / "root", tmp_path / "root" / "cat" / "loop")  # back up: a loop
  os.symlink(tmp_path / "elsewhere" / "2.jpg", tmp_path / "root" / "cat" / "3.jpg")
  pattern = ("tree", str(tmp_path / "root" / "**"))
  plain = sorted(fingerprint.list_pattern(pattern))
  assert plain == [_stat(tmp_path / "root" / "cat" / "1.jpg"),
                   _stat(tmp_path / "root" / "cat" / "3.jpg")]  # a file link is a file
  followed = sorted(fingerprint.list_pattern(pattern, follow_symlinks=True))
  assert followed == plain + [_stat(tmp_path / "root" / "dog" / "2.jpg")]


def test_an_unreadable_folder_fails_with_its_name(tmp_path, monkeypatch):
  (tmp_path / "images").mkdir()

  def refused(path):
    raise PermissionError(13, "Permission denied", str(path))

  monkeypatch.setattr(os, "scandir", refused)
  with pytest.raises(RuntimeError, match=r"^--if-changed could not list .*images/\*\* "
                     r"\(Permission denied\)$"):
    fingerprint.digest_pattern(("tree", str(tmp_path / "images" / "**")))


def test_compute_follows_the_files(tmp_path):
  sample.make_dataset(str(tmp_path), count=4)
  config = ConvertConfig(format="coco", inputs=[str(tmp_path / "instances_train.json")],
                         images=[str(tmp_path / "images")], output=str(tmp_path / "out"))
  first = fingerprint.compute(config)
  assert fingerprint.same(first, fingerprint.compute(config))
  assert (first["files"], first["patterns"]) == (5, 2)  # the annotation file and four images
  image = tmp_path / "images" / sorted(os.listdir(tmp_path / "images"))[0]
  st_ = image.stat()
  os.utime(image, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000_000))
  assert not fingerprint.same(first, fingerprint.compute(config))
  # its modification time put back (as cp -p, rsync -a and tar x do): the change time tells
  os.utime(image, ns=(st_.st_atime_ns, st_.st_mtime_ns))
  changed = fingerprint.compute(config)
  assert not fingerprint.same(first, changed)
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "x.tfrecord").write_bytes(b"")
  assert fingerprint.same(changed, fingerprint.compute(config))  # output files do not count


def test_compare_reads_the_outputs_last_successful_run(tmp_path):
  import json
  current = fingerprint.combine([])
  out = tmp_path / "out"
  assert fingerprint.compare(current, str(out)) == {
      "current": current, "recorded": None, "created": None, "unchanged": False}
  out.mkdir()
  manifest = {"status": "ok", "created": "2026-01-01T00:00:00+00:00",
              "source_fingerprint": current}
  (out / "manifest.json").write_text(json.dumps(manifest))
  assert fingerprint.compare(current, str(out)) == {
      "current": current, "recorded": current, "created": "2026-01-01T00:00:00+00:00",
      "unchanged": True}
  (out / "manifest.json").write_text(json.dumps(dict(manifest, status="failed: x")))
  assert fingerprint.compare(current, str(out))["unchanged"] is False
  line = fingerprint.skipped_line("/o", "2026-01-01T00:00:00+00:00", current)
  assert line == (f"beam-tfrecord: skipped, sources unchanged since the run of "
                  f"2026-01-01T00:00:00+00:00 in /o (0 files, fingerprint "
                  f"{current['sha256'][:12]})")


# --- SourceFingerprint: the same value, computed in a pipeline ---------------------------

def _pipeline_fingerprint(config):
  with test_pipeline.TestPipeline(runner="FnApiRunner", argv=[]) as p:
    result = p | "IfChanged" >> fingerprint.SourceFingerprint(config)
    assert_that(result, equal_to([fingerprint.compute(config)]))


@pytest.mark.e2e
def test_source_fingerprint_equals_compute(tmp_path, small_dataset):
  sample.make_dataset(str(tmp_path / "coco"), count=5)
  coco = ConvertConfig(format="coco", inputs=[f"train={tmp_path}/coco/instances_train.json",
                                              f"val={tmp_path}/coco/instances_val.json"],
                       images=[str(tmp_path / "coco" / "images")],
                       label_map=str(tmp_path / "missing.pbtxt"),
                       output=str(tmp_path / "coco" / "images" / "out"))
  (tmp_path / "coco" / "images" / "out").mkdir()
  (tmp_path / "coco" / "images" / "out" / "x.tfrecord").write_bytes(b"x")  # not a source
  expected = fingerprint.compute(coco)
  # two annotation files, the image root, the missing label map (one entry)
  assert (expected["patterns"], expected["files"]) == (4, 2 + 5 + 1)
  assert expected["bytes"] == sum(
      f.stat().st_size for f in (tmp_path / "coco").rglob("*")
      if f.is_file() and (f.parent.name == "images" or f.name in (
          "instances_train.json", "instances_val.json")))
  _pipeline_fingerprint(coco)
  yaml_path = layouts.write_ultralytics(small_dataset.images, small_dataset.image_dir,
                                        tmp_path / "y")
  yolo = ConvertConfig(format="yolo", inputs=[str(yaml_path)], output=str(tmp_path / "o"))
  listed = sum(1 for f in (tmp_path / "y" / "shapes").rglob("*") if f.is_file())
  assert fingerprint.compute(yolo)["files"] == listed + 1  # each file once, and the yaml
  _pipeline_fingerprint(yolo)


def test_the_transform_is_a_ptransform_and_the_module_stays_beam_free():
  assert issubclass(fingerprint.SourceFingerprint, beam.PTransform)
  assert fingerprint.SourceFingerprint.__qualname__ == "SourceFingerprint"
  assert fingerprint.SourceFingerprint(ConvertConfig(
      format="coco", inputs=["x.json"], output="/o")).tool_version == beam_tfrecord.__version__
  with pytest.raises(AttributeError):
    fingerprint.NoSuchThing  # noqa: B018
