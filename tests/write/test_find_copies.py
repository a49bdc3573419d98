"""write/leakage.FindCopies on a real Beam pipeline: the distributed path (CombinePerKey by
digest) and the local one (spill files by digest) report the same warnings and counts, for
contents with one copy, copies across and within splits, and more copies than are named."""
from __future__ import annotations

import hashlib
import json

import apache_beam as beam
import pytest

from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.write import contents
from beam_tfrecord.write.leakage import FindCopies

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


def _run(spill_directory, tmp_path):
  out = tmp_path / ("spill" if spill_directory else "combine")
  with beam.Pipeline("FnApiRunner") as p:
    items = _written()  # in lists, as the writer hands them over
    batches = [items[i:i + 37] for i in range(0, len(items), 37)]
    errors, counts = (p | beam.Create(batches) | FindCopies(spill_directory))
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
