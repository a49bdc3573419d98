"""sources/folders.py (class folders) and csv.py's classification listings, through the
classification schema.

The layouts are Keras' image_dataset_from_directory / the TF TFRecord tutorial's
(ROOT/SPLIT/CLASS/IMAGE, ROOT/CLASS/IMAGE) with the clutter real folders carry; every record
is read back with TensorFlow through reader.load (feature spec from manifest.json).
"""
from __future__ import annotations

import collections
import csv
import hashlib
import shutil
from pathlib import Path

import layouts
import pytest
from bad_data import RUNNER, convert, other_formats

from beam_tfrecord.readback import verify

pytestmark = pytest.mark.e2e  # every test converts

# The classification keys (issue 9), written out here rather than taken from the library.
CLASSIFICATION = {
    "image/encoded": ("string", "fixed"), "image/format": ("string", "fixed"),
    "image/height": ("int64", "fixed"), "image/width": ("int64", "fixed"),
    "image/channels": ("int64", "fixed"), "image/filename": ("string", "fixed"),
    "image/key/sha256": ("string", "fixed"), "image/class/label": ("int64", "fixed"),
    "image/class/text": ("string", "fixed"),
}


def check_classification(run, expected, out: Path):
  """expected: {filename: (split, class, file bytes or None when re-encoded)}."""
  assert run.code == 0, run.stderr
  m = run.manifest
  assert m["schema"] == "classification"
  assert m["features"] == {k: {"dtype": d, "kind": kind} for k, (d, kind) in
                           CLASSIFICATION.items()}
  names = sorted({c for _, c, _ in expected.values()})
  ids = {n: i for i, n in enumerate(names)}  # 0..N-1 in sorted name order, as Keras
  assert m["label_map"] == ids
  assert (out / "labels.txt").read_text(encoding="utf-8") == "".join(n + "\n" for n in names)
  written = run.by_filename()
  assert sorted(written) == sorted(expected)
  for name, (split, label, data) in expected.items():
    ex = written[name]
    assert set(ex) - {"split", "filename"} == set(CLASSIFICATION), name
    assert ex["split"] == split, name
    assert ex["image/class/text"] == label.encode() and ex["image/class/label"] == ids[label]
    if data is not None:
      assert ex["image/encoded"] == data, name
    assert ex["image/key/sha256"] == hashlib.sha256(ex["image/encoded"]).hexdigest().encode()
    assert ex["image/width"] > 0 and ex["image/height"] > 0 and ex["image/channels"] in (1, 3, 4)
  assert layouts.split_counts(run) == dict(collections.Counter(s for s, _, _ in expected.values()))
  assert verify.run(str(out)) == 0


def test_split_class_folders_with_clutter(small_dataset, tmp_path, capsys):
  """ROOT/SPLIT/CLASS/IMAGE with .DS_Store files, a README, a hidden folder, a GIF, a .jpeg
  and a name with spaces and parentheses: images converted, the rest skipped and counted."""
  ds = small_dataset
  root = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "flowers")
  expected = {f"{im.split}/{layouts.image_class(im)}/{im.file_name}":
              (im.split, layouts.image_class(im), (ds.image_dir / im.file_name).read_bytes())
              for im in ds.images}
  gif, _ = other_formats()["gif"]
  (root / "val" / "tulip").mkdir()
  (root / "val" / "tulip" / "photo (2) copy.gif").write_bytes(gif)
  expected["val/tulip/photo (2) copy.gif"] = ("val", "tulip", None)
  jpeg = next(im for im in ds.images if im.format == "jpeg")
  shutil.copy(ds.image_dir / jpeg.file_name, root / "train" / "tulip.jpeg")  # no class folder
  shutil.copy(ds.image_dir / jpeg.file_name, root / "val" / "tulip" / "IMG 0001.jpeg")
  expected["val/tulip/IMG 0001.jpeg"] = ("val", "tulip", (ds.image_dir / jpeg.file_name)
                                         .read_bytes())
  (root / "val" / "tulip" / "notes.txt").write_text("not an image")
  out = tmp_path / "out"
  run = convert(["--input", str(root), "--output", str(out)], capsys)
  assert "detected: folders (split folders of class folders)" in run.stdout
  check_classification(run, expected, out)
  reasons = collections.Counter(e["reason"] for e in run.errors)
  class_dirs = {(im.split, layouts.image_class(im)) for im in ds.images}
  # val/tulip/IMG 0001.jpeg is a copy of a train image (the same file's bytes): a leak
  assert reasons == {"hidden_file": len(class_dirs) + 1, "not_an_image": 2,
                     "not_in_class_folder": 1, "leaked_across_splits": 1}
  assert {e["level"] for e in run.errors} == {"warning"}
  assert any(e["key"] == "README.txt" for e in run.errors)
  assert run.manifest["errors"]["by_reason"] == dict(reasons)


