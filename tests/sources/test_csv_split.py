"""sources/csv.py on big files: a header read once, byte ranges read by many workers, rows
grouped by image; line numbers, boxes and errors as the whole-file read gives them; the
in-process join through spill files."""
from __future__ import annotations

import io
import os
import random
from typing import Dict, List, Tuple

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.metrics.metric import MetricsFilter
from conftest import transform_labels

from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources import csv as csv_source

HEADER = "filename,width,height,class,xmin,ymin,xmax,ymax"


def _dataset(tmp_path, rows: int = 600, seed: int = 7) -> Tuple[str, dict, List[tuple]]:
  """A CSV of `rows` data rows whose images' rows are spread over the whole file (so that
  they fall in different ranges), with a BOM, columns in another order, CRLF line ends, blank
  lines, quoted names with commas and bad rows. -> (path, {(split, filename): [objects]},
  [(line, reason, key)] of the rows that must be rejected)."""
  rng = random.Random(seed)
  columns = ["class", "ymax", "filename", "xmin", "split", "height", "ymin", "width", "xmax"]
  lines = ["\ufeff" + ",".join(columns)]
  expected: Dict[Tuple[str, str], list] = {}
  bad: List[tuple] = []
  names = [f"img_{i:03d}.jpg" for i in range(40)] + ['"a, b.jpg"']
  for _ in range(rows):
    line = len(lines) + 1
    name = rng.choice(names)
    plain = name.strip('"')
    split = rng.choice(["train", "val", ""])
    kind = rng.random()
    if kind < 0.03:
      lines.append("")  # blank
      continue
    if kind < 0.06:
      lines.append(f"cat,9,{name},1")  # too few fields
      bad.append((line, "malformed_row", plain))
      continue
    if kind < 0.09:
      lines.append(f"cat,9,{name},one,train,48,1,64,9")
      bad.append((line, "wrong_type", plain))
      continue
    x0, y0 = rng.randint(0, 30), rng.randint(0, 20)
    x1, y1 = x0 + rng.randint(1, 30), y0 + rng.randint(1, 20)
    label = rng.choice(["cat", "dog", "猫"])
    values = {"class": label, "ymax": y1, "filename": name, "xmin": x0, "split": split,
              "height": 48, "ymin": y0, "width": 64, "xmax": x1}
    lines.append(",".join(str(values[c]) for c in columns))
    expected.setdefault((split or "train", plain), []).append(
        ObjectAnnotation(label, Box(float(x0), float(y0), float(x1), float(y1))))
  path = tmp_path / "boxes.csv"
  path.write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8"))
  return str(path), expected, bad


def _run_many(runs, tmp_path, name: str) -> Dict[str, Tuple[List[str], List[str], int]]:
  """{run: (sorted image reprs, sorted error JSON lines, parts read)} of ReadCsv on the
  FnApiRunner, for runs [(run, inputs, options)]: one pipeline holding one independent
  ReadCsv branch per run (parts read counted by the branch's steps), one write of them all."""
  import json
  out_dir = str(tmp_path / f"out-{name}")
  p = beam.Pipeline("FnApiRunner")
  lines = []
  for run, inputs, options in runs:
    out = p | f"Read[{run}]" >> csv_source.ReadCsv(inputs, **options)
    for kind, pcoll, text in (("images", out.images, repr),
                              ("errors", out.errors, lambda e: e.to_json())):
      lines.append(pcoll | f"Text[{run}][{kind}]" >> beam.Map(
          lambda value, run=run, kind=kind, text=text: json.dumps([run, kind, text(value)])))
  _ = (tuple(lines) | "AllLines" >> beam.Flatten()
       | "Write" >> beam.io.WriteToText(os.path.join(out_dir, "lines"), num_shards=1))
  result = p.run()
  result.wait_until_finish()
  counters = result.metrics().query(MetricsFilter().with_name("parts_read"))["counters"]
  found = {run: {"images": [], "errors": []} for run, _, _ in runs}
  [file_name] = [n for n in os.listdir(out_dir) if n.startswith("lines")]
  with open(os.path.join(out_dir, file_name), encoding="utf-8") as f:
    for line in f.read().splitlines():
      run, kind, text = json.loads(line)
      found[run][kind].append(text)
  return {run: (sorted(found[run]["images"]), sorted(found[run]["errors"]),
                sum(c.committed for c in counters if c.key.step.startswith(f"Read[{run}]/")))
          for run, _, _ in runs}


