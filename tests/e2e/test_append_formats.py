"""--append with the other record files (issue 41): ArrayRecord versions and --index-files.
Kept files stay as they are (the same inode), rewritten ones are written anew, and each
version holds what a full run of its sources holds; a damaged kept ArrayRecord file costs
work, never a wrong record; index files of kept and rewritten shards match their shards."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PIL import Image

from beam_tfrecord.readback import verify
from versioned_outputs import dataset, latest, records, run

pytestmark = pytest.mark.e2e


def _files(directory: str, pattern: str):
  return {p.name: p.stat().st_ino for p in Path(directory).glob(pattern)}


def _full(src: Path, tmp: Path, *extra) -> dict:
  out = tmp / f"full-{len(list(tmp.glob('full-*')))}"
  run(src, str(out), *extra)
  return records(str(out))


def _change(src: Path, names):
  """Two images added, one redrawn, one removed."""
  dataset(src, names + ["new1.jpg", "new2.jpg"])
  Image.new("RGB", (45, 30), (250, 250, 250)).save(src / "imgs" / names[5])
  doc = json.loads((src / "ann.json").read_text())
  gone = next(i["id"] for i in doc["images"] if i["file_name"] == names[30])
  doc["images"] = [i for i in doc["images"] if i["id"] != gone]
  doc["annotations"] = [a for a in doc["annotations"] if a["image_id"] != gone]
  (src / "ann.json").write_text(json.dumps(doc))


def test_array_record_versions_equal_full_runs(tmp_path, capsys):
  src, dest = tmp_path / "src", tmp_path / "dest"
  names = [f"{i:03d}.jpg" for i in range(40)]
  dataset(src, names)
  fmt = ("--file-format", "array_record")
  run(src, str(dest), "--append", *fmt)
  v1 = latest(dest)
  assert records(v1) == _full(src, tmp_path, *fmt)
  before = _files(v1, "*.array_record")
  assert len(before) == 4
  _change(src, names)
  done = run(src, str(dest), "--append", *fmt)
  assert "2 added, 1 changed, 1 removed, 38 kept" in done.stdout, done.stdout
  v2 = latest(dest)
  assert v2.endswith("00000002") and records(v2) == _full(src, tmp_path, *fmt)
  after = _files(v2, "*.array_record")
  kept = {n for n in after if after[n] in before.values()}
  assert kept and len(kept) < len(after)  # some kept (linked), some written anew
  assert verify.run(v2) == 0
  # a kept file damaged (its last 2 KB cut, written in place): the next version re-encodes
  # its images from the sources and equals a full run; the damage is reported
  shard = Path(v2) / sorted(kept)[0]
  os.chmod(shard, 0o644)
  data = shard.read_bytes()
  with open(shard, "r+b") as f:
    f.truncate(len(data) - 2048)
  dataset(src, [n for n in names if n != names[30]] + ["new1.jpg", "new2.jpg", "new3.jpg"])
  Image.new("RGB", (45, 30), (250, 250, 250)).save(src / "imgs" / names[5])
  third = run(src, str(dest), "--append", *fmt)
  v3 = latest(dest)
  assert v3.endswith("00000003") and records(v3) == _full(src, tmp_path, *fmt)
  errors = "".join(p.read_text() for p in Path(v3).glob("errors-*.jsonl"))
  assert "earlier_shard_damaged" in errors, third.stdout + errors
  capsys.readouterr()
  assert verify.run(v3) == 0, capsys.readouterr().out


def test_index_files_of_kept_and_rewritten_shards_match(tmp_path, capsys):
  src, dest = tmp_path / "src", tmp_path / "dest"
  names = [f"{i:03d}.jpg" for i in range(40)]
  dataset(src, names)
  run(src, str(dest), "--append", "--index-files")
  v1 = latest(dest)
  _change(src, names)
  run(src, str(dest), "--append", "--index-files")
  v2 = latest(dest)
  shards, indexes = _files(v2, "*.tfrecord"), _files(v2, "*.tfrecord.idx")
  assert set(indexes) == {n + ".idx" for n in shards}
  # kept shards are the same file; each of their indexes was written anew from it, and an
  # index never points into another version (no shared index file)
  assert set(shards.values()) & set(_files(v1, "*.tfrecord").values())
  assert not set(indexes.values()) & set(_files(v1, "*.idx").values())
  capsys.readouterr()
  assert verify.run(v2) == 0, capsys.readouterr().out
  assert records(v2) == _full(src, tmp_path, "--index-files")
  manifest = json.loads((Path(v2) / "manifest.json").read_text())
  assert set(indexes) <= set(manifest["files"])
