"""convert --append on gs:// (a local Cloud Storage emulator): versions, LATEST as an object,
kept shards copied server side (never through this process), the version's manifest claimed
with a does-not-exist precondition, readers resolving LATEST without symlinks."""
from __future__ import annotations

import collections
import hashlib
import json
import os

import gcs_emulator
import pytest

pytest.importorskip("gcp_storage_emulator")

from apache_beam.io.filesystems import FileSystems  # noqa: E402

from beam_tfrecord import cli, sample  # noqa: E402
from beam_tfrecord.finalize import publish  # noqa: E402
from beam_tfrecord.records.tfrecord import read_record  # noqa: E402
from beam_tfrecord.storage import versions  # noqa: E402

BUCKET = "tfr-append"


@pytest.fixture(scope="module")
def emulator():
  with gcs_emulator.running(BUCKET):
    yield


def _upload(local, data, names):
  for name in names:
    with FileSystems.create(f"{data}/{name}") as f:
      f.write((local / name).read_bytes())


def _records(directory: str) -> collections.Counter:
  with FileSystems.open(f"{directory}/manifest.json") as f:
    manifest = json.loads(f.read())
  found = collections.Counter()
  for split in manifest["splits"].values():
    for shard in split["shards"]:
      with FileSystems.open(f"{directory}/{shard['path']}",
                            compression_type="uncompressed") as f:
        while True:
          record = read_record(f)
          if record is None:
            break
          found[hashlib.sha256(record).hexdigest()] += 1
  return found


def test_append_on_gs(emulator, tmp_path, capsys, monkeypatch):
  local = tmp_path / "data"
  sample.make_dataset(str(local), count=12)
  data = f"gs://{BUCKET}/data"
  names = sorted(os.listdir(local / "images"))
  _upload(local, data, ["train_labels.csv", "val_labels.csv"] + [f"images/{n}" for n in names])
  dest = f"gs://{BUCKET}/dest"

  def convert(output, *extra):
    return cli.main(["convert", "--format", "csv", "--input", f"train={data}/train_labels.csv",
                     "--input", f"val={data}/val_labels.csv", "--images", f"{data}/images",
                     "--output", output, "--num-shards", "2", "--runner=FnApiRunner", *extra])

  assert convert(dest, "--append") == 0
  assert versions.read_latest(dest) == 1
  v1 = versions.resolve(dest)
  capsys.readouterr()
  assert convert(dest, "--append") == 0  # nothing changed: the listing's metadata says so
  assert "unchanged:" in capsys.readouterr().out and versions.numbers(dest) == [1]

  # one image added: a delta shard; the others are server-side copies of version 1's objects
  (local / "images" / "extra.jpg").write_bytes((local / "images" / names[0]).read_bytes())
  csv = (local / "train_labels.csv").read_text().splitlines()
  first = csv[1].split(",")
  first[0] = "extra.jpg"
  (local / "train_labels.csv").write_text("\n".join(csv + [",".join(first)]) + "\n")
  _upload(local, data, ["train_labels.csv", "images/extra.jpg"])
  copied = []
  real_copy = FileSystems.copy
  monkeypatch.setattr(FileSystems, "copy", staticmethod(
      lambda src, dst: (copied.extend(src), real_copy(src, dst))[1]))
  opened = []
  real_open = FileSystems.open
  monkeypatch.setattr(FileSystems, "open", staticmethod(
      lambda path, *a, **k: (opened.append(path), real_open(path, *a, **k))[1]))
  assert convert(dest, "--append") == 0
  out = capsys.readouterr().out
  assert "append: 1 added" in out and "delta shard written" in out, out
  v2 = versions.resolve(dest)
  assert v2.endswith("versions/00000002")
  # the kept shards were copied server side, not read here
  kept = [u for u in copied if u.startswith(v1) and u.endswith(".tfrecord")]
  assert kept and not [u for u in opened if u.startswith(v1) and u.endswith(".tfrecord")]
  monkeypatch.undo()
  full = f"gs://{BUCKET}/full"
  assert convert(full) == 0
  assert _records(v2) == _records(full)

  # a run that lost the race for version 3: the claim fails, nothing of it is published
  with FileSystems.create(f"{dest}/versions/00000003/manifest.json") as f:
    f.write(b"{}")
  run_dir = f"{dest}/.beam-tfrecord-run-x"
  with FileSystems.create(f"{run_dir}/a.tfrecord") as f:
    f.write(b"x")
  with pytest.raises(publish.LostRace):
    publish.publish(dest, run_dir, 3, 2, "x", b"{}")
  assert versions.read_latest(dest) == 2