def _run(inputs, tmp_path, name: str, **options) -> Tuple[List[str], List[str], int]:
  """(sorted image reprs, sorted error JSON lines, parts read) of ReadCsv on the FnApiRunner."""
  return _run_many([(name, inputs, options)], tmp_path, name)[name]


def _header_end(path: str) -> int:
  with open(path, "rb") as f:
    return csv_source.read_header(f, csv_source.parse_column_map(None)).end


# ---------------------------------------------------------------------------------------------
# The split read gives the whole read's result


@pytest.mark.parametrize("split_bytes", [700, 4096])
def test_a_big_csv_is_read_in_several_ranges_with_the_unsplit_result(tmp_path, split_bytes):
  path, expected, bad = _dataset(tmp_path)
  size = os.path.getsize(path)
  inputs = [("train", path, str(tmp_path))]
  runs = _run_many([("whole", inputs, {}),
                    ("split", inputs, {"split_bytes": split_bytes})], tmp_path, "both")
  whole_images, whole_errors, whole_parts = runs["whole"]
  images, errors, parts = runs["split"]
  ranges = list(OffsetRange(_header_end(path), size).split(split_bytes))
  assert whole_parts == 1 and parts == len(ranges) > 5  # really split, each range read once
  assert (images, errors) == (whole_images, whole_errors)

  # every value: one image per (split, filename), objects in file order, the header no row
  want = sorted(repr(ImageAnnotation(
      key=name, uri=str(tmp_path / name), source_id=name, source=path, objects=tuple(objects),
      split=split, width=64, height=48)) for (split, name), objects in expected.items())
  assert images == want
  import json
  got = sorted((json.loads(e)["source"], json.loads(e)["reason"], json.loads(e)["key"],
                json.loads(e)["level"]) for e in errors)
  assert got == sorted((f"{path}:{line}", reason, key, "object") for line, reason, key in bad)


def test_the_in_process_join_gives_the_distributed_result(tmp_path):
  path, expected, bad = _dataset(tmp_path, rows=300)
  inputs = [("train", path, str(tmp_path))]
  runs = _run_many([(f"{kind}{split_bytes}", inputs, dict(split_bytes=split_bytes, **options))
                    for split_bytes in (900, csv_source.SPLIT_BYTES)
                    for kind, options in (("d", {}), ("j", {"in_process": True}))],
                   tmp_path, "all")
  for split_bytes in (900, csv_source.SPLIT_BYTES):
    distributed = runs[f"d{split_bytes}"][:2]
    joined = runs[f"j{split_bytes}"][:2]
    assert joined == distributed
    assert (len(joined[0]), len(joined[1])) == (len(expected), len(bad))


def test_the_in_process_join_spills_partitions_and_keeps_file_order(tmp_path, monkeypatch):
  """Tiny partitions and buffer: rows go to spill files on disk and come back in file order,
  one partition at a time; the result is the GroupByKey path's."""
  from beam_tfrecord.sources.csv import transform as csv_source  # _JoinCsv
  from beam_tfrecord.storage import spill
  path, _, _ = _dataset(tmp_path, rows=400, seed=3)
  flushed = []
  real_flush = spill.Spill.flush

  def flush(self):
    flushed.append(sorted({p for p, records in self._buffers.items() if records}))
    real_flush(self)
  monkeypatch.setattr(spill.Spill, "flush", flush)
  out_dir = str(tmp_path / "spilled")
  p = beam.Pipeline("FnApiRunner")
  joined = (p | beam.Create([("train", path, str(tmp_path))])
            | beam.ParDo(csv_source._JoinCsv(
                csv_source.parse_column_map(None), False, False, False, split_bytes=1000,
                partition_bytes=1000, buffer_bytes=3000)).with_outputs("errors", main="images"))
  for kind, pcoll, text in (("images", joined.images, repr),
                            ("errors", joined.errors, lambda e: e.to_json())):
    _ = (pcoll | f"Text[{kind}]" >> beam.Map(text)
         | f"Write[{kind}]" >> beam.io.WriteToText(os.path.join(out_dir, kind), num_shards=1))
  p.run().wait_until_finish()
  assert len(flushed) > 3 and max(len(f) for f in flushed) > 5  # spilled, many partitions
  found = []
  for kind in ("images", "errors"):
    [name] = [n for n in os.listdir(out_dir) if n.startswith(kind)]
    with open(os.path.join(out_dir, name), encoding="utf-8") as f:
      found.append(sorted(f.read().splitlines()))
  assert tuple(found) == _run([("train", path, str(tmp_path))], tmp_path, "ref",
                              split_bytes=1000)[:2]


