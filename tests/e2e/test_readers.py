"""Issue 41: readers beyond tf.data, with the consumers' own code. One COCO dataset converted
four ways (TFRecord with --index-files and ArrayRecord, flat and --layout tfds), then read by
TFDS's `as_data_source`, Grain's ArrayRecordDataSource, array_record's own reader, the
`tfrecord` package (its sharded, shuffled path, in two worker processes) and NVIDIA DALI's
TFRecord reader on the CPU, each compared record by record with the TFRecord output read by
TensorFlow; `verify` on damaged files."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from bad_data import convert

import tensorflow as tf  # noqa: E402

pytestmark = pytest.mark.e2e


def _shards(out: Path) -> List[Path]:
  manifest = json.loads((out / "manifest.json").read_text())
  return [out / s["path"] for split in sorted(manifest["splits"])
          for s in manifest["splits"][split]["shards"]]


def _tf_records(out: Path) -> List[bytes]:
  """Every record of a TFRecord output, in split and shard order, read by TensorFlow."""
  return [r.numpy() for r in tf.data.TFRecordDataset([str(p) for p in _shards(out)])]


@pytest.fixture(scope="module")
def outputs(dataset, tmp_path_factory) -> Dict[str, Path]:
  """The dataset (27 images, train and val) converted four ways, 2 shards a split."""
  root = tmp_path_factory.mktemp("readers")
  runs = {"tfrecord": ["--index-files"], "array_record": ["--file-format", "array_record"],
          "tfds_tfrecord": ["--layout", "tfds", "--dataset-name", "shapes"],
          "tfds_array_record": ["--layout", "tfds", "--dataset-name", "shapes",
                                "--file-format", "array_record"]}
  out = {}
  for name, extra in runs.items():
    run = convert(["--format=coco", *dataset.inputs("coco"), "--output", str(root / name),
                   "--num-shards", "2", *extra])
    assert run.code == 0, run
    out[name] = root / name / "shapes" / "1.0.0" if name.startswith("tfds") else root / name
  return out


def test_array_record_output_holds_the_tfrecord_outputs_records(outputs):
  """Grain's ArrayRecordDataSource and array_record's reader: the same serialized records,
  in the same order, as TensorFlow reads from the TFRecord output; names as TFDS's."""
  grain = pytest.importorskip("grain.python")
  from array_record.python import array_record_module
  expected = _tf_records(outputs["tfrecord"])
  files = _shards(outputs["array_record"])
  assert [p.name for p in files] == [p.name.replace(".tfrecord", ".array_record")
                                     for p in _shards(outputs["tfrecord"])]
  source = grain.ArrayRecordDataSource([str(p) for p in files])
  assert len(source) == len(expected) == 27
  assert [source[i] for i in range(len(source))] == expected
  own = []
  for path in files:
    reader = array_record_module.ArrayRecordReader(str(path))
    assert set(reader.writer_options_string().split(",")) >= {"group_size:1", "uncompressed"}
    own += reader.read_all()
    reader.close()
  assert own == expected
  # a random-access loader: Grain's own sampler and DataLoader, shuffled, one epoch
  loader = grain.DataLoader(data_source=source, sampler=grain.IndexSampler(
      len(source), grain.NoSharding(), shuffle=True, num_epochs=1, seed=3),
      worker_count=0)
  assert sorted(loader) == sorted(expected)


