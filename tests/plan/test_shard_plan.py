"""plan/shard_plan.py: how many shards a split gets and which keys each holds (--num-shards,
--shard-size-mb, --records-per-shard), the (key, uri) plan, and --shard-size-mb in a conversion."""
from __future__ import annotations

import collections
import math
import string

import pytest
from conftest import check_all_images, check_manifest, record_counts, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.plan import shard_plan


@pytest.mark.parametrize("count,total,num_shards,size_mb,expected", [
    (0, 0, None, None, 0),
    (0, 10**9, 4, None, 0),
    (10, 1000, 4, None, 4),
    (3, 1000, 8, None, 3),                           # never more shards than examples
    (10, 0, None, None, 1),                          # never fewer than one
    (100, 10 * 2**20, None, 1.0, 10),
    (100, 10 * 2**20 + 1, None, 1.0, 11),            # ceil
    (100, 10 * 2**20, None, 3.0, 4),
    (5, 10 * 2**20, None, 1.0, 5),
    (1000, 150 * 2**20, None, None, 1),              # default 150 MB
    (1000, 150 * 2**20 + 1, None, None, 2),
])
def test_num_shards_for(count, total, num_shards, size_mb, expected):
  assert shard_plan.num_shards_for(count, total, num_shards, size_mb) == expected


def test_num_shards_for_tiny_shard_size():
  assert shard_plan.num_shards_for(5, 1000, None, 1e-7) == 5


@settings(max_examples=60, deadline=None)
@given(keys=st.sets(st.text(alphabet=string.ascii_letters + "/._-é", min_size=1, max_size=12),
                    min_size=1, max_size=200),
       num_shards=st.integers(min_value=1, max_value=40))
def test_plan_split_balance_within_one(keys, num_shards):
  plan = shard_plan.plan_split("train", [(k, 10) for k in keys], num_shards, None)
  assert plan.num_shards == min(num_shards, len(keys))
  assert plan.count == len(keys) and plan.total_bytes == 10 * len(keys)
  shard_of = {k: plan.shard_of(k) for k in keys}
  counts = collections.Counter(shard_of.values())
  assert sorted(counts) == list(range(plan.num_shards)), "a shard is empty or out of range"
  assert max(counts.values()) - min(counts.values()) <= 1
  assert [counts[i] for i in range(plan.num_shards)] == \
      shard_plan.shard_lengths(len(keys), plan.num_shards)
  # shards are contiguous ranges of the sorted keys
  ordered = sorted(keys)
  assert [shard_of[k] for k in ordered] == sorted(shard_of[k] for k in ordered)


def test_plan_split_by_size_and_duplicates():
  items = [(f"k{i:03d}", 2**20) for i in range(30)] + [("k000", 2**20)]
  plan = shard_plan.plan_split("val", items, None, 8.0)
  assert plan.count == 30
  assert plan.total_bytes == 31 * 2**20
  assert plan.num_shards == math.ceil(31 / 8)
  assert plan.shard_of("k000") == 0 and plan.shard_of("k029") == plan.num_shards - 1
  assert plan.shard_of("a-key-before-all") == 0


def test_plan_over_key_and_uri_counts_same_names_under_two_roots():
  """Issue 8 item 5: a.jpg under two roots is two images; unique keys keep their ranks."""
  entries = {}
  for root in ("/one", "/two"):
    for name in ("a.jpg", "b.jpg", "c.jpg"):
      shard_plan.add_plan_entry(entries, f"{root}/{name}", (f"{root}.json", name, "train", name,
                                                          10, 1, 1))
  plan = shard_plan.make_plan(entries, 2, None)
  assert plan.splits["train"].count == 6 and plan.duplicates == {}
  shards = [plan.route("train", n, f"{r}/{n}")[1] for n in ("a.jpg", "b.jpg", "c.jpg")
            for r in ("/one", "/two")]
  assert shards == [0, 0, 0, 1, 1, 1]
  unique = shard_plan.plan_split("train", [(k, 1) for k in "abcdefg"], 3, None)
  paired = shard_plan.plan_split("train", [((k, "/r/" + k), 1) for k in "abcdefg"], 3, None)
  assert [unique.shard_of(k) for k in "abcdefg"] == [paired.shard_of((k, "/r/" + k))
                                                     for k in "abcdefg"]


