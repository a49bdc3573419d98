"""`convert --if-changed` on gs:// (a local Cloud Storage emulator): the workers list the
bucket page by page (fingerprint._walk_gcs), a skipped run leaves the output's objects as they
were and removes its run directory, a re-uploaded image converts again."""
from __future__ import annotations

import json
import os

import gcs_emulator
import pytest

pytest.importorskip("gcp_storage_emulator")

from apache_beam.io.filesystems import FileSystems  # noqa: E402

from beam_tfrecord import cli, sample  # noqa: E402
from beam_tfrecord.config import ConvertConfig  # noqa: E402
from beam_tfrecord.finalize import fingerprint  # noqa: E402

BUCKET = "tfr-if-changed"


@pytest.fixture(scope="module")
def emulator():
  """The emulator on a free loopback port, in memory, with one bucket; stopped afterwards."""
  with gcs_emulator.running(BUCKET):
    yield


def _objects(prefix: str) -> dict:
  """{name below prefix: bytes} of every object under a gs:// prefix."""
  found = FileSystems.match([prefix.rstrip("/") + "/**"])[0].metadata_list
  result = {}
  for meta in found:
    with FileSystems.open(meta.path, compression_type="uncompressed") as f:
      result[meta.path[len(prefix.rstrip("/")) + 1:]] = f.read()
  return result


def test_if_changed_on_gs(emulator, tmp_path, capsys):
  local = tmp_path / "data"
  images = sample.make_dataset(str(local), count=5)
  data = f"gs://{BUCKET}/data"
  for name in ["train_labels.csv", "val_labels.csv"] + [f"images/{n}" for n in
                                                         os.listdir(local / "images")]:
    with FileSystems.create(f"{data}/{name}") as f:
      f.write((local / name).read_bytes())
  out = f"gs://{BUCKET}/out"
  argv = ["convert", "--format", "csv", "--input", f"train={data}/train_labels.csv",
          "--input", f"val={data}/val_labels.csv", "--images", f"{data}/images",
          "--output", out, "--num-shards", "1", "--runner=FnApiRunner", "--if-changed"]
  assert cli.main(argv) == 0
  manifest = json.loads(_objects(out)["manifest.json"])
  fp = manifest["source_fingerprint"]
  assert fp == fingerprint.compute(ConvertConfig(**manifest["config"]))
  assert (fp["patterns"], fp["files"]) == (3, 2 + len(images))
  assert sorted(_objects(out)) == sorted(manifest["files"])
  before = _objects(out)
  capsys.readouterr()

  assert cli.main(argv) == 0
  assert capsys.readouterr().out.splitlines() == [
      f"beam-tfrecord: skipped, sources unchanged since the run of {manifest['created']} in "
      f"{out} ({fp['files']} files, fingerprint {fp['sha256'][:12]})"]
  assert _objects(out) == before  # no run directory, no lock: the objects as they were

  first = images[0].file_name
  with FileSystems.create(f"{data}/images/{first}") as f:
    f.write((local / "images" / first).read_bytes() + b"\0")  # a new size
  assert cli.main(argv) == 0
  assert "skipped" not in capsys.readouterr().out
  again = json.loads(_objects(out)["manifest.json"])
  assert again["run_id"] != manifest["run_id"]
  assert again["source_fingerprint"] == fingerprint.compute(ConvertConfig(**again["config"]))
  assert again["source_fingerprint"]["bytes"] == fp["bytes"] + 1