def test_tfds_as_data_source_equals_the_tfrecord_dataset(outputs):
  """A --layout tfds ArrayRecord output opened with tfds.builder_from_directory(...)
  .as_data_source: the right length and features, and every example's boxes, classes and
  image equal the TFRecord output's as TFDS reads it."""
  tfds = pytest.importorskip("tensorflow_datasets")
  directory = outputs["tfds_array_record"]
  info = json.loads((directory / "dataset_info.json").read_text())
  assert info["fileFormat"] == "array_record"
  assert sorted(p.name for p in directory.glob("shapes-train.array_record-*")) == [
      "shapes-train.array_record-00000-of-00002", "shapes-train.array_record-00001-of-00002"]
  builder = tfds.builder_from_directory(str(directory))
  reference = tfds.builder_from_directory(str(outputs["tfds_tfrecord"]))
  raw = {"image": tfds.decode.SkipDecoding()}  # the image bytes as stored, not decoded
  for split in ("train", "val"):
    source = builder.as_data_source(split)
    stored = builder.as_data_source(split, decoders=raw)
    expected = list(tfds.as_numpy(reference.as_dataset(split=split, shuffle_files=False,
                                                       decoders=raw)))
    assert len(source) == len(expected) == builder.info.splits[split].num_examples > 0
    for i in reversed(range(len(source))):  # random access, any order
      got, want = source[i], expected[i]
      assert got["image/filename"] == want["image/filename"]
      assert stored[i]["image"] == want["image"] and want["image"][:2] in (b"\xff\xd8",
                                                                         b"\x89P")
      # decoded by TFDS's numpy path (PIL/OpenCV): gray made 3 channels, an RGBA PNG stays 4
      assert got["image"].shape[:2] == tuple(tf.io.decode_image(want["image"]).shape[:2])
      # an image without objects: TFDS's numpy decoding gives [] for (0, 4)
      assert np.array_equal(np.asarray(got["objects"]["bbox"], np.float32).reshape(-1, 4),
                            want["objects"]["bbox"])
      assert np.array_equal(got["objects"]["label"], want["objects"]["label"])
      assert np.array_equal(got["objects"]["is_crowd"], want["objects"]["is_crowd"])


_TFRECORD_WORKERS = r"""
import json, multiprocessing, sys
from tfrecord.reader import tfrecord_loader
from tfrecord.iterator_utils import shuffle_iterator

def worker(w, n, shards, q):
    # what tfrecord.torch.dataset.TFRecordDataset does in a DataLoader worker: this worker's
    # part of each shard through its index (shard=(worker id, workers)), buffer-shuffled
    def records():
        for path in shards:
            yield from tfrecord_loader(path, path + ".idx", {"image/encoded": "byte",
                                       "image/filename": "byte",
                                       "image/object/class/label": "int",
                                       "image/object/bbox/xmin": "float"}, shard=(w, n))
    out = []
    for r in shuffle_iterator(records(), 8):
        out.append([bytes(r["image/filename"]).decode(), bytes(r["image/encoded"]).hex(),
                    [int(v) for v in r["image/object/class/label"]],
                    [float(v) for v in r["image/object/bbox/xmin"]]])
    q.put((w, out))

if __name__ == "__main__":
    shards = json.loads(sys.argv[1])
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=worker, args=(w, 2, shards, q)) for w in range(2)]
    for p in procs: p.start()
    found = dict(q.get(timeout=300) for _ in procs)
    for p in procs: p.join()
    print(json.dumps(found))
"""


def _by_name(records: List[bytes]) -> Dict[str, tuple]:
  out = {}
  for raw in records:
    f = tf.train.Example.FromString(raw).features.feature
    name = f["image/filename"].bytes_list.value[0].decode()
    out[name] = (f["image/encoded"].bytes_list.value[0],
                 list(f["image/object/class/label"].int64_list.value),
                 list(f["image/object/bbox/xmin"].float_list.value))
  return out


