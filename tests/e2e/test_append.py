"""convert --append (issue 29): versions that grow by appending, checked against full runs.

Each test runs the real CLI on COCO datasets it writes (real JPEGs), reads every version back
with TensorFlow and compares it, image by image, with a full conversion of the same sources.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from beam_tfrecord.storage import versions
from versioned_outputs import (append_after_damage as _append_after_damage,
                               dataset as _dataset, edit_catalog as _edit_catalog, full as _full,
                               in_process as _in_process,
                               latest as _latest, records as _records, run as _run)

pytestmark = pytest.mark.e2e


def _inodes(directory: str):
  return {p.name: (p.stat().st_ino, p.read_bytes()) for p in Path(directory).glob("*.tfrecord")}


def test_versions_equal_full_runs_and_keep_old_shards(tmp_path):
  src, dest = tmp_path / "src", tmp_path / "dest"
  names = [f"{i:03d}.jpg" for i in range(80)]
  _dataset(src, names)
  first = _run(src, str(dest), "--append")
  assert "full version: the first version" in first.stdout
  v1 = _latest(dest)
  assert v1.endswith("versions/00000001") and _records(v1) == _full(src, tmp_path)

  # nothing changed: nothing published, no Beam job
  probe = subprocess.run(
      [sys.executable, "-c", "import sys; from beam_tfrecord.cli import main; "
       f"code = main(['convert', '--format', 'coco', '--input', 'train={src / 'ann.json'}', "
       f"'--images', '{src / 'imgs'}', '--output', '{dest}', '--num-shards', '4', "
       "'--append']); print('beam imported:', 'apache_beam.pipeline' in sys.modules); "
       "sys.exit(code)"], capture_output=True, text=True, timeout=300)
  assert probe.returncode == 0 and "unchanged:" in probe.stdout, probe.stdout + probe.stderr
  assert "beam imported: False" in probe.stdout
  assert versions.numbers(str(dest)) == [1]

  # 3 added: one delta shard, every earlier shard the same inode and bytes
  _dataset(src, names + ["new1.jpg", "new2.jpg", "new3.jpg"])
  second = _run(src, str(dest), "--append")
  assert "append: 3 added, 0 changed, 0 removed, 80 kept; 1 delta shard written, " \
         "0 shards rewritten, 4 kept" in second.stdout, second.stdout
  v2 = _latest(dest)
  assert _records(v2) == _full(src, tmp_path)
  before, after = _inodes(v1), _inodes(v2)
  assert len(after) == 5
  assert sorted(before.values()) == sorted(v for v in after.values() if v in before.values())

  # an image changed in place with its size and modification time kept (cp -p), one removed,
  # one added: the shards holding them rewritten, the rest kept
  a, b = src / "imgs" / "005.jpg", src / "imgs" / "007.jpg"
  stamp = os.stat(b)
  data = a.read_bytes()
  data = data + b"\0" * (stamp.st_size - len(data)) if len(data) < stamp.st_size else data
  if len(data) == stamp.st_size:
    b.write_bytes(data)
    os.utime(b, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
  else:
    b.write_bytes(data)
  _dataset(src, [n for n in names if n != "010.jpg"] + ["new1.jpg", "new2.jpg", "new3.jpg",
                                                        "new4.jpg"])
  third = _run(src, str(dest), "--append")
  assert "1 added" in third.stdout and "1 removed" in third.stdout, third.stdout
  assert "changed" in third.stdout and "0 changed" not in third.stdout, third.stdout
  v3 = _latest(dest)
  assert _records(v3) == _full(src, tmp_path)
  # the earlier versions are unchanged, byte for byte
  assert _inodes(v2) == after
  # --compact: a full version with a fresh plan, same records
  compacted = _run(src, str(dest), "--append", "--compact")
  assert "full version: --compact" in compacted.stdout
  v4 = _latest(dest)
  assert _records(v4) == _records(v3) and len(_inodes(v4)) == 4
  # --keep 1 (with a change, so a version is made): versions superseded within
  # --retain-hours stay (a reader may hold them); with 0 only LATEST's is left, and it reads
  _dataset(src, [n for n in names if n != "010.jpg"] + ["new5.jpg"])
  _run(src, str(dest), "--append", "--keep", "1")
  assert versions.numbers(str(dest)) == [1, 2, 3, 4, 5]
  _dataset(src, [n for n in names if n != "010.jpg"] + ["new5.jpg", "new6.jpg"])
  _run(src, str(dest), "--append", "--keep", "1", "--retain-hours", "0")
  assert versions.numbers(str(dest)) == [6]
  assert _records(_latest(dest)) == _full(src, tmp_path)


def test_a_damaged_earlier_version_costs_work_not_a_wrong_record(tmp_path):
  outside = tmp_path / "outside.tfrecord"

  def damage(v1):
    # a row's offset moved by 7 bytes; another pointing at its neighbour's record; a third
    # partition with float offsets; a kept shard replaced by a symlink to an outside file
    indexes = sorted(v1.glob("catalog-*.parquet"))

    def moved(columns):
      columns["offset"][0] += 7
      columns["offset"][1], columns["length"][1] = columns["offset"][2], columns["length"][2]
    _edit_catalog(indexes[0], moved)
    import pyarrow as pa
    from beam_tfrecord.storage import catalog
    floats = pa.schema([f if f.name != "offset" else pa.field("offset", pa.float64())
                        for f in catalog.SCHEMA])
    _edit_catalog(indexes[1], lambda columns: None, schema=floats)
    shard = sorted(v1.glob("train-*.tfrecord"))[3]
    outside.write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(outside)
  _, v2 = _append_after_damage(tmp_path, 40, damage)
  for path in Path(v2).glob("*.tfrecord"):  # nothing links to the outside file
    assert not path.is_symlink() and path.stat().st_ino != outside.stat().st_ino


def test_a_fifo_in_place_of_a_shard_does_not_hang(tmp_path):
  def damage(v1):
    for name in ("train-00001-of-00004.tfrecord", "catalog-train-00002-of-00004.parquet"):
      (v1 / name).unlink()
      os.mkfifo(v1 / name)
  _append_after_damage(tmp_path, 20, damage)  # a version equal to a full run


def test_a_kill_while_publishing_leaves_the_old_version_latest(tmp_path):
  """Killed while publishing the version, then while publishing LATEST: each time on the
  same first version (a copy of it put back) and the same change."""
  src, dest = tmp_path / "src", tmp_path / "dest"
  names = [f"{i:03d}.jpg" for i in range(20)]
  _dataset(src, names)
  _run(src, str(dest), "--append")
  first = tmp_path / "first"
  shutil.copytree(dest, first, symlinks=True)
  _dataset(src, names + ["k.jpg"])
  want = _full(src, tmp_path)
  for i, point in enumerate(["publish-version", "publish-latest"]):
    if i:
      shutil.rmtree(dest)
      shutil.copytree(first, dest, symlinks=True)
    killed = _run(src, str(dest), "--append", env=dict(os.environ, BEAM_TFRECORD_KILL_AT=point),
                  check=False)
    assert killed.returncode == -9, point
    assert _latest(dest).endswith("00000001"), point
    again = _run(src, str(dest), "--append")
    assert _latest(dest).endswith("00000002"), (point, again.stdout)
    assert versions.numbers(str(dest)) == [1, 2], point
    assert _records(_latest(dest)) == want, point


def test_two_racing_runs_publish_once(tmp_path):
  src, dest = tmp_path / "src", tmp_path / "dest"
  names = [f"{i:03d}.jpg" for i in range(30)]
  _dataset(src, names)
  _run(src, str(dest), "--append")
  _dataset(src, names + ["r.jpg"])
  results = []
  threads = [threading.Thread(target=lambda: results.append(
      _run(src, str(dest), "--append", check=False, subprocess_only=True))) for _ in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  codes = sorted(r.returncode for r in results)
  assert codes[0] == 0 and codes[1] != 0, [r.stderr for r in results]
  loser = [r for r in results if r.returncode][0]
  assert len(loser.stderr.strip().splitlines()) == 1, loser.stderr
  assert versions.numbers(str(dest)) == [1, 2]
  assert [n for n in os.listdir(dest) if n.startswith(".beam-tfrecord-run")] == []


def test_an_output_without_a_shard_plan_gets_a_full_version(tmp_path):
  src, dest = tmp_path / "src", tmp_path / "dest"
  names = [f"{i:03d}.jpg" for i in range(20)]
  _dataset(src, names)
  _run(src, str(dest), "--append")
  manifest_path = Path(_latest(dest), "manifest.json")
  manifest = json.loads(manifest_path.read_text())
  del manifest["shard_plan"]
  manifest_path.write_text(json.dumps(manifest))
  _dataset(src, names + ["z.jpg"])
  done = _run(src, str(dest), "--append")
  assert "full version: " in done.stdout and "no shard_plan" in done.stdout, done.stdout
  assert _records(_latest(dest)) == _full(src, tmp_path)


def test_each_tfds_version_loads_with_builder_from_directory(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  src, out = tmp_path / "src", tmp_path / "tfds"
  names = [f"{i:03d}.jpg" for i in range(24)]
  _dataset(src, names)
  tfds_args = ("--append", "--layout", "tfds", "--dataset-name", "mini")
  _run(src, str(out), *tfds_args)
  _dataset(src, names + ["t1.jpg", "t2.jpg"])
  _run(src, str(out), *tfds_args)
  dest = out / "mini" / "1.0.0"
  for number, count in ((1, 24), (2, 26)):
    directory = versions.version_dir(str(dest), number)
    builder = tfds.builder_from_directory(directory)
    loaded = sorted(ex["image/filename"].numpy().decode()
                    for ex in builder.as_dataset(split="train"))
    assert builder.info.splits["train"].num_examples == count == len(loaded)
    assert loaded == sorted(names + ["t1.jpg", "t2.jpg"])[:count]


def test_verify_checks_indexes_against_their_shards(tmp_path):
  src, dest = tmp_path / "src", tmp_path / "dest"
  _dataset(src, [f"{i:03d}.jpg" for i in range(12)])
  _run(src, str(dest), "--append")
  verify = ["verify", str(dest)]
  ok = _in_process(verify)
  assert ok.returncode == 0 and "-> versions/00000001" in ok.stdout, ok.stdout + ok.stderr
  index = sorted(Path(_latest(dest)).glob("catalog-*.parquet"))[0]
  key = []
  def forged(columns):  # the digest of another image's records, say
    columns["sha"][0] = "0" * 32
    key.append(columns["key"][0])
  _edit_catalog(index, forged)
  bad = _in_process(verify)
  assert bad.returncode == 1
  assert f"{index.name}: not the partition the manifest lists" in bad.stdout + bad.stderr
  _edit_catalog(index, lambda columns: None, record=True)  # the manifest made to list it
  bad = _in_process(verify)
  assert bad.returncode == 1
  assert f"{index.name}: the records of {key[0]} are not what it lists" in \
      bad.stdout + bad.stderr


def test_a_runner_beam_cannot_make_is_one_line_with_append_too(tmp_path):
  src, dest = tmp_path / "src", tmp_path / "dest"
  _dataset(src, [f"{i:03d}.jpg" for i in range(4)])
  done = _run(src, str(dest), "--append", "--runner=no.such.Runner", check=False)
  assert done.returncode == 2 and "Traceback" not in done.stderr
  assert "--runner no.such.Runner" in done.stderr.strip().splitlines()[-1]
  assert not (dest / "LATEST").exists()
