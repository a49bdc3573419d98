"""finalize/manifest.py: what a finished run's manifest says."""
from __future__ import annotations


def test_lost_records_compares_plan_with_written_and_rejected():
  from beam_tfrecord.finalize.manifest import lost_records as _lost_records
  from beam_tfrecord.plan.shard_plan import plan_split
  plans = {"train": plan_split("train", [(f"k{i}", 1) for i in range(5)], 2, None),
           "val": plan_split("val", [("v", 1)], 1, None)}
  stats = [{"split": "train", "examples": 2, "rejected": 1}, {"split": "train", "examples": 2,
                                                              "rejected": 0},
           {"split": "val", "examples": 1, "rejected": 0}]
  assert _lost_records(plans, stats) == ""
  stats[0]["examples"] = 1  # the runner dropped one record of train
  assert _lost_records(plans, stats) == "split train: 5 planned, 4 written or rejected"
  assert "split val" in _lost_records(plans, stats[:2])
