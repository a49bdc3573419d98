"""--plan-from and --incremental: an incremental run's output is byte-identical to a full run
with --plan-from the earlier output, for added, removed, re-encoded and re-annotated images
and their mix; unchanged shards are the earlier files (hard links), unchanged images are
copied, not encoded; settings that shape records, the label map and a rebalance make every
image encoded again, saying why; a kill at any phase leaves the old output or the new one."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from conftest import make_dataset, subprocess_env
from PIL import Image

from beam_tfrecord import cli
from beam_tfrecord.finalize import output as outputs

pytestmark = pytest.mark.e2e
RUNNER = "--runner=FnApiRunner"
# files a run writes with its own id or time in them
RUN_FILES = ("manifest.json", "README.md")


def _inputs(ds) -> List[str]:
  return [f"--input=train={ds.csv_file('train')}", f"--input=val={ds.csv_file('val')}",
          f"--images={ds.image_dir}"]


def _convert(*args: str) -> int:
  return cli.main(["convert", *args, RUNNER])


def _files(directory: Path) -> Dict[str, bytes]:
  """Every file of an output but the run's manifest and card; the error report as its sorted
  lines (its order is the runner's)."""
  found = {}
  for p in sorted(directory.iterdir()):
    # hidden: the lock a killed run left (the next run takes it over), its run directory
    if p.is_file() and p.name not in RUN_FILES and not p.name.startswith("."):
      data = p.read_bytes()
      found[p.name] = b"".join(sorted(data.splitlines(True))) if p.name.startswith(
          "errors-") else data
  return found


def _manifest(directory: Path) -> Dict:
  return json.loads((directory / "manifest.json").read_text())


def _rows(ds, split: str = "train"):
  rows = list(csv.reader(open(ds.csv_file(split), newline="")))
  return rows[0], rows[1:]


def _write_rows(ds, head, body, split: str = "train") -> None:
  with open(ds.csv_file(split), "w", newline="") as f:
    csv.writer(f).writerows([head] + body)


def _boxed(body) -> List[str]:
  return sorted({r[0] for r in body if r[4]})


def add(ds) -> None:
  """Two new images (copies of others under new names, with their boxes)."""
  head, body = _rows(ds)
  for src in _boxed(body)[:2]:
    shutil.copy(ds.image_dir / src, ds.image_dir / f"new_{src}")
    body += [[f"new_{src}"] + r[1:] for r in body if r[0] == src]
  _write_rows(ds, head, body)


def remove(ds) -> None:
  head, body = _rows(ds)
  gone = _boxed(body)[2]
  _write_rows(ds, head, [r for r in body if r[0] != gone])


def change_bytes(ds) -> None:
  """An image drawn again (mirrored) under its name: new bytes, same annotation."""
  head, body = _rows(ds)
  name = _boxed(body)[3]
  with Image.open(ds.image_dir / name) as im:
    im.load()
    kind = im.format
    im.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(ds.image_dir / name, format=kind)


def change_annotation(ds) -> None:
  head, body = _rows(ds)
  name = _boxed(body)[4]
  row = next(r for r in body if r[0] == name)
  row[4] = f"{float(row[4]) + 2:.1f}"
  _write_rows(ds, head, body)


def mix(ds) -> None:
  for change in (add, remove, change_bytes, change_annotation):
    change(ds)


CHANGES = {"add": (add, dict(added=2)), "remove": (remove, dict(removed=1)),
           "bytes": (change_bytes, dict(changed=1)),
           "annotation": (change_annotation, dict(changed=1)),
           "mix": (mix, dict(added=2, removed=1, changed=2))}


@pytest.fixture
def earlier(tmp_path):
  """A dataset and its first output (4 shards a split), with a copy kept as --plan-from."""
  ds = make_dataset(tmp_path / "data", count=40, seed=5, extras=False)
  out = tmp_path / "out"
  assert _convert(*_inputs(ds), "--output", str(out), "--num-shards", "4",
                  "--incremental") == 0
  assert _manifest(out)["incremental"]["reason"] == "no earlier output"
  v1 = tmp_path / "v1"
  shutil.copytree(out, v1)
  inodes = {p.name: p.stat().st_ino for p in out.iterdir()}
  return ds, out, v1, inodes


def _plan(manifest):
  """The shard plan but the indexes' digests (which follow what the indexes list)."""
  return {split: {k: v for k, v in entry.items() if k not in ("index_digests", "index_rows")}
          for split, entry in manifest["shard_plan"].items()}


# each change alone is covered by the mix (its counts are asserted) and, without Beam, by the
# writer's comparison in tests/write; bytes alone: a new file of the same size. The full run
# is also --plan-from's own test: the earlier bounds (4 shards, whatever --num-shards says)
# and shard indexes written; each image where its identity falls between the bounds
@pytest.mark.parametrize("kind", ["bytes", "mix"])
def test_incremental_equals_full_run_with_plan_from(earlier, tmp_path, kind):
  ds, out, v1, inodes = earlier
  if kind == "bytes":
    # unchanged sources first: every shard kept, the earlier files themselves
    assert _convert(*_inputs(ds), "--output", str(out), "--incremental", "--overwrite") == 0
    assert _manifest(out)["incremental"]["shards"] == {"total": 8, "rewritten": 0, "kept": 8}
    assert all(os.stat(out / n).st_ino == inodes[n] for n in _files(out)
               if not n.startswith("errors-") and n != "label_map.pbtxt")
  change, expected = CHANGES[kind]
  change(ds)
  if kind == "mix":  # the same incremental run on the multi-processing DirectRunner, below
    multi = tmp_path / "multi"
    shutil.copytree(v1, multi)
  assert _convert(*_inputs(ds), "--output", str(out), "--incremental", "--overwrite") == 0
  full = tmp_path / "full"
  assert _convert(*_inputs(ds), "--output", str(full), "--plan-from", str(v1),
                  "--num-shards", "2") == 0
  assert _files(out) == _files(full)
  summary = _manifest(out)["incremental"]
  assert summary["mode"] == "incremental" and summary["reason"] == ""
  images = {k: v for k, v in summary["images"].items() if k != "kept"}
  assert images == {"added": 0, "changed": 0, "removed": 0, **expected}
  shards = summary["shards"]
  assert shards["total"] == 8 and 1 <= shards["rewritten"] <= 4
  # unchanged shards are the earlier files themselves; rewritten ones are new files
  shard_files = [n for n in _files(out) if n.endswith(".tfrecord")]
  kept = [n for n in shard_files if os.stat(out / n).st_ino == inodes[n]]
  assert len(kept) == shards["kept"] and len(shard_files) - len(kept) == shards["rewritten"]
  for name in kept:
    index = f"catalog-{name[:-len('.tfrecord')]}.parquet"
    assert os.stat(out / index).st_ino == inodes[index]
  # unchanged images copied, not encoded: only the added and changed ones were
  total = sum(e["images"] for e in _manifest(out)["splits"].values())
  assert summary["reused_images"] == total - expected.get("added", 0) - \
      expected.get("changed", 0)
  assert summary["images"]["kept"] == summary["reused_images"]
  # and what trainers read is what the sources say
  from beam_tfrecord.readback import verify
  assert verify.run(str(out)) == 0
  # --plan-from: the earlier plan whatever --num-shards says, its indexes written, no
  # incremental summary; val is not changed by either kind: its shards are the earlier bytes
  manifest = _manifest(full)
  assert manifest["splits"]["train"]["num_shards"] == 4
  assert _plan(manifest) == _plan(_manifest(v1))
  assert all(len(e["index_digests"]) == len(e["indexes"])
             for e in manifest["shard_plan"].values())
  assert "incremental" not in manifest
  old = {n: b for n, b in _files(v1).items() if n.startswith("val-")}
  assert {n: b for n, b in _files(full).items() if n.startswith("val-")} == old
  if kind == "mix":  # the multi-processing runner gives the same bytes
    assert cli.main(["convert", *_inputs(ds), "--output", str(multi), "--incremental",
                     "--overwrite", "--runner=DirectRunner", "--direct_num_workers=2",
                     "--direct_running_mode=multi_processing"]) == 0
    assert _files(multi) == _files(full)
    assert _manifest(multi)["incremental"]["mode"] == "incremental"


RECORD_SETTINGS = [
    (["--max-side", "40"], "settings that shape records changed: max_side"),
    (["--schema", "coco-objects"], "settings that shape records changed: schema"),
]


def test_record_settings_changed_encode_everything(earlier, tmp_path):
  """Each setting in turn on the same change, the output put back to version 1 between."""
  ds, out, v1, inodes = earlier
  change_bytes(ds)
  for i, (option, reason) in enumerate(RECORD_SETTINGS):
    if i:
      shutil.rmtree(out)
      shutil.copytree(v1, out)
    assert _convert(*_inputs(ds), "--output", str(out), "--incremental", "--overwrite",
                    *option) == 0
    summary = _manifest(out)["incremental"]
    assert summary["mode"] == "full" and summary["reason"] == reason, option
    assert summary["reused_images"] == 0 and summary["shards"]["kept"] == 0, option
    full = tmp_path / f"full{i}"
    assert _convert(*_inputs(ds), "--output", str(full), "--plan-from", str(v1),
                    *option) == 0
    assert _files(out) == _files(full), option


def test_a_new_class_changes_the_label_map_and_encodes_everything(earlier, tmp_path):
  ds, out, v1, _ = earlier
  head, body = _rows(ds)
  row = next(r for r in body if r[4])
  row[3] = "aardvark"  # sorts first: every id moves
  _write_rows(ds, head, body)
  assert _convert(*_inputs(ds), "--output", str(out), "--incremental", "--overwrite") == 0
  summary = _manifest(out)["incremental"]
  assert summary["mode"] == "full" and summary["reason"] == "the label map changed"
  assert summary["reused_images"] == 0
  full = tmp_path / "full"
  assert _convert(*_inputs(ds), "--output", str(full), "--plan-from", str(v1)) == 0
  assert _files(out) == _files(full)


def test_a_shard_outgrowing_twice_its_plan_rebalances(earlier, tmp_path):
  """Images added in one shard's part of the order until it holds more than twice its
  planned 5: the plan is made afresh (4 shards of 5 + the new ones), saying so."""
  ds, out, v1, _ = earlier
  plan = _manifest(v1)["shard_plan"]["train"]
  bound = int(plan["bounds"][0][0], 16)  # shard 0 of train: identities below it
  from beam_tfrecord.records.packed import identity_hash
  head, body = _rows(ds)
  src = _boxed(body)[0]
  added = 0
  i = 0
  while added < 11:
    name = f"extra_{i}_{src}"
    i += 1
    if identity_hash(name) < bound:
      shutil.copy(ds.image_dir / src, ds.image_dir / name)
      body += [[name] + r[1:] for r in body if r[0] == src]
      added += 1
  _write_rows(ds, head, body)
  # the shard-size options apply when the plan is made afresh: the cron args repeat them
  assert _convert(*_inputs(ds), "--output", str(out), "--incremental", "--overwrite",
                  "--num-shards", "4") == 0
  summary = _manifest(out)["incremental"]
  assert summary["mode"] == "full"
  assert summary["reason"].startswith("split 'train': shard 0 would hold 16 images, planned "
                                      "for 5") and "rebalance" in summary["reason"]
  train = _manifest(out)["shard_plan"]["train"]
  assert train["planned"] == [7, 8, 8, 8]  # planned afresh, 31 images in 4 shards
  full = tmp_path / "full"
  assert _convert(*_inputs(ds), "--output", str(full), "--plan-from", str(v1),
                  "--num-shards", "4") == 0
  assert _files(out) == _files(full)


def test_an_earlier_output_without_indexes_is_encoded_again_once(tmp_path):
  """A plain run (no index): an incremental run after it keeps its plan but encodes every
  image, saying why, and writes the indexes; the next one compares."""
  ds = make_dataset(tmp_path / "data", count=20, seed=2, extras=False)
  out = tmp_path / "out"
  assert _convert(*_inputs(ds), "--output", str(out), "--num-shards", "2") == 0
  assert not [n for n in os.listdir(out) if n.startswith("catalog-")]
  v1 = tmp_path / "v1"
  shutil.copytree(out, v1)
  change_bytes(ds)
  assert _convert(*_inputs(ds), "--output", str(out), "--incremental", "--overwrite") == 0
  summary = _manifest(out)["incremental"]
  assert summary["mode"] == "full"
  assert summary["reason"] == "the earlier output has no shard indexes"
  full = tmp_path / "full"
  assert _convert(*_inputs(ds), "--output", str(full), "--plan-from", str(v1)) == 0
  assert _files(out) == _files(full)
  assert _convert(*_inputs(ds), "--output", str(out), "--incremental", "--overwrite") == 0
  assert _manifest(out)["incremental"]["shards"]["kept"] == 4


@pytest.fixture(scope="module")
def plan_source(tmp_path_factory):
  """A dataset and an output with a shard plan, which the tests only read (or copy)."""
  root = tmp_path_factory.mktemp("plan_source")
  ds = make_dataset(root / "data", count=6, seed=5, extras=False)
  out = root / "out"
  assert _convert(*_inputs(ds), "--output", str(out), "--num-shards", "2", "--incremental") == 0
  return ds, out


@pytest.mark.parametrize("bad,message", [
    ("missing", "no manifest.json there"),
    ("edited", "its manifest.json has no usable shard plan"),
])
def test_plan_from_a_bad_directory_is_exit_2(plan_source, tmp_path, capsys, bad, message):
  ds, v1 = plan_source
  source = tmp_path / "nowhere"
  if bad == "edited":
    source = tmp_path / "edited"
    shutil.copytree(v1, source)
    manifest = _manifest(source)
    manifest["splits"]["train"]["shards"][0]["path"] = "../../etc/passwd"
    (source / "manifest.json").write_text(json.dumps(manifest))
  code = cli.main(["convert", *_inputs(ds), "--output", str(tmp_path / "o"), "--plan-from",
                   str(source), RUNNER])
  assert code == 2 and message in capsys.readouterr().err
  assert not (tmp_path / "o").exists()


# every point of a plain run's is killed in tests/e2e/test_output_safety.py (the swap is the
# same code): here those where an incremental run differs. After its indexed shards are
# written, after Finalize linked the kept ones, and while the swap deletes old files whose
# data the kept links share
KILL_POINTS = ["shard", "finalize", "swap-old-files"]


def test_a_kill_leaves_the_old_version_or_the_new_one(earlier, tmp_path):
  """Each point killed in turn on the same change, the output put back to version 1 (a copy
  of it: the run links its kept shards from there) before each."""
  ds, out, v1, _ = earlier
  old = _files(out)
  mix(ds)
  new_dir = tmp_path / "expected"
  assert _convert(*_inputs(ds), "--output", str(new_dir), "--plan-from", str(v1)) == 0
  new = _files(new_dir)
  for i, point in enumerate(KILL_POINTS):
    if i:
      shutil.rmtree(out)
      shutil.copytree(v1, out)
      assert _files(out) == old
    proc = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "convert", *_inputs(ds),
                           "--output", str(out), "--incremental", "--overwrite", RUNNER],
                          env=subprocess_env(BEAM_TFRECORD_KILL_AT=point),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, (point, proc.stderr[-2000:])
    if point.startswith("swap-"):
      assert cli.main(["verify", "--repair", str(out)]) == 0, point
      assert _files(out) == new, point
    else:
      assert _files(out) == old and cli.main(["verify", str(out)]) == 0, point
    # the next run finishes the job, incrementally
    assert cli.main(["convert", *_inputs(ds), "--output", str(out), "--incremental",
                     "--overwrite", "--break-lock", RUNNER]) == 0, point
    assert _files(out) == new, point
    assert [n for n in os.listdir(out) if n.startswith(outputs.OWN_PREFIX)] == [], point


