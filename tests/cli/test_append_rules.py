"""cli/append.py's pure rules: when an append becomes a full version, and what it says."""
from __future__ import annotations

import types

from beam_tfrecord.cli import append
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import named_few
from beam_tfrecord.finalize import publish


def _manifest(planned, stats):
  """A run's manifest as oversized_delta reads it: its shard_plan and its append summary."""
  return types.SimpleNamespace(
      shard_plan={split: {"planned": sizes} for split, sizes in planned.items()},
      incremental=publish.append_summary({"previous": None}, stats))


def _delta(split, images, new=True):
  return {"split": split, "shard": 0, "images": images, "rejected": 0, "new": new}


def test_a_delta_shard_is_weighed_against_its_own_split():
  """A 20-image train delta is fine for train's 100-image shards, however small val's are."""
  planned = {"train": [100, 100, 100], "val": [5, 5]}
  assert append.oversized_delta(_manifest(planned, [_delta("train", 20), _delta("val", 3)])) \
      == ""
  assert append.oversized_delta(_manifest(planned, [_delta("train", 20), _delta("val", 11)])) \
      == "a new delta shard of split 'val' would hold 11 images, planned for 5"
  # an earlier delta kept as it is was weighed when it was written
  kept = dict(_delta("train", 900), kept_from="earlier.tfrecord")
  assert append.oversized_delta(_manifest(planned, [kept])) == ""


def test_sizing_changes_name_each_option_with_both_values():
  config = ConvertConfig(format="coco", inputs=["a.json"], output="o", shard_size_mb=0.02)
  before = {"num_shards": None, "shard_size_mb": 0.05, "records_per_shard": None}
  assert append.sizing_changes(config, before) == "--shard-size-mb 0.05 -> 0.02"
  assert append.sizing_changes(config, dict(before, shard_size_mb=0.02)) == ""


def test_named_few():
  assert named_few(["a", "b"], 5) == "a, b"
  assert named_few([f"f{i}" for i in range(7)], 5) == "f0, f1, f2, f3, f4 and 2 more"
