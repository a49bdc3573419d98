"""The hash-ordered shard plan end to end (plan/transform.py): the same bytes whether the
partitions go through local spill files (local runners) or a shuffle (distributed runners),
in-process or with multi_processing; shards that mix their split; no scratch left behind."""
from __future__ import annotations

import collections
import functools
import glob
import os
import tempfile

import bad_data as bd
import layouts
import pytest

from beam_tfrecord import pipeline
from beam_tfrecord.records.packed import identity_hash

pytestmark = pytest.mark.e2e


def _shards(output: str):
  return {os.path.basename(p): open(p, "rb").read()
          for p in sorted(glob.glob(os.path.join(output, "*.tfrecord")))}


def _convert(dataset, output, *extra, spill=None, monkeypatch=None):
  if spill is not None:
    monkeypatch.setattr(pipeline, "build", functools.partial(_REAL_BUILD, local=spill))
  try:
    return bd.convert(["--format=coco", *dataset.inputs("coco"), "--output", str(output),
                       *extra])
  finally:
    if monkeypatch is not None:
      monkeypatch.undo()


_REAL_BUILD = pipeline.build


@pytest.mark.parametrize("extra", [["--num-shards=3"], ["--records-per-shard=5"],
                                   ["--schema=coco-objects", "--records-per-shard=4"]])
def test_spill_and_shuffle_and_multi_processing_write_the_same_bytes(dataset, tmp_path,
                                                                     monkeypatch, extra):
  spilled = _convert(dataset, tmp_path / "spill", *extra)
  shuffled = _convert(dataset, tmp_path / "shuffle", *extra, spill=False,
                      monkeypatch=monkeypatch)
  runs = [spilled, shuffled]
  if "--schema=coco-objects" in extra:  # multi_processing once, on the plan with most parts
    runs.append(_convert(dataset, tmp_path / "multi", *extra, "--runner=DirectRunner",
                         "--direct_running_mode=multi_processing", "--direct_num_workers=2"))
  assert [r.code for r in runs] == [0] * len(runs)
  a = _shards(spilled.output)
  assert len(a) >= 2
  assert all(_shards(r.output) == a for r in runs)
  assert all(r.manifest["totals"] == spilled.manifest["totals"] for r in runs)
  assert spilled.manifest["totals"]["images"] >= len(dataset.images) - 3  # a few bad ones
  if extra == ["--records-per-shard=5"]:  # the records are in hash order, the counts exact
    for split, entry in spilled.manifest["splits"].items():
      counts = [s["examples"] for s in entry["shards"]]
      assert counts[:-1] == [5] * (len(counts) - 1) and 1 <= counts[-1] <= 5
      names = [e["filename"] for e in spilled.examples if e["split"] == split]
      assert names == sorted(names, key=lambda n: (identity_hash(n), n))


def test_class_folder_shards_are_samples_of_the_split(dataset, tmp_path):
  """Key order put one class in each shard; hash order mixes them."""
  root = layouts.write_class_folders(dataset.images, dataset.image_dir, tmp_path / "f",
                                     with_splits=False)
  run = bd.convert(["--format=folders", f"--input={root}", "--output", str(tmp_path / "o"),
                    "--num-shards=3"])
  assert run.code == 0
  per_shard = collections.defaultdict(set)
  import tensorflow as tf
  for shard in run.manifest["splits"]["train"]["shards"]:
    for record in tf.data.TFRecordDataset(str(tmp_path / "o" / shard["path"])):
      example = tf.train.Example.FromString(record.numpy())
      per_shard[shard["path"]].add(
          example.features.feature["image/class/text"].bytes_list.value[0])
  classes = {layouts.image_class(im) for im in dataset.images}
  assert len(classes) >= 3 and len(per_shard) == 3
  assert all(len(found) >= 2 for found in per_shard.values()), per_shard


def test_no_scratch_is_left_behind(dataset, tmp_path):
  before = set(os.listdir(tempfile.gettempdir()))
  run = _convert(dataset, tmp_path / "o", "--num-shards=2")
  assert run.code == 0
  leftovers = [p for p in glob.glob(str(tmp_path / "o" / "**"), recursive=True)
               if ".work" in p or "/run-" in p]
  assert leftovers == []
  assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before
              if n.startswith("beam-tfrecord-work-")]
