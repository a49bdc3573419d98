"""write/contents.py: one content's copies -> one warning per extra copy naming the first copy
(in (split, key, uri) order), counts of every copy however many are named, the same file in
two splits not a copy of itself, and accumulators that merge in any order to the same."""
from __future__ import annotations

import hashlib
import itertools
import marshal
import random

import pytest

from beam_tfrecord.records.manifest import Leakage
from beam_tfrecord.storage.spill import read_records
from beam_tfrecord.write import contents

DIGEST = "ab" * 32


def _copies(items):
  copies = contents.new()
  for item in items:
    contents.add(copies, item)
  return copies


def _pairs(records):
  """(reason, the copy's path, the path it names) of each warning."""
  return sorted((r.reason, r.source, r.message.split(" as ", 1)[1].split(" ")[0].rstrip(","))
                for r in records)


def test_one_warning_per_extra_copy_naming_the_first():
  copies = _copies([("train", "b.jpg", "/d/b.jpg"), ("val", "v.jpg", "/d/v.jpg"),
                    ("train", "a.jpg", "/d/a.jpg"), ("test", "t.jpg", "/d/t.jpg"),
                    ("val", "w.jpg", "/d/w.jpg")])
  records, counts = contents.report(DIGEST, copies)
  # test < train < val: test's t.jpg is the first; each split's first copy leaks from it
  assert _pairs(records) == [
      ("duplicate_content", "/d/b.jpg", "/d/a.jpg"),
      ("duplicate_content", "/d/w.jpg", "/d/v.jpg"),
      ("leaked_across_splits", "/d/a.jpg", "/d/t.jpg"),
      ("leaked_across_splits", "/d/v.jpg", "/d/t.jpg")]
  assert counts == {"leaked_across_splits": 2, "duplicate_content": 2}
  assert all(r.level == "warning" and DIGEST in r.message for r in records)
  assert {r.key for r in records} == {"b.jpg", "w.jpg", "a.jpg", "v.jpg"}


def test_the_same_file_in_two_splits_is_not_a_copy():
  """in_two_splits (the plan's warning) already says so; a copy beside it still counts."""
  records, counts = contents.report(DIGEST, _copies([
      ("train", "a.jpg", "/d/a.jpg"), ("val", "a.jpg", "/d/a.jpg")]))
  assert records == [] and counts == {}
  records, counts = contents.report(DIGEST, _copies([
      ("train", "a.jpg", "/d/a.jpg"), ("val", "a.jpg", "/d/a.jpg"),
      ("val", "b.jpg", "/d/b.jpg")]))
  assert _pairs(records) == [("duplicate_content", "/d/b.jpg", "/d/a.jpg")]
  assert counts == {"duplicate_content": 1}


def test_copies_past_the_bound_are_counted_not_named():
  many = [("train", f"{i:05d}.jpg", f"/d/{i:05d}.jpg") for i in range(contents.MAX_NAMED + 40)]
  many.append(("val", "v.jpg", "/d/v.jpg"))
  copies = _copies(many)
  assert len(copies["train"][1]) == contents.MAX_NAMED  # the accumulator is bounded
  records, counts = contents.report(DIGEST, copies)
  assert counts == {"duplicate_content": contents.MAX_NAMED + 39, "leaked_across_splits": 1}
  named = [r for r in records if r.source != "/d/00000.jpg"]
  assert len(named) == contents.MAX_NAMED - 1 + 1  # train's named extras, val's leak
  rest = [r for r in records if r.source == "/d/00000.jpg"]
  assert len(rest) == 1 and rest[0].message.startswith("40 more files in split train")


def test_accumulators_merge_in_any_order_to_the_same():
  rng = random.Random(0)
  items = [(rng.choice(["train", "val"]), f"{i}.jpg", f"/d/{i}.jpg")
           for i in range(3 * contents.MAX_NAMED)]
  whole = _copies(items)
  for _ in range(5):
    rng.shuffle(items)
    cut = sorted(rng.sample(range(len(items)), 4))
    parts = [_copies(items[a:b]) for a, b in zip([0] + cut, cut + [len(items)])]
    assert contents.merge(parts) == whole
    assert contents.report(DIGEST, contents.merge(reversed(parts))) == \
        contents.report(DIGEST, whole)


def test_tapped_keeps_the_digest_and_passes_errors_on():
  tapped = contents.Tapped(lambda: (b"x", "d1"))
  assert tapped() == (b"x", "d1") and tapped.digest == "d1"

  def unreadable():
    raise OSError("gone")
  failing = contents.Tapped(unreadable)
  with pytest.raises(OSError):
    failing()
  assert failing.digest is None


def test_leakage_counts_and_weighing():
  counts = {contents.IMAGES: 8, contents.PREFIX + contents.LEAKED: 2,
            contents.PREFIX + contents.DUPLICATE: 1, "bbox_empty": 4}
  found = contents.leakage(counts, images=10)
  assert found == Leakage(leaked_across_splits=2, duplicate_content=1, images_checked=8,
                          images_unchecked=2)
  assert contents.weighed({"image": 1, "warning": 5}, found) == {
      "image": 1, "warning": 5, "copies": 3}
  assert contents.weighed({"warning": 1}, Leakage()) == {"warning": 1}


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_first_copy_does_not_depend_on_arrival(order):
  items = [("val", "x.jpg", "/d/x.jpg"), ("train", "y.jpg", "/d/y.jpg"),
           ("train", "z.jpg", "/d/z.jpg")]
  records, _ = contents.report(DIGEST, _copies([items[i] for i in order]))
  assert _pairs(records) == [("duplicate_content", "/d/z.jpg", "/d/y.jpg"),
                             ("leaked_across_splits", "/d/x.jpg", "/d/y.jpg")]


def test_batches_keep_order_and_bound_size():
  items = [(f"{i:064x}", "train", f"{i}.jpg", f"/d/{i}.jpg") for i in range(2 * contents.BATCH + 1)]
  batches = list(contents.batches(items))
  assert [len(b) for b in batches] == [contents.BATCH, contents.BATCH, 1]
  assert [c for b in batches for c in b] == items
  assert list(contents.batches([])) == []


def test_collected_keeps_a_list_or_spills_by_partition(tmp_path):
  found = [(hashlib.sha256(bytes([i])).hexdigest(), f"{i}.jpg", f"/d/{i}.jpg")
           for i in range(200)]
  kept = contents.Collected("val")
  for item in found:
    kept.add(*item)
  assert kept.items == [(d, "val", k, u) for d, k, u in found]
  assert kept.spilled() == []

  spilling = contents.Collected("val", str(tmp_path / "contents"))
  for item in found:
    spilling.add(*item)
  assert spilling.items == []
  files = spilling.spilled()
  assert sum(n for _, _, n in files) == 200
  back = []
  for partition, path, n in files:
    records = [marshal.loads(r) for r in read_records(path)]
    assert len(records) == n
    assert {contents.partition_of(r[0]) for r in records} == {partition}
    back += records
  assert sorted(back) == sorted((bytes.fromhex(d), "val", k, u) for d, k, u in found)
  # nothing found: no folder made
  empty = contents.Collected("val", str(tmp_path / "none"))
  assert empty.spilled() == [] and not (tmp_path / "none").exists()
