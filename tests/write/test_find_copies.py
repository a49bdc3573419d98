"""write/leakage.FindCopies on a real Beam pipeline: the distributed path (CombinePerKey by
digest), the local one (spill files by digest) and the local one fed with files the shard
writers spilled themselves (contents.Collected) report the same warnings and counts, for
contents with one copy, copies across and within splits, and more copies than are named."""
from __future__ import annotations

import hashlib
import json

import apache_beam as beam
import pytest

from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.write import contents
from beam_tfrecord.write.leakage import FindCopies, contents_directory

pytestmark = pytest.mark.e2e


def _digest(text: str) -> str:
  return hashlib.sha256(text.encode()).hexdigest()


def _written():
  """(digest, split, key, uri) of 300 distinct images plus planted copies."""
  items = [(_digest(f"image {i}"), ("train", "val")[i % 2], f"{i}.jpg", f"/d/{i}.jpg")
           for i in range(300)]
  items += [(_digest("image 0"), "val", "copy0.jpg", "/d/copy0.jpg"),  # train's 0.jpg
            (_digest("image 1"), "val", "copy1.jpg", "/d/copy1.jpg")]  # within val
  items += [(_digest("blank"), "test", f"b{i:04d}.png", f"/d/b{i:04d}.png")
            for i in range(contents.MAX_NAMED + 5)]
  return items


def _writers_spill(items, spill_directory):
  """contents.Spilled of `items` spilled as shard writers do: one Collected per shard of 37."""
  spilled = []
  for start in range(0, len(items), 37):
    shard = items[start:start + 37]
    found = contents.Collected(shard[0][1], contents_directory(spill_directory))
    for digest, split, key, uri in shard:
      if split != found.split:  # a shard holds one split
        spilled += found.spilled()
        found = contents.Collected(split, contents_directory(spill_directory))
      found.add(digest, key, uri)
    spilled += found.spilled()
    assert found.items == []
  return spilled


def _run(spill_directory, tmp_path, spilled=False):
  out = tmp_path / ("writers" if spilled else "spill" if spill_directory else "combine")
  with beam.Pipeline("FnApiRunner") as p:
    items = _written()  # in lists, as the writer hands them over
    batches = ([items[i:i + 37] for i in range(0, len(items), 37)] if not spilled else
               _writers_spill(items, spill_directory))
    errors, counts = (p | beam.Create(batches) | FindCopies(spill_directory, spilled))
    _ = errors | "E" >> beam.Map(ErrorRecord.to_json) | "WE" >> beam.io.WriteToText(
        str(out / "errors"), num_shards=1)
    _ = (counts | beam.CombinePerKey(sum) | beam.Map(json.dumps)
         | "WC" >> beam.io.WriteToText(str(out / "counts"), num_shards=1))
  read = lambda prefix: sorted(  # noqa: E731
      line for path in out.glob(prefix + "*") for line in path.read_text().splitlines())
  return read("errors"), dict(json.loads(line) for line in read("counts"))


def test_both_paths_report_the_same(tmp_path):
  spill = tmp_path / "work"
  spilled = _run(str(spill), tmp_path)
  combined = _run(None, tmp_path)
  assert spilled == combined
  assert _run(str(tmp_path / "writers-work"), tmp_path, spilled=True) == combined
  errors, counts = combined
  assert counts == {contents.IMAGES: 300 + 2 + contents.MAX_NAMED + 5,
                    contents.PREFIX + contents.LEAKED: 1,
                    contents.PREFIX + contents.DUPLICATE: 1 + contents.MAX_NAMED + 4}
  records = [json.loads(line) for line in errors]
  assert sum(r["reason"] == "leaked_across_splits" for r in records) == 1
  # the blank's copies: MAX_NAMED - 1 named, 5 counted in one line
  assert sum(r["key"].startswith("b") for r in records) == contents.MAX_NAMED
  # the spill files stay for Finalize's remove_work: a retried bundle reads them again
  assert [p for p in spill.rglob("*") if p.is_file()]


def test_spilled_needs_its_directory():
  with pytest.raises(ValueError):
    FindCopies(None, spilled=True)