def test_plan_routes_every_annotation_of_a_file_in_a_split_to_the_winner():
  entries = {}
  for source, split in (("b.json", "val"), ("a.json", "train"), ("a.json", "train")):
    shard_plan.add_plan_entry(entries, "/r/x.jpg", (source, "7", split, "x.jpg", 5, 1, 1))
  shard_plan.add_plan_entry(entries, "/r/y.jpg", ("b.json", "8", "val", "y.jpg", 5, 1, 1))
  plan = shard_plan.make_plan(entries, None, None)
  # twice in train: one image there; also in val: an image of val too (written to both)
  assert plan.duplicates == {("/r/x.jpg", "train"): ("train", "x.jpg")}
  assert plan.splits["train"].count == 1 and plan.splits["val"].count == 2
  assert plan.route("val", "x.jpg", "/r/x.jpg") == ("val", 0)
  assert plan.route("train", "x.jpg", "/r/x.jpg") == ("train", 0)
  assert plan.overlaps == {"/r/x.jpg": (("train", "a.json", "x.jpg"),
                                        ("val", "b.json", "x.jpg"))}


def test_a_file_in_two_splits_is_one_warning():
  """train = val (Ultralytics' coco128.yaml): each file in both, one warning per file."""
  entries = {}
  for split in ("val", "train"):
    for name in ("a.jpg", "b.jpg"):
      shard_plan.add_plan_entry(entries, f"/r/{name}", ("d.yaml", name, split, name, 5, 1, 1))
  plan = shard_plan.make_plan(entries, 1, None)
  assert plan.splits["train"].count == plan.splits["val"].count == 2
  assert plan.duplicates == {}
  warnings = shard_plan.overlap_warnings(plan)
  assert [(w.reason, w.level, w.key, w.source) for w in warnings] == [
      ("in_two_splits", "warning", "a.jpg", "d.yaml"), ("in_two_splits", "warning", "b.jpg",
                                                        "d.yaml")]
  assert "/r/a.jpg is in splits train, val" in warnings[0].message
  single = {}
  shard_plan.add_plan_entry(single, "/r/a.jpg", ("d.yaml", "a", "train", "a.jpg", 5, 1, 1))
  assert shard_plan.overlap_warnings(shard_plan.make_plan(single, 1, None)) == []


def test_records_per_shard_fills_in_key_order_and_keeps_images_whole():
  items = [("a", 1, 3), ("b", 1, 3), ("c", 1, 0), ("d", 1, 5), ("e", 1, 1), ("f", 1, 9),
           ("g", 1, 2)]
  plan = shard_plan.plan_split("train", items, None, None, 6)
  assert plan.boundaries == ("a", "d", "f", "g")
  assert plan.records == (6, 6, 9, 2)  # the 9-record image gets a shard of its own
  assert [plan.shard_of(k) for k, *_ in items] == [0, 0, 0, 1, 1, 2, 3]
  assert plan.num_shards == 4 and plan.count == 7
  # one record per image: 939 images in shards of 4096 -> one shard
  assert shard_plan.plan_split("train", [(f"{i}", 1) for i in range(939)], None, None,
                             4096).records == (939,)


def _shard_size_mb(ds) -> float:
  """A target size giving the train split ~3.5 shards (none of the ratios near an integer)."""
  totals = collections.Counter()
  for im in ds.images:
    totals[im.split] += (ds.image_dir / im.file_name).stat().st_size
  mb = totals["train"] / 3.5 / 2**20
  while any(abs(t / (mb * 2**20) - round(t / (mb * 2**20))) < 0.02 for t in totals.values()):
    mb *= 1.013
  return mb


@pytest.mark.e2e
def test_shard_size_mb(shared, dataset):
  mb = _shard_size_mb(dataset)
  out = shared.output("shard_size", lambda o: run_cli(
      "convert", "--format=csv", *dataset.inputs("csv"), f"--output={o}",
      f"--shard-size-mb={mb!r}", "--runner=FnApiRunner"))
  check_all_images(out, dataset, "csv", dataset.sorted_name_ids())
  check_manifest(out, dataset, "csv", dataset.sorted_name_ids())
  for split in dataset.splits:
    images = [im for im in dataset.images if im.split == split]
    total = sum((dataset.image_dir / im.file_name).stat().st_size for im in images)
    expected = min(len(images), max(1, math.ceil(total / (mb * 2**20))))
    assert len(out.shard_files[split]) == expected, split
    counts = record_counts(out, split)
    assert max(counts) - min(counts) <= 1, counts
  assert len(out.shard_files["train"]) == 4
