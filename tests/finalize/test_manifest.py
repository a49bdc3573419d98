"""finalize/manifest.py: what a finished run's manifest says."""
from __future__ import annotations


def test_lost_records_compares_plan_with_written_and_rejected():
  from beam_tfrecord.finalize.manifest import lost_records as _lost_records
  from beam_tfrecord.plan.shard_plan import plan_split
  from beam_tfrecord.plan.shard_plan import counts_of
  plans = {"train": plan_split("train", counts_of((f"k{i}", 1, 1) for i in range(5)), 2, None),
           "val": plan_split("val", counts_of([("v", 1, 1)]), 1, None)}
  stats = [{"split": "train", "examples": 2, "rejected": 1}, {"split": "train", "examples": 2,
                                                              "rejected": 0},
           {"split": "val", "examples": 1, "rejected": 0}]
  assert _lost_records(plans, stats) == ""
  stats[0]["examples"] = 1  # the runner dropped one record of train
  assert _lost_records(plans, stats) == "split train: 5 planned, 4 written or rejected"
  assert "split val" in _lost_records(plans, stats[:2])


def test_empty_splits_are_the_declared_ones_without_an_example():
  from beam_tfrecord.finalize.manifest import empty_splits
  from beam_tfrecord.records.manifest import SplitInfo
  splits = {"train": SplitInfo(examples=4), "val": SplitInfo(examples=0)}
  assert empty_splits(["val", "train", "test"], splits) == ["test", "val"]
  assert empty_splits([], splits) == []  # nothing declared (one unnamed input): no check


def test_outcome_of_a_declared_split_left_empty_names_it_and_the_main_reasons():
  """Issue 'Trust, second round' item 8: a split that lost every image is not a success."""
  from beam_tfrecord.finalize.manifest import OUTCOMES, outcome_of
  totals = {"examples": 3, "images": 3, "objects": 3}
  levels = {"image": 3, "warning": 1}
  reasons = {"missing_image": 3, "in_two_splits": 1, "unknown_format": 1, "x": 1}
  outcome, status = outcome_of(totals, levels, 0.5, None, "", ["val"], reasons)
  assert OUTCOMES[outcome] == 4
  assert status.startswith("failed: split 'val' declared by the input ended with no example")
  assert "main reasons: missing_image 3, in_two_splits 1, unknown_format 1;" in status
  _, status = outcome_of(totals, levels, 0.5, None, "", ["test", "val"], reasons)
  assert "splits 'test', 'val' declared" in status
  # a run that lost records says so first; one with no example at all is still 'empty'
  assert outcome_of(totals, levels, 0.5, None, "split val: 3 planned", ["val"])[0] == \
      "lost_records"
  assert outcome_of({**totals, "examples": 0}, levels, 1.0, None, "", ["val"])[1].startswith(
      "failed: nothing was written")
  assert outcome_of(totals, levels, 0.5, None, "", [], reasons) == ("ok", "ok")


def test_outcome_of_every_object_rejected_is_empty():
  """A label map that matches no class: images written, not one box (was exit 0)."""
  from beam_tfrecord.finalize.manifest import OUTCOMES, outcome_of
  totals = {"examples": 200, "images": 200, "objects": 0}
  outcome, status = outcome_of(totals, {"object": 450}, 2.25, None, "", [],
                               {"unknown_class": 450})
  assert (OUTCOMES[outcome], outcome) == (4, "empty")
  assert "every object was rejected (450 objects" in status
  assert "main reasons: unknown_class 450" in status
  # background images only, nothing rejected: fine; some objects kept: fine (error rate rules)
  assert outcome_of(totals, {}, 0.0, None, "")[0] == "ok"
  assert outcome_of({**totals, "objects": 1}, {"object": 450}, 2.25, None, "")[0] == "ok"
