"""plan/shard_plan.py and plan/runs.py: how many shards a split gets, the shard order (the hash
of the key), partitions and their sorted runs, the plan cut from the runs' counts
(--num-shards, --shard-size-mb, --records-per-shard), and --shard-size-mb in a conversion."""
from __future__ import annotations

import collections
import math
import string
import tempfile

import pytest
from conftest import check_all_images, check_manifest, record_counts, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.plan import runs, shard_plan
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import ImageAnnotation


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


def test_identity_hash_is_stable_and_uses_the_key_only():
  """The shard order must not depend on the machine, the process or where the dataset sits:
  pinned values (blake2b-64 of the UTF-8 key), computed once."""
  assert packed.identity_hash("img_0000.jpg") == 0x4e27778fb7bc8813
  assert packed.identity_hash("grå/ø.png") == 0xc759007e12971d72
  ann = ImageAnnotation(key="a/b.jpg", uri="/data/one/a/b.jpg", source="s", source_id="1",
                        split="train", size_bytes=5)
  moved = ann.replace(uri="/elsewhere/a/b.jpg")
  assert packed.pack(ann)[packed.HASH] == packed.pack(moved)[packed.HASH]


def _entry(key, uri=None, split="train", source="a.json", source_id="1", records=1, size=10):
  ann = ImageAnnotation(key=key, uri=uri or f"/r/{key}", source=source, source_id=source_id,
                        split=split, size_bytes=size)
  return packed.pack(ann, records)


