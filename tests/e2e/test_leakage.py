"""Identical image bytes across splits (leaked_across_splits) and under other names within a
split (duplicate_content), found by every run, local and gs:// (a storage emulator): every
planted copy is reported naming both files, none is invented (images of equal size and
dimensions but other bytes, a file the source lists in two splits), the counts are in the
summary line, manifest.json and README.md, and --strict / --max-error-rate fail on them."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Dict, List, Tuple

import gcs_emulator
import pytest
from conftest import read_shard
from PIL import Image

from beam_tfrecord import cli, sample

pytestmark = pytest.mark.e2e
RUNNER = "--runner=FnApiRunner"
SPLITS = ("test", "train", "val")
BUCKET = "tfr-leakage"


def _plant(root: Path) -> Tuple[Dict[str, List[str]], Dict[str, set]]:
  """A dataset in three CSV splits with copies planted: ({split: file names}, expected
  {"leaked": {(copy, first)}, "duplicate": {(copy, first)}}), `first` by the documented
  order (split, key, uri)."""
  images = sample.make_images(str(root), 9, seed=3)
  names = [im.file_name for im in images]
  by_name = {im.file_name: im for im in images}
  folder = root / "images"
  digests = {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}
  assert len(set(digests.values())) == len(names)  # the generator's images all differ

  def copy(src: str, dst: str) -> str:
    shutil.copyfile(folder / src, folder / dst)
    by_name[dst] = by_name[src]
    return dst

  b = names
  splits = {"train": [b[0], b[1], b[2], b[3], b[8]], "val": [b[4], b[5], b[6]],
            "test": [b[7], b[8]]}  # b[8] listed in train and test: in_two_splits, no copy
  # b[0]'s bytes in all three splits: test's copy is the first (splits in name order)
  splits["val"].append(copy(b[0], "zz_b0_in_val.jpg"))
  splits["test"].append(copy(b[0], "zz_b0_in_test.jpg"))
  splits["train"].append(copy(b[1], "zz_b1_again.jpg"))  # within train
  splits["val"] += [copy(b[4], "a_b4_first.jpg"), copy(b[4], "zz_b4_third.jpg")]  # 3 in val
  # equal size, dimensions and format, other bytes (one pixel): no copies
  for name, value in (("decoy_a.png", 10), ("decoy_b.png", 11)):
    pixels = Image.new("RGB", (64, 48), (0, 0, 0))
    pixels.putpixel((5, 5), (value, 0, 0))
    pixels.save(folder / name, format="PNG", compress_level=0)
    by_name[name] = sample.SampleImage(name, 64, 48, "png", [], "train", image_id=0)
  assert (folder / "decoy_a.png").stat().st_size == (folder / "decoy_b.png").stat().st_size
  splits["train"].append("decoy_a.png")
  splits["val"].append("decoy_b.png")
  for split, files in splits.items():
    with open(root / f"{split}_labels.csv", "w", newline="") as f:
      writer = csv.writer(f)
      writer.writerow(["filename", "width", "height", "class", "xmin", "ymin", "xmax", "ymax"])
      for name in files:
        im = by_name[name]
        rows = im.boxes or [("", "", "", "", "")]
        for label, *box in rows:
          writer.writerow([name, im.width, im.height, label, *box])
  expected = {
      "leaked": {("zz_b0_in_test.jpg", "test", b[0], "train"),
                 ("zz_b0_in_test.jpg", "test", "zz_b0_in_val.jpg", "val")},
      "duplicate": {(b[1], "train", "zz_b1_again.jpg", "train"),
                    ("a_b4_first.jpg", "val", b[4], "val"),
                    ("a_b4_first.jpg", "val", "zz_b4_third.jpg", "val")},
  }
  assert b[1] < "zz_b1_again.jpg" and "a_b4_first.jpg" < b[4]  # the order the test expects
  return splits, expected


def _reported(errors_text: str, images: str, names: List[str]) -> Dict[str, set]:
  """{"leaked"|"duplicate": {(first, its split, copy, its split)}} from the error report,
  each warning's named files read from its message (the copy's path is its source)."""
  found: Dict[str, set] = {"leaked": set(), "duplicate": set()}
  kinds = {"leaked_across_splits": "leaked", "duplicate_content": "duplicate"}
  for line in errors_text.splitlines():
    error = json.loads(line)
    if error["reason"] not in kinds:
      continue
    assert error["level"] == "warning", error
    copy = error["source"]
    assert copy.startswith(images) and copy.endswith("/" + error["key"]), error
    message = error["message"]
    assert message.startswith(copy), message
    assert "SHA-256 " in message
    others = [n for n in names if n != error["key"] and
              re.search(re.escape(f"{images}/{n}") + r"[ ,;:)]", message)]
    assert len(others) == 1, (message, others)
    split_of = _split_in(message, error["reason"])
    found[kinds[error["reason"]]].add((others[0], split_of[1], error["key"], split_of[0]))
  return found


def _split_in(message: str, reason: str) -> Tuple[str, str]:
  """(the copy's split, the first copy's split) as the message says them."""
  if reason == "leaked_across_splits":  # "X (split S) has the same bytes as Y in split T: ..."
    copy_split = message.split("(split ", 1)[1].split(")", 1)[0]
    first_split = message.split(" in split ", 1)[1].split(":", 1)[0]
    return copy_split, first_split
  split = message.split("both in split ", 1)[1].split(":", 1)[0]
  return split, split


def _convert(images: str, data: str, output: str, *extra: str) -> int:
  return cli.main(["convert", "--format", "csv",
                   *[f"--input={s}={data}/{s}_labels.csv" for s in SPLITS],
                   f"--images={images}", f"--output={output}", "--num-shards=2", RUNNER,
                   *extra])


def _check_run(out_text: str, manifest: Dict, card: str, errors_text: str, images: str,
               splits: Dict[str, List[str]], expected: Dict[str, set]) -> None:
  names = sorted({n for files in splits.values() for n in files})
  written = sum(len(files) for files in splits.values())
  assert _reported(errors_text, images, names) == expected
  leakage = manifest["leakage"]
  assert leakage == {"leaked_across_splits": 2, "duplicate_content": 3,
                     "images_checked": written, "images_unchecked": 0}
  assert manifest["errors"]["by_reason"]["leaked_across_splits"] == 2
  assert manifest["errors"]["by_reason"]["duplicate_content"] == 3
  assert manifest["errors"]["by_reason"]["in_two_splits"] == 1  # b[8]: the plan's warning
  assert "identical bytes: 2 leaked across splits, 3 duplicate content within a split" in \
      out_text, out_text
  assert "## Identical images" in card and f"Of {written} images compared" in card
  assert "2 also have a copy in another split" in card and "3 are copies under" in card


def test_planted_copies_local(tmp_path, capsys):
  data = tmp_path / "data"
  splits, expected = _plant(data)
  written = sum(len(v) for v in splits.values())
  out = tmp_path / "out"
  assert _convert(str(data / "images"), str(data), str(out)) == 0
  text = capsys.readouterr().out
  manifest = json.loads((out / "manifest.json").read_text())
  errors_text = "".join(p.read_text() for p in sorted(out.glob("errors-*.jsonl")))
  _check_run(text, manifest, (out / "README.md").read_text(), errors_text,
             str(data / "images"), splits, expected)
  # every copy is written all the same: the records hold each file's own bytes
  records = [r for p in sorted(out.glob("*.tfrecord")) for r in read_shard(p)]
  assert len(records) == written == manifest["totals"]["images"]
  found = []
  for r in records:
    name = r.values["image/filename"].decode()
    assert r.values["image/encoded"] == (data / "images" / name).read_bytes()
    found.append((r.shard.split("-")[0], name))
  assert sorted(found) == sorted((s, n) for s, files in splits.items() for n in files)

  # --strict fails on any copy (exit 3, error_rate); the output stays as it was
  failed = tmp_path / "strict"
  assert _convert(str(data / "images"), str(data), str(failed), "--strict") == 3
  err = capsys.readouterr().err
  assert "error rate" in err and "--max-error-rate 0" in err, err
  # the line says that the copies it counts were written, not rejected (issue 40, item 12)
  assert "5 rejected inputs, 5 of them extra copies of images (leaked_across_splits, " \
      "duplicate_content)" in err, err
  run_dirs = list(failed.glob(".beam-tfrecord-run-*"))
  report = json.loads((run_dirs[0] / "manifest.json").read_text())
  assert report["outcome"] == "error_rate" and report["leakage"]["duplicate_content"] == 3
  assert report["errors"]["rate"] == pytest.approx(5 / written)
  assert not (failed / "manifest.json").exists()
  # --max-error-rate counts each copy as a rejection: 5 of `written`
  assert _convert(str(data / "images"), str(data), str(tmp_path / "low"),
                  f"--max-error-rate={4.5 / written}") == 3
  assert _convert(str(data / "images"), str(data), str(tmp_path / "high"),
                  f"--max-error-rate={5.5 / written}") == 0
  capsys.readouterr()


def test_planted_copies_beam_sink(tmp_path, capsys):
  """--sink beam: the same copies from its own encoder."""
  data = tmp_path / "data"
  splits, expected = _plant(data)
  out = tmp_path / "out"
  assert _convert(str(data / "images"), str(data), str(out), "--sink=beam") == 0
  text = capsys.readouterr().out
  errors_text = "".join(p.read_text() for p in sorted(out.glob("errors-*.jsonl")))
  _check_run(text, json.loads((out / "manifest.json").read_text()),
             (out / "README.md").read_text(), errors_text, str(data / "images"), splits,
             expected)


def test_append_compares_kept_images_from_their_catalog(tmp_path, capsys):
  """--append keeps unchanged shards unread: their images' digests come from the version's
  catalog, so the copies are found as by a full run."""
  data = tmp_path / "data"
  splits, expected = _plant(data)
  dest = tmp_path / "dest"
  images = str(data / "images")
  assert _convert(images, str(data), str(dest), "--append") == 0
  # one image more, like no other: the earlier shards are kept as they are
  Image.new("RGB", (64, 48), (200, 10, 10)).save(data / "images" / "new.png")
  with open(data / "train_labels.csv", "a", newline="") as f:
    csv.writer(f).writerow(["new.png", 64, 48, "", "", "", "", ""])
  splits["train"].append("new.png")
  capsys.readouterr()
  assert _convert(images, str(data), str(dest), "--append") == 0
  text = capsys.readouterr().out
  out = dest / (dest / "LATEST").read_text().strip()
  manifest = json.loads((out / "manifest.json").read_text())
  shards = manifest["incremental"]["shards"]
  assert shards["rewritten"] == 0 and shards["kept"] >= 1, shards  # kept shards: unread
  errors_text = "".join(p.read_text() for p in sorted(out.glob("errors-*.jsonl")))
  _check_run(text, manifest, (out / "README.md").read_text(), errors_text, images, splits,
             expected)


@pytest.fixture(scope="module")
def emulator():
  pytest.importorskip("gcp_storage_emulator")
  with gcs_emulator.running(BUCKET):
    yield


def test_planted_copies_on_gs(emulator, tmp_path, capsys):
  from apache_beam.io.filesystems import FileSystems
  local = tmp_path / "data"
  splits, expected = _plant(local)
  data = f"gs://{BUCKET}/data"
  uploads = [f"{s}_labels.csv" for s in SPLITS] + [
      f"images/{n}" for n in os.listdir(local / "images")]
  for name in uploads:
    with FileSystems.create(f"{data}/{name}") as f:
      f.write((local / name).read_bytes())
  out = f"gs://{BUCKET}/out"

  def read(path: str) -> str:
    with FileSystems.open(path) as f:
      return f.read().decode("utf-8")

  assert _convert(f"{data}/images", data, out) == 0
  text = capsys.readouterr().out
  errors = FileSystems.match([f"{out}/errors-*.jsonl"])[0].metadata_list
  _check_run(text, json.loads(read(f"{out}/manifest.json")), read(f"{out}/README.md"),
             "".join(read(m.path) for m in errors), f"{data}/images", splits, expected)
  assert _convert(f"{data}/images", data, f"gs://{BUCKET}/strict", "--strict") == 3
  capsys.readouterr()
