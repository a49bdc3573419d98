"""plan/compare.py without Beam: an earlier shard file checked once (its catalog partition
and its records), and a run's images compared with the catalog rows of its partitions:
added, unchanged, changed and removed, on real files and a real shard."""
from __future__ import annotations

import os

import pytest
from PIL import Image

from beam_tfrecord.plan import compare, shard_plan
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import Box, ErrorRecord, ImageAnnotation, ObjectAnnotation
from beam_tfrecord.records.tfrecord import framing
from beam_tfrecord.storage import catalog


def _image(root, name: str, colour: int = 0) -> ImageAnnotation:
  path = root / name
  if not path.exists():
    Image.new("RGB", (8, 6), (colour, 0, 0)).save(path)
  return ImageAnnotation(key=name, uri=str(path), source_id=name, source="ann.json",
                         split="train", size_bytes=os.path.getsize(path),
                         objects=(ObjectAnnotation("cat", Box(1, 1, 4, 4)),))


def _shard(tmp_path, anns, errors=None):
  """A shard of one record per image (its bytes: the key) and its catalog partition, in
  shard order, as an earlier version holds them; (EarlierFile, entries)."""
  anns = sorted(anns, key=lambda a: (packed.identity_hash(a.key), a.key, a.uri))
  shard, part = tmp_path / "train-00000-of-00001.tfrecord", tmp_path / "catalog.parquet"
  entries, offset = [], 0
  with open(shard, "wb") as f:
    for a in anns:
      record = a.key.encode() * 3
      head, tail = framing(record)
      f.write(head + record + tail)
      entries.append(catalog.Entry(
          key=a.key, uri=a.uri, stamp=catalog.stamp(a.uri), digest=catalog.digest(a),
          offset=offset, length=len(head + record + tail), records=1, objects=1,
          labels=("cat",), sha=catalog.record_digest(a.key, a.uri, [head, tail]),
          errors=catalog.errors_of((errors or {}).get(a.key, []))))
      offset += entries[-1].length
  data = catalog.encode(entries)
  part.write_bytes(data)
  earlier = compare.EarlierFile(0, str(shard), str(part), catalog.file_digest(data),
                                len(entries), catalog.file_stamp(str(shard)),
                                (0, catalog.HASH_MAX))
  return earlier, entries


def _context(earlier, check, reuse=True):
  return compare.CompareSplit((), (earlier,), {0: check}, reuse)


def _every_row(context):
  return compare.catalog_rows(context, 0, shard_plan.PARTITIONS - 1)


def test_an_untouched_file_is_checked_from_its_stamp_and_a_damaged_record_is_named(
    tmp_path, monkeypatch):
  anns = [_image(tmp_path, f"{i}.png", i) for i in range(6)]
  earlier, entries = _shard(tmp_path, anns)
  calls = []
  real = catalog.check_range
  monkeypatch.setattr(catalog, "check_range", lambda f, *row: calls.append(row) or real(f, *row))
  check, errors = compare.check_file("train", earlier)
  assert check.usable and check.bad == () and not errors and calls == []
  # the stamp differs (written into): every record checked, the damaged one named
  os.chmod(earlier.shard, 0o644)
  with open(earlier.shard, "r+b") as f:
    f.seek(entries[2].offset + 14)
    f.write(b"\xff")
  check, errors = compare.check_file("train", earlier)
  assert check.usable and check.bad == (2,) and len(calls) == 6
  assert [e.reason for e in errors] == ["earlier_shard_damaged"]
  # a partition other than the recorded one: not used, one warning
  forged = compare.EarlierFile(0, earlier.shard, earlier.catalog, "0" * 32, earlier.rows,
                               earlier.stamp, earlier.span)
  check, errors = compare.check_file("train", forged)
  assert not check.usable and [e.reason for e in errors] == ["earlier_index_damaged"]