def test_class_folders_without_splits_and_split_inputs(small_dataset, tmp_path):
  """ROOT/CLASS/IMAGE goes to train (or --split); --input SPLIT=DIR names each split."""
  ds = small_dataset
  flat = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "flat",
                                     with_splits=False)
  run = convert(["--format", "folders", "--input", str(flat), "--output",
                 str(tmp_path / "out1"), RUNNER])
  check_classification(run, {f"{layouts.image_class(im)}/{im.file_name}":
                             ("train", layouts.image_class(im),
                              (ds.image_dir / im.file_name).read_bytes())
                             for im in ds.images}, tmp_path / "out1")
  by_split = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "tree")
  run = convert(["--format", "folders", "--input", f"training={by_split / 'train'}",
                 "--input", f"holdout={by_split / 'val'}", "--output", str(tmp_path / "out2"),
                 RUNNER])
  rename = {"train": "training", "val": "holdout"}
  check_classification(run, {f"{layouts.image_class(im)}/{im.file_name}":
                             (rename[im.split], layouts.image_class(im),
                              (ds.image_dir / im.file_name).read_bytes())
                             for im in ds.images}, tmp_path / "out2")


def test_csv_classification_listing(small_dataset, tmp_path, capsys):
  """A listing with its own column names (path, label, subset): image-level labels, the
  classification schema by default, splits from the column."""
  ds = small_dataset
  listing = ds.root / "listing.csv"
  with open(listing, "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(["path", "label", "subset"])
    for im in ds.images:
      writer.writerow([f"images/{im.file_name}", layouts.image_class(im), im.split])
  out = tmp_path / "out"
  run = convert(["--input", str(listing), "--csv-columns", "filename=path,class=label,split=subset",
                 "--output", str(out), RUNNER], capsys)
  assert "detected: csv (CSV file)" in run.stdout
  check_classification(run, {f"images/{im.file_name}":
                             (im.split, layouts.image_class(im),
                              (ds.image_dir / im.file_name).read_bytes())
                             for im in ds.images}, out)
  assert run.manifest["format"] == "csv"


@pytest.mark.parametrize("schema", ["od-api", "coco-objects"])
def test_class_folders_with_a_box_schema_are_refused(small_dataset, tmp_path, capsys, schema):
  """A box schema writes objects only: every class-folder label would be dropped (errors 0),
  so the run is refused before anything is written, naming the schemas that fit."""
  ds = small_dataset
  root = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "flowers")
  out = tmp_path / "out"
  run = convert(["--input", str(root), "--output", str(out), "--schema", schema, RUNNER], capsys)
  assert run.code == 2 and not out.exists()
  assert run.stderr.startswith("beam-tfrecord: error: ") and run.stderr.count("\n") == 1
  assert f"--schema {schema}" in run.stderr
  assert "classification or tutorial" in run.stderr


def test_csv_classification_listing_with_a_box_schema_is_refused(small_dataset, tmp_path,
                                                                  capsys):
  ds = small_dataset
  listing = ds.root / "listing.csv"
  listing.write_text("filename,class\n" + "".join(
      f"images/{im.file_name},{layouts.image_class(im)}\n" for im in ds.images))
  out = tmp_path / "out"
  run = convert(["--format", "csv", "--input", str(listing), "--output", str(out),
                 "--schema", "od-api", RUNNER], capsys)
  assert run.code == 2 and not out.exists()
  assert "classification or tutorial" in run.stderr and run.stderr.count("\n") == 1