def test_held_rows_by_partition_in_file_order_across_spills():
  held = csv_source.HeldRows(partitions=4, buffer_bytes=2000)
  names = [f"n{i % 9}.jpg" for i in range(200)]
  for line, name in enumerate(names, start=2):
    held.add(name, (None, name, line, 64, 48, "cat", (1.0, 2.0, 3.0, float(line))))
  held.add("n1.jpg", (None, "n1.jpg", csv_source.BESIDE, None, None, None, None))
  try:
    assert held.spill is not None and held.spill.written  # past the buffer: on disk
    seen = {}
    for p in range(4):
      for (split, name), rows in held.images(p).items():
        assert name not in seen
        seen[name] = rows
    for name in set(names):
      lines = [line for line, n in enumerate(names, start=2) if n == name]
      want = [((0, line), 64, 48, "cat", (1.0, 2.0, 3.0, float(line))) for line in lines]
      if name == "n1.jpg":
        want.append(((csv_source.BESIDE, 0), None, None, None, None))
      assert seen[name] == want
    assert len(seen) == 9
  finally:
    directory = held.spill.directory
    held.close()
  assert not os.path.exists(directory)


def test_the_in_process_read_joins_in_a_dofn_without_a_group_by_key(tmp_path):
  path, _, _ = _dataset(tmp_path, rows=20)
  for in_process, wanted, unwanted in ((True, "Join", "GroupByImage"),
                                       (False, "GroupByImage", "Join")):
    p = beam.Pipeline("FnApiRunner")
    _ = p | csv_source.ReadCsv([("train", path, str(tmp_path))], in_process=in_process)
    labels = transform_labels(p)
    assert any(label.endswith(wanted) for label in labels), labels
    assert not any(label.endswith(unwanted) for label in labels), labels


# ---------------------------------------------------------------------------------------------
# read_range: every line read once, whatever the cut


def _cut_rows(data: bytes, cuts: List[int]):
  f = io.BytesIO(data)
  header = csv_source.read_header(f, csv_source.parse_column_map(None))
  bounds = [header.end] + cuts + [len(data)]
  out, before = [], header.lines
  for start, end in zip(bounds, bounds[1:]):
    last = 0
    for n, row in csv_source.read_range(io.BytesIO(data), header, start, end):
      last = n
      out.append((before + n, row if not isinstance(row, InputError) else row.reason))
    before += last
  return out


def test_read_range_reads_every_line_once_for_every_cut():
  data = (HEADER + "\na.jpg,64,48,cat,1,2,3,4\r\n\nb.jpg,64,48,dog,5,6,7,8\n"
          '"c, d.jpg",64,48,cat,1,1,2,2\nbad\nx\xff.jpg,1,1,c,1,1,2,2\ne.jpg,64,48,cat,1,1,2,2'
          ).encode("latin-1")
  reference = _cut_rows(data, [])
  assert [(line, row if isinstance(row, str) or row is None else row["filename"])
          for line, row in reference] == [
      (2, "a.jpg"), (3, None), (4, "b.jpg"), (5, "c, d.jpg"), (6, "bad"),
      (7, "malformed_row"), (8, "e.jpg")]
  end = _header_end_of(data)
  for cut in range(end, len(data) + 1):
    assert _cut_rows(data, [cut]) == reference, cut
  for first in range(end, len(data) + 1, 3):
    for second in range(first, len(data) + 1, 5):
      assert _cut_rows(data, [first, second]) == reference, (first, second)


def _header_end_of(data: bytes) -> int:
  return csv_source.read_header(io.BytesIO(data), csv_source.parse_column_map(None)).end


