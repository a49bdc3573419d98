"""Read an output directory back as a parsed tf.data.Dataset, feature spec from the manifest.

Every entry point takes an ordinary output, a version directory (DEST/versions/<V>) or a
versioned output's DEST: DEST/LATEST is read once, at entry, and every file (manifest.json,
shards) comes from the one version it named, so a run publishing a new version meanwhile
cannot mix two versions in one read. A damaged LATEST raises versions.DamagedVersions.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Union

from beam_tfrecord.readback import views
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.storage import paths, record_files, versions


def feature_description(manifest: Union[Manifest, Mapping]) -> Dict:
  """The `features` of manifest.json as tf.io feature specs (fixed -> FixedLen, var -> VarLen)."""
  import tensorflow as tf
  result = {}
  for key, spec in Manifest.of(manifest).features.items():
    dtype = {"string": tf.string, "int64": tf.int64, "float32": tf.float32}[spec["dtype"]]
    result[key] = (tf.io.FixedLenFeature([], dtype) if spec["kind"] == "fixed"
                   else tf.io.VarLenFeature(dtype))
  return result


def shard_files(output: str, split: str, manifest: Optional[Manifest] = None):
  """The shard paths of a split, in order. With `manifest` given, `output` should be the
  directory it was read from (a version directory rather than DEST: LATEST may have moved)."""
  output = versions.resolve(output)
  return _shard_files(output, split, manifest or views.read_manifest(output))


def _shard_files(directory: str, split: str, manifest: Manifest):
  return [paths.join(directory, s.path) for s in manifest.splits[split].shards]


def load(output: str, split: str = "train", dense: bool = True):
  """tf.data.Dataset of dicts {feature key: tensor} for one split, in shard order (TFRecord
  or ArrayRecord shards).

  Per-object features are VarLen (SparseTensor); with dense=True they are turned into dense
  1-D tensors, so `example['image/object/bbox/xmin']` is a plain vector.
  """
  import tensorflow as tf
  directory = versions.resolve(output)  # once: manifest and shards from the same version
  manifest = views.read_manifest(directory)
  if split not in manifest.splits:
    raise KeyError(f"split {split!r} not in {output}; it has {sorted(manifest.splits)}")
  spec = feature_description(manifest)

  def parse(record):
    parsed = tf.io.parse_single_example(record, spec)
    if dense:
      parsed = {k: tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v
                for k, v in parsed.items()}
    return parsed

  files = _shard_files(directory, split, manifest)
  if record_files.file_format_of(manifest) == record_files.ARRAY_RECORD:  # read in order, as tf.data does
    records = tf.data.Dataset.from_generator(
        lambda: (r for f in files for r in record_files.read_records(f, record_files.ARRAY_RECORD)),
        output_signature=tf.TensorSpec((), tf.string))
  else:
    records = tf.data.TFRecordDataset(files)
  return records.map(parse)


def show(output: str, split: Optional[str] = None, n: int = 16, seed: int = 0):
  """A PIL image of n examples of one split drawn from the records (boxes with class names,
  masks, classification captions); it displays inline in a notebook. See show.py (which
  resolves a versioned output's LATEST once, as load does)."""
  from beam_tfrecord.readback import show as shows
  return shows.show(output, split=split, n=n, seed=seed)
