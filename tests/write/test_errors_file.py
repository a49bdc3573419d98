"""write/errors_file.WriteErrorsFile on a real Beam pipeline: the errors file's bytes do not
depend on the order the records come in or how they are bundled (a distributed runner's
shuffles deliver in their own order), every record is one line, and no errors give an empty
file, as WriteToText's was."""
from __future__ import annotations

import json
import random

import apache_beam as beam
import pytest

from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.write import errors_file

pytestmark = pytest.mark.e2e


def _records(n):
  return [ErrorRecord(source=f"/d/a{i % 7}.json", stage="parse", reason=f"r{i % 3}",
                      key=f"img{i:04d}.jpg", level=("image", "warning")[i % 2],
                      message=f"problem {i} ünïcode") for i in range(n)]


def _write(records, staging, bundles):
  with beam.Pipeline("FnApiRunner") as p:
    chunks = [records[i::bundles] for i in range(bundles)]
    _ = (p | beam.Create(chunks) | beam.FlatMap(lambda chunk: chunk)
         | errors_file.WriteErrorsFile(str(staging)))
  return (staging / errors_file.NAME).read_bytes()


def test_same_bytes_whatever_the_order(tmp_path):
  records = _records(700)
  first = _write(records, tmp_path / "a", 1)
  shuffled = list(records)
  random.Random(3).shuffle(shuffled)
  assert _write(shuffled, tmp_path / "b", 5) == first
  lines = first.decode("utf-8").splitlines()
  assert sorted(lines) == sorted(r.to_json() for r in records)  # each record, once
  # in order of (part, line)
  assert lines == sorted(lines, key=lambda line: (errors_file.part_of(line), line))
  assert json.loads(lines[0])["message"].endswith("ünïcode")
  # no partial file is left beside it
  assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [".work", errors_file.NAME]


def test_no_errors_give_an_empty_file(tmp_path):
  assert _write([], tmp_path, 1) == b""


def test_parts_and_their_bytes():
  lines = ["b", "a", "c"]
  assert errors_file.sorted_part(lines) == b"a\nb\nc\n"
  assert errors_file.sorted_part([]) == b""
  assert all(0 <= errors_file.part_of(r.to_json()) < errors_file.PARTS for r in _records(50))
  assert errors_file.part_of("x") == errors_file.part_of("x")
