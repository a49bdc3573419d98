"""An append's plan maths (plan/shard_plan.py bounds, plan/previous.py) and the catalog
(storage/catalog.py), without Beam: an image's shard is where its identity falls between
the earlier bounds, whatever was added or removed; a plan made from its own bounds is the plan."""
from __future__ import annotations

import dataclasses
import bisect
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.errors import UsageError
from beam_tfrecord.plan import previous
from beam_tfrecord.plan.shard_plan import (PreviousSplit, bound_of, counts_below_bounds,
                                           make_plan, partition_of, sizes_of, sort_partition)
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.storage import catalog, record_files
from beam_tfrecord.records.tfrecord import framing, framings


def _entry(name: str, split: str = "train", records: int = 1) -> packed.Packed:
  ann = ImageAnnotation(key=name, uri=f"/r/{name}", source_id=name, source="a.csv",
                        split=split, size_bytes=10)
  return packed.pack(ann, records)


def _plan_of(names, bounds=None, num_shards=None, by_records=False):
  entries = [_entry(n, records=1 + (len(n) % 3) if by_records else 1) for n in names]
  by_partition = {}
  for e in entries:
    by_partition.setdefault(partition_of(e[packed.HASH]), []).append(e)
  acc = {}
  for p, part in by_partition.items():
    unique = sort_partition(part)[0].get("train", [])
    for e in unique:
      key = ("train", partition_of(e[packed.HASH]))
      acc[key] = [a + b for a, b in zip(acc.get(key, [0, 0, 0]), (1, e[packed.RECORDS], 10))]
    if bounds:
      for key, c in counts_below_bounds("train", unique, bounds).items():
        acc[key] = [a + b for a, b in zip(acc.get(key, [0, 0, 0]), c)]
  prev = {"train": PreviousSplit(tuple(bounds), (len(names),) * (len(bounds) + 1))} \
      if bounds is not None else None
  plan = make_plan(acc, num_shards, None, 2 if by_records else None, 1, prev)
  order = sorted(entries, key=bound_of)
  return plan, order


def _members(plan, order):
  """{shard: [names]} from the plan's starts over the split's order (image positions)."""
  split = plan.splits["train"]
  starts = list(split.starts)
  result = {}
  for rank, e in enumerate(order):
    shard = bisect.bisect_right(starts, rank) - 1
    result.setdefault(shard, []).append(e[packed.KEY])
  return result


names = st.lists(st.text("abcdefgh", min_size=1, max_size=6), min_size=4, max_size=60,
                 unique=True)


@settings(max_examples=60, deadline=None)
@given(names, names, st.integers(2, 6))
def test_images_keep_their_shard_across_versions(first, second, shards):
  plan, order = _plan_of(first, num_shards=shards)
  n = plan.splits["train"].num_shards
  bounds = [bound_of(order[s]) for s in plan.splits["train"].starts[1:]]
  # the same images: the same plan
  again, _ = _plan_of(first, bounds)
  assert again.splits["train"].starts == plan.splits["train"].starts and not again.fallback
  # another version: every image where its identity falls between the bounds
  later = sorted(set(first) | set(second))
  new_plan, new_order = _plan_of(later, bounds)
  if new_plan.fallback:
    assert "rebalance" in new_plan.fallback
    return
  assert new_plan.splits["train"].num_shards == n
  for shard, members in _members(new_plan, new_order).items():
    for name in members:
      want = bisect.bisect_right(bounds, bound_of(_entry(name)))
      assert shard == want, (name, shard, want)


def test_a_shard_past_twice_its_planned_size_rebalances():
  first = [f"img{i}" for i in range(20)]
  plan, order = _plan_of(first, num_shards=4)
  bounds = [bound_of(order[s]) for s in plan.splits["train"].starts[1:]]
  grown = first + [n for n in (f"x{i}" for i in range(5000))
                   if bound_of(_entry(n)) < bounds[0]][:40]
  prev = {"train": PreviousSplit(tuple(bounds), tuple(sizes_of(plan.splits["train"])))}
  new_plan, _ = _plan_of(grown, bounds)
  assert new_plan.fallback == ""  # _plan_of's planned sizes are large: no rebalance there
  acc = {}
  for e in map(_entry, grown):
    key = ("train", partition_of(e[packed.HASH]))
    acc[key] = [a + b for a, b in zip(acc.get(key, [0, 0, 0]), (1, 1, 10))]
  for p in {k[1] for k in acc}:
    part = sorted((e for e in map(_entry, grown) if partition_of(e[packed.HASH]) == p),
                  key=bound_of)
    for key, c in counts_below_bounds("train", part, bounds).items():
      acc[key] = [a + b for a, b in zip(acc.get(key, [0, 0, 0]), c)]
  rebalanced = make_plan(acc, 4, None, None, 1, prev)
  assert rebalanced.fallback.startswith("split 'train': shard 0 would hold 45 images, "
                                        "planned for 5")
  assert rebalanced.previous == {} and rebalanced.splits["train"].num_shards == 4


