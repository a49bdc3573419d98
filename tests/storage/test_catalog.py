"""storage/catalog.py: a partition is the entries as one Parquet table, read back as the same
entries, and anything else in its place is refused (None), never trusted."""
from __future__ import annotations

import dataclasses
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import catalog


def _entries():
  errors = catalog.errors_of([ErrorRecord("a.json", "validate", "size_mismatch",
                                          "says 1x2, \u00e9 \"q\"", "k", "warning")])
  entry = catalog.Entry(key="k\u00e9.jpg", uri="/d/k\u00e9.jpg", stamp="1:2:3:4",
                        digest="ab" * 16, offset=7, length=99, records=1, objects=2,
                        clipped=1, reoriented=1, labels=("cat", "dog"), errors=errors,
                        rejected=False, sha="cd" * 16, content="ef" * 32)
  rejected = catalog.Entry(key="b.jpg", uri="/d/b.jpg", stamp="", digest="12" * 16,
                           offset=106, rejected=True)
  # a partition's rows are in shard order (by hash): that order, whichever it is
  return sorted([entry, rejected], key=lambda e: catalog.identity_hash(e.key))


def test_a_partition_reads_back_as_its_entries_and_the_same_entries_give_the_same_bytes():
  entries = _entries()
  data = catalog.encode(entries)
  assert catalog.parse(data) == entries
  assert catalog.encode(entries) == data
  assert catalog.parse(catalog.encode([])) == []
  table = pq.read_table(pa.BufferReader(data))
  assert table.schema.remove_metadata().equals(catalog.SCHEMA)
  assert table.column("hash").to_pylist() == [catalog.identity_hash(e.key) for e in entries]


def _rewritten(edit, schema=catalog.SCHEMA) -> bytes:
  columns = pq.read_table(pa.BufferReader(catalog.encode(_entries()))).to_pydict()
  edit(columns)
  sink = pa.BufferOutputStream()
  pq.write_table(pa.Table.from_pydict(columns, schema=schema), sink)
  return sink.getvalue().to_pybytes()


def _set(name, value, row=0):
  return lambda columns: columns[name].__setitem__(row, value)


@pytest.mark.parametrize("data", [
    pytest.param(lambda: catalog.encode(_entries())[:-9], id="truncated"),
    pytest.param(lambda: b"PAR1 not really", id="not-parquet"),
    pytest.param(lambda: _rewritten(lambda c: None, pa.schema(
        [f if f.name != "offset" else pa.field("offset", pa.float64())
         for f in catalog.SCHEMA])), id="wrong-schema"),
    pytest.param(lambda: _rewritten(lambda c: c.pop("content"), pa.schema(
        [f for f in catalog.SCHEMA if f.name != "content"])), id="missing-column"),
    pytest.param(lambda: _rewritten(_set("length", -1)), id="negative-count"),
    pytest.param(lambda: _rewritten(_set("stamp", None)), id="null"),
    pytest.param(lambda: _rewritten(_set("hash", 12345)), id="hash-not-its-keys"),
    pytest.param(lambda: _rewritten(lambda c: (_set("offset", 50, row=1)(c),
                                               _set("length", 10, row=1)(c))),
                 id="overlapping-records"),
    pytest.param(lambda: _rewritten(_set("errors", '{"not": "a list"}')), id="bad-errors"),
    pytest.param(lambda: _rewritten(lambda c: [c[n].reverse() for n in c]),
                 id="rows-out-of-shard-order"),
])
def test_anything_but_a_partition_this_tool_writes_is_refused(data):
  with pytest.raises(ValueError):
    catalog.parse(data())


def test_read_checked_refuses_another_digest_or_row_count_a_link_and_a_fifo(tmp_path):
  path = tmp_path / "catalog-train-00000-of-00001.parquet"
  data = catalog.encode(_entries())
  path.write_bytes(data)
  digest = catalog.file_digest(data)
  assert catalog.read_checked(str(path), digest, 2) == (_entries(), digest)
  assert catalog.read_checked(str(path), "0" * 32, 2)[0] is None
  assert catalog.read_checked(str(path), digest, 3)[0] is None
  link = tmp_path / "link.parquet"
  link.symlink_to(path)
  assert catalog.read(str(link)) is None
  fifo = tmp_path / "fifo.parquet"
  os.mkfifo(fifo)
  assert catalog.read(str(fifo)) is None  # refused without blocking on the FIFO
  assert catalog.read(str(tmp_path / "missing.parquet")) is None


def test_an_entry_keeps_its_fields_through_the_table():
  names = [f.name for f in dataclasses.fields(catalog.Entry)]
  assert sorted(n for n in catalog.SCHEMA.names if n != "hash") == sorted(names)


def test_the_annotation_digest_is_of_the_values_not_of_how_they_share_objects():
  import sys
  from beam_tfrecord.records import batches
  from beam_tfrecord.records.model import Box, ImageAnnotation, ObjectAnnotation
  ann = ImageAnnotation(key="a.jpg", uri="/d/a.jpg", source_id="1", source="x.json",
                        size_bytes=10, objects=(ObjectAnnotation("person", Box(0.1, 0.2, 0.5,
                                                                               0.75)),))
  image = batches.TO_PLAIN(ann)
  same = catalog.digest_plain(image)
  assert catalog.digest(ann) == same
  # the same values, their strings built anew or interned: the same digest
  rebuilt = eval(repr(image), {})  # noqa: S307 (plain values only)
  label = sys.intern("".join(["per", "son"]))
  assert catalog.digest_plain(rebuilt) == same
  assert catalog.digest_plain(image[:batches.OBJECTS] + (tuple(
      (label,) + o[1:] for o in image[batches.OBJECTS]),) + image[batches.OBJECTS + 1:]) == same
  # not the file's size nor the annotation file; any other field, a float's last bit too
  assert catalog.digest(ann.replace(size_bytes=99, source="y.json")) == same
  assert catalog.digest(ann.replace(source_id="2")) != same
  moved = ObjectAnnotation("person", Box(0.1, 0.2, 0.5, 0.7500000000000001))
  assert catalog.digest(ann.replace(objects=(moved,))) != same


def test_a_partition_whose_hashes_leave_its_shards_ranges_is_refused():
  """A row outside the hashes of its shard's base ranges would be compared by a run that
  does not read that partition (plan/compare): refused, as every reader decides alike."""
  data = catalog.encode(_entries())
  hashes = sorted(catalog.identity_hash(e.key) for e in _entries())
  assert catalog.check_table(data, (hashes[0], hashes[-1])).num_rows == 2
  with pytest.raises(ValueError, match="within its shard's ranges"):
    catalog.check_table(data, (hashes[0] + 1, catalog.HASH_MAX))
  with pytest.raises(ValueError, match="within its shard's ranges"):
    catalog.check_table(data, (0, hashes[-1] - 1))