def test_read_header_with_a_bom_and_quoted_line_break_then_rows():
  data = ('\ufeffclass,"file\nname",xmin,ymin,xmax,ymax\ncat,a.jpg,1,2,3,4\n').encode()
  header = csv_source.read_header(io.BytesIO(data), csv_source.parse_column_map(
      "filename=file\nname"))
  assert (header.end, header.lines, header.columns, header.listing) == (
      data.index(b"cat"), 2, 6, False)
  assert dict(header.index)["filename"] == 1
  [(n, row)] = list(csv_source.read_range(io.BytesIO(data), header, header.end, len(data)))
  assert n == 1 and (row["filename"], row["class"], row["ymax"]) == ("a.jpg", "cat", "4")


@pytest.mark.parametrize("data,reason", [
    (b"", "malformed_csv"),
    (b"\xff\xfe,x\n", "malformed_csv"),
    (b"filename,class,xmin,ymin,xmax\na,b,1,2,3\n", "missing_column"),
    (b'"filename,class\n', "malformed_csv"),
])
def test_read_header_errors_are_read_rows_errors(data, reason):
  column_map = csv_source.parse_column_map(None)
  with pytest.raises(InputError) as split:
    csv_source.read_header(io.BytesIO(data), column_map)
  with pytest.raises(InputError) as whole:
    list(csv_source.read_rows(io.BytesIO(data), column_map))
  assert split.value.reason == whole.value.reason == reason


def test_read_range_refuses_a_line_over_the_budget_and_reads_on(monkeypatch):
  from beam_tfrecord.sources.csv import reading as csv_source  # where the budgets are read
  monkeypatch.setattr(csv_source, "MAX_LINE_CHARS", 60)
  monkeypatch.setattr(csv_source, "MAX_LINE_BYTES", 4 * 60 + 2)
  # over the budget: 500 bytes, 61 commas; within it: 60 characters in 118 bytes
  data = (HEADER + "\na.jpg,64,48,cat,1,2,3,4\n" + "x" * 500 + "\n" + "," * 61 + "\n"
          + "é" * 58 + ",1\r\nb.jpg,64,48,cat,1,2,3,4\n").encode()
  rows = _cut_rows(data, [])
  assert [(line, row if isinstance(row, str) else row["filename"]) for line, row in rows] == [
      (2, "a.jpg"), (3, "too_large"), (4, "too_large"), (5, "é" * 58), (6, "b.jpg")]
  for cut in range(_header_end_of(data), len(data), 7):  # a cut inside the long line too
    assert _cut_rows(data, [cut]) == rows, cut


# ---------------------------------------------------------------------------------------------
# Quoted fields with line breaks: read whole in a small file, reported in a big one


def test_a_quoted_line_break_is_read_in_a_small_file_and_reported_in_a_big_one(tmp_path):
  lines = [HEADER, "a.jpg,64,48,cat,1,2,3,4", 'b.jpg,64,48,"two', 'lines",5,6,7,8',
           "c.jpg,64,48,dog,1,2,3,4"] + [f"d.jpg,64,48,cat,1,1,{i},9" for i in range(2, 40)]
  path = tmp_path / "q.csv"
  path.write_text("\n".join(lines) + "\n")
  inputs = [(None, str(path), str(tmp_path))]
  runs = _run_many([("small", inputs, {}), ("big", inputs, {"split_bytes": 200}),
                    ("big-joined", inputs, {"split_bytes": 200, "in_process": True})],
                   tmp_path, "all")
  images, errors, _ = runs["small"]
  assert errors == []
  assert any("label='two\\nlines'" in image for image in images)

  images, errors, parts = runs["big"]
  assert parts > 1
  import json
  errors = [json.loads(e) for e in errors]
  assert sorted((e["source"], e["reason"], e["level"]) for e in errors) == [
      (f"{path}:3", "malformed_row", "object"), (f"{path}:4", "malformed_row", "object")]
  assert all("line break" in e["message"] for e in errors)
  by_key = {image.split("key='")[1].split("'")[0]: image for image in images}
  assert sorted(by_key) == ["a.jpg", "c.jpg", "d.jpg"]  # no box from the broken record
  assert by_key["d.jpg"].count("ObjectAnnotation(") == 38
  # the in-process join reads a big file as its ranges are read
  assert runs["big-joined"][:2] == (
      images, sorted(json.dumps(e, ensure_ascii=False, sort_keys=True) for e in errors))