def test_tfrecord_package_reads_the_index_files_across_two_workers(outputs, tmp_path):
  """The `tfrecord` package's loader (in processes of its own: its protos clash with
  TensorFlow's in one process) splits every shard between 2 workers by our index files and
  shuffles: every record is seen exactly once, equal to TensorFlow's reading."""
  if importlib.util.find_spec("tfrecord") is None:  # not imported here: its protos clash
    pytest.skip("the tfrecord package is not installed (pip install -e '.[dev]')")
  script = tmp_path / "workers.py"
  script.write_text(_TFRECORD_WORKERS)
  shards = [str(p) for p in _shards(outputs["tfrecord"])]
  done = subprocess.run([sys.executable, str(script), json.dumps(shards)],
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr
  found = json.loads(done.stdout)
  assert set(found) == {"0", "1"} and all(found.values())  # both workers read a part
  seen = [r[0] for part in found.values() for r in part]
  expected = _by_name(_tf_records(outputs["tfrecord"]))
  assert sorted(seen) == sorted(expected)  # exactly once
  for name, image, labels, xmin in (r for part in found.values() for r in part):
    want = expected[name]
    assert bytes.fromhex(image) == want[0] and labels == want[1]
    assert np.allclose(xmin, want[2])


def test_dali_reads_the_index_files_on_the_cpu(outputs):
  """NVIDIA DALI's fn.readers.tfrecord, CPU only (device_id=None), with our index files: two
  shards of the reader, shuffled, read every record once with its bytes and values."""
  pytest.importorskip("nvidia.dali")
  from nvidia.dali import fn, pipeline_def
  import nvidia.dali.tfrecord as tfrec
  paths = [str(p) for p in _shards(outputs["tfrecord"])]
  batch, shards = 4, 2

  @pipeline_def(batch_size=batch, num_threads=1, device_id=None)
  def pipe(shard_id):
    f = fn.readers.tfrecord(
        path=paths, index_path=[p + ".idx" for p in paths], name="Reader",
        features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                  "image/filename": tfrec.FixedLenFeature((), tfrec.string, ""),
                  "image/object/class/label": tfrec.VarLenFeature(tfrec.int64, -1),
                  "image/object/bbox/xmin": tfrec.VarLenFeature(tfrec.float32, 0.0)},
        shard_id=shard_id, num_shards=shards, random_shuffle=True, seed=7,
        stick_to_shard=True, pad_last_batch=True)
    return (f["image/filename"], f["image/encoded"], f["image/object/class/label"],
            f["image/object/bbox/xmin"])

  expected = _by_name(_tf_records(outputs["tfrecord"]))
  seen = []
  for shard_id in range(shards):
    p = pipe(shard_id=shard_id)
    p.build()
    total = p.reader_meta("Reader")["epoch_size"]  # the whole dataset: this shard's part
    left = total * (shard_id + 1) // shards - total * shard_id // shards
    while left > 0:
      names, images, labels, xmins = p.run()
      for i in range(min(batch, left)):  # past `left`: padding
        name = np.array(names[i]).tobytes().decode()
        want = expected[name]
        assert np.array(images[i]).tobytes() == want[0]
        assert np.array(labels[i]).tolist() == want[1]
        assert np.allclose(np.array(xmins[i]), want[2])
        seen.append(name)
      left -= batch
  assert sorted(seen) == sorted(expected)


def test_verify_fails_on_a_truncated_array_record_and_a_wrong_index(outputs, tmp_path, capsys):
  from beam_tfrecord.readback import verify
  for name in ("tfrecord", "array_record"):
    assert verify.run(str(outputs[name])) == 0
  capsys.readouterr()
  damaged = tmp_path / "array_record"
  shutil.copytree(outputs["array_record"], damaged)
  shard = _shards(damaged)[1]
  os.chmod(shard, 0o644)
  shard.write_bytes(shard.read_bytes()[:-3000])
  assert verify.run(str(damaged)) == 1
  out = capsys.readouterr().out
  assert f"{shard.name}: corrupt after record 0 (not a whole ArrayRecord file" in out, out
  assert "FAILED" in out
  for case, (edit, line) in enumerate((
      (lambda lines: lines[:-1], "lines for"),                              # a line missing
                     (lambda lines: [lines[0]] + [f"{int(lines[1].split()[0]) + 1} "
                                                  f"{lines[1].split()[1]}"] + lines[2:],
                      "line 2;"))):                                          # an offset moved
    wrong = tmp_path / f"tfrecord-{case}"
    shutil.copytree(outputs["tfrecord"], wrong)
    index = Path(str(_shards(wrong)[0]) + ".idx")
    os.chmod(index, 0o644)
    index.write_text("".join(f"{x}\n" for x in edit(index.read_text().splitlines())))
    assert verify.run(str(wrong)) == 1
    out = capsys.readouterr().out
    assert f"{index.name}: does not match its shard" in out and line in out, out
  # an index deleted: named as missing
  gone = tmp_path / "tfrecord-gone"
  shutil.copytree(outputs["tfrecord"], gone)
  Path(str(_shards(gone)[1]) + ".idx").unlink()
  assert verify.run(str(gone)) == 1
  assert "the index file of" in capsys.readouterr().out


