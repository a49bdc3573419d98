"""Versioned outputs for the tests of `convert --append`: COCO datasets of real JPEGs, the CLI
run in this process (no interpreter or Beam start-up) or as a subprocess, and outputs read
back with TensorFlow."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

from beam_tfrecord.storage import versions


def dataset(root: Path, names, colour=0):
  (root / "imgs").mkdir(parents=True, exist_ok=True)
  images, anns = [], []
  for i, name in enumerate(names):
    path = root / "imgs" / name
    if not path.exists():
      Image.new("RGB", (40 + i % 7, 30), ((i * 37 + colour) % 255, 90, 20)).save(path)
    images.append({"id": i + 1, "file_name": name, "width": 40 + i % 7, "height": 30})
    anns.append({"id": i + 1, "image_id": i + 1, "category_id": 1 + i % 2,
                 "bbox": [1, 2, 10 + i % 5, 12], "area": 120.0, "iscrowd": 0})
  (root / "ann.json").write_text(json.dumps(
      {"images": images, "annotations": anns,
       "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]}))


def in_process(argv):
  import contextlib
  import io
  import types
  from beam_tfrecord import cli
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      code = cli.main(list(argv))
    except SystemExit as e:
      code = e.code
  return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def run(root: Path, output: str, *extra, env=None, check=True, subprocess_only=False):
  cmd = [sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
         "--input", f"train={root / 'ann.json'}", "--images", str(root / "imgs"),
         "--output", output, "--num-shards", "4", *extra]
  if env is None and not subprocess_only:  # in this process: no interpreter and Beam start-up
    done = in_process(cmd[3:])
  else:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
  if check:
    assert done.returncode == 0, done.stdout + done.stderr
  return done


def records(directory: str):
  """{image/filename: serialized record} of an output, read with TensorFlow."""
  import tensorflow as tf
  manifest = json.loads(Path(directory, "manifest.json").read_text())
  array = manifest["config"].get("file_format") == "array_record"
  out = {}
  for split in manifest["splits"].values():
    for shard in split["shards"]:
      path = os.path.join(directory, shard["path"])
      if array:  # read with the array_record package's own reader
        from array_record.python import array_record_module
        reader = array_record_module.ArrayRecordReader(path)
        found = reader.read_all()
        reader.close()
      else:
        found = [raw.numpy() for raw in tf.data.TFRecordDataset(path)]
      for raw in found:
        example = tf.train.Example.FromString(raw)
        name = example.features.feature["image/filename"].bytes_list.value[0].decode()
        assert name not in out, f"{name} written twice"
        out[name] = raw
  return out


def latest(dest: Path) -> str:
  return versions.resolve(str(dest))


def full(root: Path, tmp: Path) -> dict:
  out = tmp / f"full-{len(list(tmp.glob('full-*')))}"
  run(root, str(out))
  return records(str(out))


def append_after_damage(tmp: Path, count: int, damage):
  """A versioned output in tmp/"dest" of `count` images (tmp/"src"), damage(its version's
  directory) done to it, then an --append with one image more. Returns (that run, the new
  version's directory), checked to be version 2 and to hold a full run's records."""
  src, dest = tmp / "src", tmp / "dest"
  names = [f"{i:03d}.jpg" for i in range(count)]
  dataset(src, names)
  run(src, str(dest), "--append")
  damage(Path(latest(dest)))
  dataset(src, names + ["more.jpg"])
  done = run(src, str(dest), "--append")
  new = latest(dest)
  assert new.endswith("00000002"), done.stdout + done.stderr
  assert records(new) == full(src, tmp)
  return done, new


def edit_catalog(path: Path, edit, schema=None, record: bool = False) -> None:
  """Rewrite a catalog partition (a Parquet file of a version): edit(columns) changes its
  columns (a dict of lists) in place; `schema` writes them with other column types. With
  `record`, the version's manifest is made to list the new file's digest and rows too, as a
  forger who knows the format would."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  from beam_tfrecord.storage import catalog
  columns = pq.read_table(path).to_pydict()
  edit(columns)
  os.chmod(path, 0o644)
  pq.write_table(pa.Table.from_pydict(columns, schema=schema or catalog.SCHEMA), path)
  if record:
    manifest_path = path.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["shard_plan"].values():
      for k, name in enumerate(entry.get("indexes") or ()):
        if name == path.name:
          entry["index_digests"][k] = catalog.file_digest(path.read_bytes())
          entry["index_rows"][k] = len(columns["key"])
    os.chmod(manifest_path, 0o644)
    manifest_path.write_text(json.dumps(manifest))