# ---------------------------------------------------------------------------------------------
# Per-file decisions over the ranges: looks_normalized, header errors, Roboflow, listings


def test_looks_normalized_is_decided_once_per_file_over_every_range(tmp_path):
  rows = [f"i{i % 7}.jpg,64,48,cat,0.{i % 9},0.1,0.9,0.{i % 5 + 5}" for i in range(120)]
  path = tmp_path / "n.csv"
  path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
  inputs = [(None, str(path), str(tmp_path))]
  runs = _run_many([("whole", inputs, {}), ("split", inputs, {"split_bytes": 300}),
                    ("joined", inputs, {"split_bytes": 300, "in_process": True}),
                    ("option", inputs, {"split_bytes": 300, "normalized": True})],
                   tmp_path, "all")
  for name in ("whole", "split", "joined"):
    _, errors, _ = runs[name]
    [warning] = [ErrorRecord(**__import__("json").loads(e)) for e in errors]
    assert (warning.reason, warning.source, warning.level) == (
        "looks_normalized", str(path), "warning")
    assert "all 120 boxes" in warning.message
  _, errors, _ = runs["option"]
  assert errors == []


@pytest.mark.parametrize("data,reason", [
    (b"filename,width,height,class,xmin,ymin,ymax\n" + b"a.jpg,1,1,c,1,1,2\n" * 50,
     "missing_column"),
    (b"\xff\xfename\n" + b"a.jpg,1,1,c,1,1,2\n" * 50, "malformed_csv"),
])
def test_a_big_file_with_a_bad_header_is_one_file_error(tmp_path, data, reason):
  path = tmp_path / "h.csv"
  path.write_bytes(data)
  inputs = [(None, str(path), str(tmp_path))]
  runs = _run_many([(name, inputs, options)
                    for name, options in (("whole", {}), ("split", {"split_bytes": 100}),
                                          ("joined", {"split_bytes": 100, "in_process": True}))],
                   tmp_path, "all")
  results = [runs[name][:2] for name in ("whole", "split", "joined")]
  assert results[0] == results[1] == results[2]
  images, [error] = results[0]
  import json
  error = json.loads(error)
  assert images == [] and (error["reason"], error["level"], error["source"]) == (
      reason, "file", str(path))


def test_a_missing_file_is_unreadable_in_every_path(tmp_path):
  inputs = [(None, str(tmp_path / "gone.csv"), str(tmp_path))]
  runs = _run_many([("d", inputs, {"split_bytes": 10}), ("j", inputs, {"in_process": True})],
                   tmp_path, "all")
  for name in ("d", "j"):
    images, [error], _ = runs[name]
    assert images == [] and '"reason": "unreadable"' in error


def test_a_big_roboflow_file_keeps_unlisted_images_as_backgrounds(tmp_path):
  from bad_data import jpeg, write_bytes
  folder = tmp_path / "train"
  for name in ("a.jpg", "b.jpg", "bg.jpg"):
    write_bytes(str(folder / name), jpeg())
  path = folder / "_annotations.csv"
  path.write_text(HEADER + "\n" + "a.jpg,64,48,cat,1,2,3,4\n" * 30 + "b.jpg,64,48,,,,,\n")
  inputs = [("train", str(path), str(folder))]
  runs = _run_many([(name, inputs, options)
                    for name, options in (("whole", {}), ("split", {"split_bytes": 150}),
                                          ("joined", {"split_bytes": 150, "in_process": True}))],
                   tmp_path, "all")
  results = [runs[name][:2] for name in ("whole", "split", "joined")]
  assert results[0] == results[1] == results[2]
  images, errors = results[0]
  assert errors == [] and [image.split("key='")[1].split("'")[0] for image in images] == [
      "a.jpg", "b.jpg", "bg.jpg"]
  assert images[0].count("ObjectAnnotation(") == 30 and "objects=()" in images[2]
  assert f"source='{path}'" in images[2]