def test_a_run_keeps_only_what_changed(tmp_path):
  anns = [_image(tmp_path, f"{i}.png", i) for i in range(8)]
  earlier, entries = _shard(tmp_path, anns)
  check, _ = compare.check_file("train", earlier)
  row_of = {e.key: row for row, e in enumerate(entries)}
  # now: 0.png redrawn (new bytes: a new stamp), 1.png's annotation changed, 2.png gone,
  # new.png added, the rest as they were
  os.remove(anns[0].uri)
  redrawn = _image(tmp_path, "0.png", 200)
  moved = ImageAnnotation(**{**anns[1].__dict__, "objects": (
      ObjectAnnotation("cat", Box(2, 1, 4, 4)),)})
  added = _image(tmp_path, "new.png", 99)
  now = [redrawn, moved, added] + anns[3:]
  unique = sorted((packed.pack(a) for a in now), key=shard_plan.bound_of)
  context = _context(earlier, check)
  changes, dirty, added_counts = compare.compare_run(unique, _every_row(context), context)
  kinds = {}
  for records, file, row, blob in changes:
    key = packed.unpack(blob).key if blob else entries[row].key
    kinds[key] = ("added" if file < 0 else "changed" if blob else "removed", row)
  assert kinds == {"0.png": ("changed", row_of["0.png"]), "1.png": ("changed", row_of["1.png"]),
                   "2.png": ("removed", row_of["2.png"]), "new.png": ("added", 0)}
  assert dirty == {0: 3} and added_counts == {0: 1}
  # added images in shard order, then the removed rows
  assert [c[3] != b"" for c in changes][-1] is False
  # another label map (reuse False): every image it holds is encoded again
  context = _context(earlier, check, reuse=False)
  changes, dirty, _ = compare.compare_run(unique, _every_row(context), context)
  assert dirty == {0: 8} and sum(1 for c in changes if c[1] == 0 and c[3]) == 7


def test_a_row_whose_records_failed_or_whose_errors_name_another_file_is_encoded_again(
    tmp_path):
  anns = [_image(tmp_path, f"{i}.png", i) for i in range(4)]
  warning = ErrorRecord("ann.json", "validate", "size_mismatch", "says 9x9", "1.png",
                        "warning")
  earlier, entries = _shard(tmp_path, anns, errors={"1.png": [warning]})
  check, _ = compare.check_file("train", earlier)
  bad = compare.FileCheck("train", 0, True, check.stamp, bad=(entries.index(
      next(e for e in entries if e.key == "3.png")),))
  now = [anns[0], ImageAnnotation(**{**anns[1].__dict__, "source": "export-2.json"}),
         anns[2], anns[3]]
  unique = sorted((packed.pack(a) for a in now), key=shard_plan.bound_of)
  context = _context(earlier, bad)
  changes, dirty, _ = compare.compare_run(unique, _every_row(context), context)
  assert sorted(packed.unpack(c[3]).key for c in changes) == ["1.png", "3.png"]
  assert dirty == {0: 2}


def test_rows_are_read_by_the_runs_whose_partitions_hold_their_hashes(tmp_path):
  anns = [_image(tmp_path, f"{i}.png", i) for i in range(30)]
  earlier, entries = _shard(tmp_path, anns)
  check, _ = compare.check_file("train", earlier)
  context = _context(earlier, check)
  span = shard_plan.LOCAL_RUN_SPAN
  seen = []
  for run in range(shard_plan.PARTITIONS // span):
    rows = compare.catalog_rows(context, run * span, (run + 1) * span - 1)
    for (key, _), value in rows.items():
      assert shard_plan.partition_of(catalog.identity_hash(key)) // span == run
      seen.append(value[1])
  assert sorted(seen) == list(range(len(entries)))


@pytest.mark.parametrize("added, target, groups", [
    ([0, 0, 0], 10, [(0, 3)]),
    ([4, 4, 4, 4], 8, [(0, 2), (2, 4)]),
    ([15, 9, 6], 13, [(0, 1), (1, 2), (2, 3)]),
    ([0, 30, 0, 0], 13, [(0, 2), (2, 4)]),
])
def test_delta_shards_are_cut_from_the_images_added_in_each_range(added, target, groups):
  assert shard_plan.delta_groups(added, target) == groups