def test_manifest_plan_round_trip_and_refusals(tmp_path):
  plan, order = _plan_of([f"img{i}" for i in range(10)], num_shards=3)
  stats = [{"split": "train", "shard": s, "first": list(bound_of(order[start])),
            "index": catalog.index_name("train", s, 3)}
           for s, start in enumerate(plan.splits["train"].starts)]
  record = previous.plan_record(plan, stats)
  manifest = {"outcome": "ok", "shard_plan": record, "label_map": {"a": 1},
              "config": {"schema": "od-api"},
              "splits": {"train": {"images": 10, "shards": [
                  {"path": f"train-{s:05d}-of-00003.tfrecord"} for s in range(3)]}}}
  earlier = previous.from_manifest(str(tmp_path), manifest)
  assert earlier.splits["train"].bounds == tuple(bound_of(order[s])
                                                 for s in plan.splits["train"].starts[1:])
  assert earlier.splits["train"].planned == tuple(sizes_of(plan.splits["train"]))
  second = earlier.earlier_files("train")[1]
  assert (second.shard, second.catalog) == (
      str(tmp_path / "train-00001-of-00003.tfrecord"),
      str(tmp_path / "catalog-train-00001-of-00003.parquet"))
  assert second.span == (bound_of(order[plan.splits["train"].starts[1]])[0],
                         bound_of(order[plan.splits["train"].starts[2]])[0])
  bad = dict(manifest, splits={"train": {"images": 10, "shards": [
      {"path": "../x.tfrecord"}, {"path": "b"}, {"path": "c"}]}})
  with pytest.raises(UsageError, match="no usable shard plan"):
    previous.from_manifest(str(tmp_path), bad)
  unsorted = {"train": dict(record["train"], bounds=record["train"]["bounds"][::-1])}
  with pytest.raises(UsageError, match="do not fit"):
    previous.from_manifest(str(tmp_path), dict(manifest, shard_plan=unsorted))
  with pytest.raises(UsageError, match="no shard_plan"):
    previous.from_manifest(str(tmp_path), {k: v for k, v in manifest.items()
                                           if k != "shard_plan"})


def test_digest_ignores_size_and_source_and_the_stamp_sees_a_new_time(tmp_path):
  error = ErrorRecord(source="a.csv", stage="validate", reason="size_mismatch",
                      message="m", key="k.jpg", level="warning")
  entry = catalog.Entry(key="k.jpg", uri="/r/k.jpg", stamp="10:5", digest="d", offset=12,
                        length=40, records=1, objects=2, clipped=1, reoriented=0,
                        labels=("cat", "dog"), errors=catalog.errors_of([error]))
  assert entry.error_records("b.csv")[0].source == "b.csv"
  ann = ImageAnnotation(key="k.jpg", uri="/r/k.jpg", source_id="1", source="a.csv")
  same = catalog.digest(ann)
  assert catalog.digest(ann.replace(size_bytes=99, source="b.csv")) == same
  assert catalog.digest(ann.replace(source_id="2")) != same
  image = tmp_path / "k.jpg"
  image.write_bytes(b"x")
  first = catalog.stamp(str(image))
  os.utime(image, ns=(1, 1))
  assert catalog.stamp(str(image)) != first and catalog.stamp("/no/such") == ""


def test_a_copied_range_is_checked_against_its_index(tmp_path):
  """An unchanged image's bytes come from the earlier shard only when they are what its index
  says: whole framed records with good CRCs, as many as it lists, and the digest keyed by
  the image (a range moved to another image's records does not match)."""
  records = [b"first record", b"second", b"third one"]
  framed = [b"".join((framing(r)[0], r, framing(r)[1])) for r in records]
  earlier = tmp_path / "earlier.tfrecord"
  earlier.write_bytes(b"".join(framed))
  assert len(framings(b"".join(framed))) == 2 * 3
  assert framings(framed[0][:-1]) is None
  damaged = bytearray(framed[1]); damaged[14] ^= 1
  assert framings(bytes(damaged)) is None
  a_off, b_off = 0, len(framed[0])

  def entry(key, offset, length, records=1, data=None):
    sha = catalog.record_digest(key, f"/r/{key}", framings(data) if data else [])
    return catalog.Entry(key=key, uri=f"/r/{key}", stamp="s", digest="d", offset=offset,
                         length=length, records=records, sha=sha)

  with record_files.EarlierShard(str(earlier)) as f:
    good = entry("a", a_off, len(framed[0]), data=framed[0])
    assert catalog.checked_range(f, good) == framed[0]
    assert catalog.checked_range(f, dataclasses.replace(good, sha="0" * 32)) is None
    # b's entry pointing at a's record (digest keyed by b): not copied
    moved = dataclasses.replace(entry("b", b_off, len(framed[1]), data=framed[1]),
                                offset=a_off, length=len(framed[0]))
    assert catalog.checked_range(f, moved) is None
    # a's row, its digest right, over its range with one data byte flipped: the CRC fails
    flipped = bytearray(earlier.read_bytes()); flipped[14] ^= 1
    (tmp_path / "flipped.tfrecord").write_bytes(bytes(flipped))
    with record_files.EarlierShard(str(tmp_path / "flipped.tfrecord")) as g:
      assert catalog.checked_range(g, good) is None
    # an offset moved by 7 bytes: framing fails; past the end; a wrong record count
    assert catalog.checked_range(f, dataclasses.replace(good, offset=7)) is None
    assert catalog.checked_range(f, dataclasses.replace(good, length=10_000)) is None
    assert catalog.checked_range(f, entry("a", a_off, len(framed[0]), records=2,
                                  data=framed[0])) is None