def test_a_big_classification_listing_gives_image_labels(tmp_path):
  rows = [f"p{i % 5}.jpg,{['cat', 'dog'][i % 2]},{['train', 'val'][i % 3 == 0]}"
          for i in range(60)]
  path = tmp_path / "l.csv"
  path.write_text("filename,class,split\n" + "\n".join(rows) + "\n")
  inputs = [(None, str(path), str(tmp_path))]
  runs = _run_many([("whole", inputs, {}), ("split", inputs, {"split_bytes": 120})],
                   tmp_path, "all")
  whole = runs["whole"][:2]
  assert runs["split"][:2] == whole
  images, errors = whole
  assert errors == [] and len(images) == 10 and all("labels=(" in i for i in images)


# ---------------------------------------------------------------------------------------------
# Objects per image: sources.base.MAX_OBJECTS_PER_IMAGE rows at most


def test_an_image_over_the_bound_is_one_error_in_every_path(tmp_path):
  """A Roboflow export whose big.jpg has BOUND + 1 rows and full.jpg BOUND (plus the image
  file beside the CSV, which is no row), their rows interleaved over many ranges: big.jpg is
  one too_many_objects error at its first line, full.jpg keeps all its boxes, alike whole,
  in ranges, and joined through spill files."""
  import json

  from bad_data import jpeg, write_bytes

  from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE as BOUND
  folder = tmp_path / "train"
  for name in ("big.jpg", "full.jpg", "small.jpg"):
    write_bytes(str(folder / name), jpeg())
  rows = ["small.jpg,64,48,dog,1,2,3,4"]
  for i in range(BOUND + 1):
    rows.append(f"big.jpg,64,48,cat,1,2,3,{5 + i % 40}")
    if i < BOUND:
      rows.append(f"full.jpg,64,48,cat,1,2,3,{5 + i % 40}")
  path = folder / "_annotations.csv"
  path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
  inputs = [("train", str(path), str(folder))]
  runs = _run_many([(name, inputs, options)
                    for name, options in (
                        ("whole", {}), ("split", {"split_bytes": 1 << 16}),
                        ("joined", {"split_bytes": 1 << 16, "in_process": True}))],
                   tmp_path, "all")
  results = [runs[name][:2] for name in ("whole", "split", "joined")]
  assert results[0] == results[1] == results[2]
  images, errors = results[0]
  [error] = [json.loads(e) for e in errors]
  assert (error["reason"], error["level"], error["key"], error["source"]) == (
      "too_many_objects", "image", "big.jpg", f"{path}:3")
  assert error["message"] == (f"big.jpg has more than {BOUND:,} rows, the most objects one "
                              "image may have: the image is not converted")
  assert [image.split("key='")[1].split("'")[0] for image in images] == ["full.jpg",
                                                                         "small.jpg"]
  assert images[0].count("ObjectAnnotation(") == BOUND


def test_held_rows_keep_no_more_of_an_image_than_the_bound(tmp_path):
  """Rows spilled to disk past a small buffer: an image of 3 x BOUND rows comes back as its
  first BOUND + 1 (enough to reject it), the batches loaded one at a time; others whole."""
  from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE as BOUND
  from beam_tfrecord.sources.csv import readers
  held = csv_source.HeldRows(partitions=1, buffer_bytes=50_000)
  for line in range(2, 3 * BOUND + 2):
    held.add("big.jpg", (None, "big.jpg", line, 64, 48, "cat", (1.0, 2.0, 3.0, 4.0)))
  held.add("small.jpg", (None, "small.jpg", 3 * BOUND + 2, 64, 48, "dog", (1.0, 2.0, 3.0, 4.0)))
  try:
    assert held.spill is not None and len(held.spill.written) == 1
    images = held.images(0)
    assert [row[0] for row in images[(None, "big.jpg")]] == [
        (0, line) for line in range(2, BOUND + 3)]
    assert len(images[(None, "small.jpg")]) == 1
    assert readers.bounded(images[(None, "big.jpg")]) == ([images[(None, "big.jpg")][0]], True)
    assert readers.bounded(iter(images[(None, "big.jpg")][:BOUND][::-1])) == (
        images[(None, "big.jpg")][:BOUND], False)
  finally:
    held.close()