def test_on_cloud_storage(tmp_path, monkeypatch):
  """gs:// (the storage emulator): an incremental run in place equals a full run with
  --plan-from the first version (made before, while the first version is the output);
  unchanged shards are server-side copies of the earlier objects (FileSystems.copy: a
  rewrite, no download)."""
  pytest.importorskip("gcp_storage_emulator")
  import gcs_emulator
  from apache_beam.io.filesystems import FileSystems
  bucket = "tfr-incremental"
  with gcs_emulator.running(bucket):
    ds = make_dataset(tmp_path / "data", count=24, seed=9, extras=False)
    out, full = (f"gs://{bucket}/{name}" for name in ("out", "full"))

    def objects(prefix: str) -> Dict[str, bytes]:
      result = {}
      for meta in FileSystems.match([prefix + "/**"])[0].metadata_list:
        name = meta.path[len(prefix) + 1:]
        if name in RUN_FILES or name.startswith("."):
          continue
        with FileSystems.open(meta.path, compression_type="uncompressed") as f:
          data = f.read()
        result[name] = b"".join(sorted(data.splitlines(True))) if name.startswith(
            "errors-") else data
      return result

    assert _convert(*_inputs(ds), "--output", out, "--num-shards", "3", "--incremental") == 0
    mix(ds)
    # the full run --plan-from version 1 while it is still the output
    assert _convert(*_inputs(ds), "--output", full, "--plan-from", out) == 0
    copies = []
    real_copy = FileSystems.copy
    monkeypatch.setattr(FileSystems, "copy", staticmethod(
        lambda sources, destinations: copies.extend(zip(sources, destinations)) or
        real_copy(sources, destinations)))
    assert _convert(*_inputs(ds), "--output", out, "--incremental", "--overwrite") == 0
    monkeypatch.undo()
    assert objects(out) == objects(full)
    with FileSystems.open(out + "/manifest.json") as f:
      summary = json.loads(f.read())["incremental"]
    assert summary["mode"] == "incremental" and summary["images"]["added"] == 2
    kept = summary["shards"]["kept"]
    shard_copies = [(a, b) for a, b in copies if b.endswith(".tfrecord")]
    assert kept >= 1 and len(shard_copies) == kept
    assert all(a.startswith(out + "/") and "/.beam-tfrecord-run-" in b for a, b in shard_copies)