def _write(images, num_shards=None, size_mb=None, per_shard=None, directory=None, span=1):
  """The pipeline's plan stage without Beam: partition, sort `span` partitions a run, write
  runs, plan from counts. Returns (plan, {split: [keys of each shard, as the writer selects
  them]})."""
  directory = directory or tempfile.mkdtemp()
  by_run = collections.defaultdict(list)
  for image in images:
    by_run[shard_plan.partition_of(image[packed.HASH]) // span].append(image)
  counts = {}
  for run, entries in by_run.items():
    by_split, _ = shard_plan.sort_partition(entries)
    for split, unique in by_split.items():
      runs.write_run(directory, split, run, unique)
      for e in unique:
        shard_plan.add_counts(counts, (split, shard_plan.partition_of(e[packed.HASH])),
                              (1, e[packed.RECORDS], e[packed.SIZE]))
  plan = shard_plan.make_plan(counts, num_shards, size_mb, per_shard, span)
  shards = {}
  for split, sp in plan.splits.items():
    shards[split] = []
    for shard in range(sp.num_shards):
      lo, hi = sp.shard_range(shard)
      blobs = runs.select(runs.shard_runs(directory, split, sp.runs_of(shard)), lo, hi,
                          sp.by_records)
      shards[split].append([packed.unpack(b).key for b in blobs])
  return plan, shards


@settings(max_examples=40, deadline=None)
@given(keys=st.sets(st.text(alphabet=string.ascii_letters + "/._-é", min_size=1, max_size=12),
                    min_size=1, max_size=300),
       num_shards=st.integers(min_value=1, max_value=40),
       span=st.sampled_from([1, shard_plan.LOCAL_RUN_SPAN, shard_plan.PARTITIONS]))
def test_shards_are_ranges_of_the_hash_order_balanced_within_one(keys, num_shards, span):
  plan, shards = _write([_entry(k) for k in keys], num_shards=num_shards, span=span)
  sp = plan.splits["train"]
  assert sp.num_shards == min(num_shards, len(keys)) == len(shards["train"])
  assert sp.count == len(keys) and sp.total_bytes == 10 * len(keys)
  lengths = [len(s) for s in shards["train"]]
  assert lengths == shard_plan.shard_lengths(len(keys), sp.num_shards)
  assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1
  # every image exactly once, in hash order within and across shards
  written = [k for s in shards["train"] for k in s]
  assert written == sorted(keys, key=lambda k: (packed.identity_hash(k), k))


def test_plan_size_does_not_depend_on_the_images():
  """O(splits x partitions): the plan of 100,000 images holds no key."""
  import pickle
  counts = shard_plan.counts_of((f"img_{i:07d}.jpg", 1000, 1) for i in range(100_000))
  plan = shard_plan.make_plan({("train", p): c for p, c in counts.items()}, 256, None)
  small = shard_plan.make_plan({("train", p): c for p, c in shard_plan.counts_of(
      (f"img_{i:07d}.jpg", 1000, 1) for i in range(1000)).items()}, 256, None)
  assert len(pickle.dumps(plan)) < 64 * 1024
  assert abs(len(pickle.dumps(plan)) - len(pickle.dumps(small))) < 8 * 1024
  sp = plan.splits["train"]
  lengths = [sp.starts[i + 1] - sp.starts[i] for i in range(sp.num_shards - 1)]
  assert sp.num_shards == 256 and sp.starts[0] == 0
  assert max(lengths) - min(lengths) <= 1  # within 1% of 390 images


def test_partitions_are_even():
  """1M keys in 1,024 partitions: the largest partition (what one worker sorts) stays near
  N / 1024."""
  counts = shard_plan.counts_of((f"img_{i:07d}.jpg", 0, 1) for i in range(200_000))
  sizes = [c[0] for c in counts.values()]
  assert len(sizes) == shard_plan.PARTITIONS
  assert max(sizes) < 1.25 * 200_000 / shard_plan.PARTITIONS


def test_by_size():
  images = [_entry(f"k{i:03d}", size=2**20) for i in range(30)]
  plan, shards = _write(images, size_mb=8.0)
  assert plan.splits["train"].num_shards == math.ceil(30 / 8)
  assert sorted(k for s in shards["train"] for k in s) == [f"k{i:03d}" for i in range(30)]


def test_same_name_under_two_roots_is_two_images_next_to_each_other():
  """Issue 8 item 5: a.jpg under two roots is two images; the uri breaks the tie."""
  images = [_entry(n, uri=f"{root}/{n}", source=f"{root}.json")
            for root in ("/two", "/one") for n in ("a.jpg", "b.jpg", "c.jpg")]
  by_split, errors = shard_plan.sort_partition(images)
  assert errors == []
  order = [(e[packed.KEY], e[packed.URI]) for e in by_split["train"]]
  assert order == sorted(order, key=lambda ku: (packed.identity_hash(ku[0]), ku))
  assert len(order) == 6


def test_a_file_annotated_twice_in_a_split_is_one_image_and_a_warning():
  images = [_entry("x.jpg", source="b.json", source_id="9", split="val"),
            _entry("x.jpg", source="a.json", source_id="7"),
            _entry("x.jpg", source="a.json", source_id="3"),
            _entry("y.jpg", source="b.json", source_id="8", split="val")]
  by_split, errors = shard_plan.sort_partition(images)
  assert [(e[packed.KEY], e[packed.SOURCE_ID]) for e in by_split["train"]] == [("x.jpg", "3")]
  assert sorted(e[packed.KEY] for e in by_split["val"]) == ["x.jpg", "y.jpg"]
  dup = [e for e in errors if e.reason == "duplicate_image"]
  assert [(e.level, e.key, e.source) for e in dup] == [("warning", "x.jpg", "a.json")]
  assert "source id '7'" in dup[0].message and "(source id '3') is used" in dup[0].message
  # also in val: written to both splits, one warning
  two = [e for e in errors if e.reason == "in_two_splits"]
  assert [(e.key, e.source) for e in two] == [("x.jpg", "a.json")]
  assert "/r/x.jpg is in splits train, val" in two[0].message


def test_records_per_shard_one_record_per_image_is_exact():
  plan, shards = _write([_entry(f"{i}") for i in range(939)], per_shard=100)
  assert [len(s) for s in shards["train"]] == [100] * 9 + [39]
  assert plan.splits["train"].records == tuple([100] * 9 + [39])
  _, one = _write([_entry(f"{i}") for i in range(939)], per_shard=4096)
  assert [len(s) for s in one["train"]] == [939]


@pytest.mark.parametrize("span", [1, shard_plan.LOCAL_RUN_SPAN])
def test_records_per_shard_keeps_images_whole(span):
  """Per-object schemas: an image goes with its first record; records never split."""
  weights = {f"k{i}": (i * 7) % 5 for i in range(200)}  # 0..4 records an image
  images = [_entry(k, records=w) for k, w in weights.items()]
  plan, shards = _write(images, per_shard=20, span=span)
  sp = plan.splits["train"]
  total = sum(weights.values())
  assert sp.num_shards == math.ceil(total / 20) and sp.records == ()
  order = sorted(weights, key=lambda k: (packed.identity_hash(k), k))
  assert [k for s in shards["train"] for k in s] == order
  start = 0
  for shard, keys in enumerate(shards["train"]):
    for k in keys:  # each image is in the shard of its first record
      if weights[k]:
        assert start // 20 == shard
      start += weights[k]
    assert sum(weights[k] for k in keys) <= 20 + 3  # at most one image's records over


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


def test_records_per_shard_with_images_of_no_record_still_writes_them():
  """A per-object schema whose images have no object: one shard holds them all (they are
  planned images, which must be written or rejected)."""
  images = [_entry(f"k{i}", records=0) for i in range(5)]
  plan, shards = _write(images, per_shard=4)
  assert plan.splits["train"].num_shards == 1
  assert sorted(shards["train"][0]) == sorted(f"k{i}" for i in range(5))