def test_the_readback_commands_read_array_record(outputs, tmp_path):
  """reader.load (tf.data), show and inspect read an ArrayRecord output as its TFRecord twin."""
  from beam_tfrecord import reader
  from beam_tfrecord.readback import stats
  from beam_tfrecord.readback.views import read_manifest
  for split in ("train", "val"):
    a = [{k: np.asarray(v).tolist() for k, v in r.items()}
         for r in reader.load(str(outputs["array_record"]), split)]
    b = [{k: np.asarray(v).tolist() for k, v in r.items()}
         for r in reader.load(str(outputs["tfrecord"]), split)]
    assert a == b and len(a) > 0
  image = reader.show(str(outputs["array_record"]), split="val", n=4, seed=1)
  assert image.size[0] > 0
  got = stats.frames(str(outputs["array_record"]), read_manifest(str(outputs["array_record"])))
  want = stats.frames(str(outputs["tfrecord"]), read_manifest(str(outputs["tfrecord"])))
  assert got[0].equals(want[0]) and got[1].equals(want[1])


def test_the_card_says_how_to_read_each_format(outputs):
  card = (outputs["array_record"] / "README.md").read_text()
  assert "ArrayRecordDataSource" in card and "TFRecordDataset" not in card
  assert "ArrayRecord files of `tf.train.Example`, converted" in card
  card = (outputs["tfrecord"] / "README.md").read_text()
  assert "TFRecordDataset" in card and ".idx" in card
  assert "TFRecord files of `tf.train.Example` (each with an index file), converted" in card
  # the card's snippet for ArrayRecord runs as written and counts every record
  snippet = card_snippet(outputs["array_record"] / "README.md")
  done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                        timeout=300, cwd=str(outputs["array_record"]))
  assert done.returncode == 0, done.stderr
  assert "14 examples" in done.stdout, done.stdout


def card_snippet(path: Path) -> str:
  text = path.read_text()
  start = text.index("```python\n") + len("```python\n")
  return textwrap.dedent(text[start:text.index("```", start)])


def test_gcs_array_record_and_index_files(tmp_path, capsys):
  """gs:// (storage emulator): ArrayRecord shards written locally and copied through Beam's
  FileSystems, index files beside TFRecord shards; `verify` reads both from gs://, and the
  records equal a local run's."""
  pytest.importorskip("gcp_storage_emulator")
  import gcs_emulator
  from apache_beam.io.filesystems import FileSystems

  from beam_tfrecord import cli, sample
  from beam_tfrecord.readback import verify
  from beam_tfrecord.storage import record_files
  bucket = "tfr-readers"
  local = tmp_path / "data"
  sample.make_dataset(str(local), count=6)
  inputs = ["--format", "csv", "--input", f"train={local}/train_labels.csv",
            "--input", f"val={local}/val_labels.csv", "--images", f"{local}/images"]
  assert cli.main(["convert", *inputs, "--output", str(tmp_path / "here"),
                   "--file-format", "array_record"]) == 0
  with gcs_emulator.running(bucket):
    for name, extra in (("ar", ["--file-format", "array_record"]), ("idx", ["--index-files"])):
      out = f"gs://{bucket}/{name}"
      assert cli.main(["convert", *inputs, "--output", out, *extra,
                       "--runner=FnApiRunner"]) == 0, capsys.readouterr().err
      capsys.readouterr()
    # verify reads gs:// ArrayRecords itself (TensorFlow's own gs:// client does not reach
    # the emulator: the TFRecord output's indexes are checked as verify checks them)
    assert verify.run(f"gs://{bucket}/ar") == 0, capsys.readouterr().out
    manifest = json.loads(FileSystems.open(f"gs://{bucket}/ar/manifest.json").read())
    remote = [r for split in sorted(manifest["splits"])
              for s in manifest["splits"][split]["shards"]
              for r in record_files.read_records(f"gs://{bucket}/ar/{s['path']}",
                                                 record_files.ARRAY_RECORD)]
    idx = [m.path for m in FileSystems.match([f"gs://{bucket}/idx/*.idx"])[0].metadata_list]
    assert len(idx) == 2
    for index in idx:
      assert record_files.check_index(index[:-len(".idx")], index) is None
  assert remote == [r for p in _shards(tmp_path / "here")
                    for r in record_files.read_records(str(p), record_files.ARRAY_RECORD)]


def test_the_summary_names_the_record_files(outputs):
  from beam_tfrecord.finalize import output
  from beam_tfrecord.readback.views import read_manifest
  lines = {name: output.summary(read_manifest(str(outputs[name])), "OUT")
           for name in ("tfrecord", "array_record", "tfds_tfrecord")}
  assert "shards 4 (index files)," in lines["tfrecord"]
  assert "shards 4 (array_record)," in lines["array_record"]
  assert "shards 4, clipped" in lines["tfds_tfrecord"]