def test_class_folders_with_the_tutorial_schema_number_classes_from_0(small_dataset, tmp_path):
  """As the classification schema and Keras number class folders (0..N-1, labels.txt), so the
  same folders give the same label ids whichever image-level schema writes them."""
  ds = small_dataset
  root = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "flowers")
  out = tmp_path / "out"
  run = convert(["--input", str(root), "--output", str(out), "--schema", "tutorial", RUNNER])
  assert run.code == 0 and run.manifest["schema"] == "tutorial"
  names = sorted({layouts.image_class(im) for im in ds.images})
  ids = {n: i for i, n in enumerate(names)}
  assert run.manifest["label_map"] == ids
  assert (out / "labels.txt").read_text(encoding="utf-8") == "".join(n + "\n" for n in names)
  by_bytes = {(ds.image_dir / im.file_name).read_bytes(): layouts.image_class(im)
              for im in ds.images}
  assert len(by_bytes) == len(run.examples) == len(ds.images)
  assert all(ex["label"] == ids[by_bytes[ex["image_raw"]]] for ex in run.examples)
  assert {ex["label"] for ex in run.examples} == set(ids.values())
  assert verify.run(str(out)) == 0


def test_symlinked_class_folders_are_followed_with_follow_symlinks(small_dataset, tmp_path,
                                                                   capsys):
  """Class folders assembled with ln -s (Keras follows them): without --follow-symlinks one
  line naming the option, nothing written; with it every image is converted under its
  folder's class, and a link leading back up the tree (a loop) is walked once, reported."""
  ds = small_dataset
  real = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "real",
                                     with_splits=False)
  root = tmp_path / "flowers"
  root.mkdir()
  classes = sorted({layouts.image_class(im) for im in ds.images})
  for name in classes:
    (root / name).symlink_to(real / name, target_is_directory=True)
  (real / classes[0] / "again").symlink_to(real, target_is_directory=True)  # a loop
  (real / classes[-1] / "up").symlink_to(root, target_is_directory=True)    # another
  out = tmp_path / "out"
  run = convert(["--format", "folders", "--input", str(root), "--output", str(out), RUNNER],
                capsys)
  assert run.code == 2 and not out.exists()
  assert run.stderr.startswith("beam-tfrecord: error: ") and run.stderr.count("\n") == 1
  assert "--follow-symlinks" in run.stderr and str(root / classes[0]) in run.stderr

  run = convert(["--format", "folders", "--input", str(root), "--output", str(out),
                 "--follow-symlinks", RUNNER], capsys)
  check_classification(run, {f"{layouts.image_class(im)}/{im.file_name}":
                             ("train", layouts.image_class(im),
                              (ds.image_dir / im.file_name).read_bytes())
                             for im in ds.images}, out)
  loops = sorted(e["key"] for e in run.errors if e["reason"] == "symlinked_folder")
  assert loops == sorted([f"{classes[0]}/again", f"{classes[-1]}/up"])
  assert all("loop" in e["message"] for e in run.errors if e["reason"] == "symlinked_folder")


def test_a_symlinked_folder_inside_a_class_folder_is_reported_without_follow_symlinks(
    small_dataset, tmp_path, capsys):
  ds = small_dataset
  root = layouts.write_class_folders(ds.images, ds.image_dir, tmp_path / "flowers",
                                     with_splits=False)
  im = ds.images[0]
  extra = tmp_path / "extra"
  extra.mkdir()
  shutil.copy(ds.image_dir / im.file_name, extra / ("more-" + im.file_name))
  label = layouts.image_class(im)
  (root / label / "more").symlink_to(extra, target_is_directory=True)
  out = tmp_path / "out"
  run = convert(["--format", "folders", "--input", str(root), "--output", str(out), RUNNER],
                capsys)
  assert run.code == 0, run.stderr
  [linked] = [e for e in run.errors if e["reason"] == "symlinked_folder"]
  assert linked["key"] == f"{label}/more" and linked["level"] == "warning"
  assert "--follow-symlinks" in linked["message"]
  assert f"{label}/more/more-{im.file_name}" not in run.by_filename()
  run = convert(["--format", "folders", "--input", str(root), "--output", str(tmp_path / "o2"),
                 "--follow-symlinks", RUNNER], capsys)
  assert run.code == 0 and f"{label}/more/more-{im.file_name}" in run.by_filename()
