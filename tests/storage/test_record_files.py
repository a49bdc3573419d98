"""storage/record_files.py without Beam: the bytes each format writes (against TensorFlow's
TFRecordWriter and the array_record package's reader), index files as the readers' own
tfrecord2idx writes them, and every kind of bad range or index refused."""
from __future__ import annotations

import os

import pytest

from beam_tfrecord.records import tfrecord
from beam_tfrecord.storage import catalog, record_files
from beam_tfrecord.storage.record_files import ARRAY_RECORD, TFRECORD, Container

RECORDS = [b"", b"a", os.urandom(5000), b"x" * 70_000, os.urandom(3)]


def _write(path, container, records=RECORDS, framed=False):
  with record_files.create(str(path), container, framed) as out:
    positions = []
    for record in records:
      positions.append(out.position)
      out.write(record)
  return out, positions


def _tfrecord2idx(path) -> bytes:
  """The index DALI's and the tfrecord package's tfrecord2idx write, rewritten from their
  description: per record, its start and its framed length (8 + 4 + data + 4)."""
  lines, data, pos = [], open(path, "rb").read(), 0
  while pos < len(data):
    length = int.from_bytes(data[pos:pos + 8], "little")
    lines.append(f"{pos} {8 + 4 + length + 4}\n")
    pos += 8 + 4 + length + 4
  return "".join(lines).encode()


def test_tfrecord_bytes_and_index_are_tensorflows_and_tfrecord2idxs(tmp_path):
  tf = pytest.importorskip("tensorflow")
  out, positions = _write(tmp_path / "a.tfrecord", Container(TFRECORD, index_files=True))
  with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as w:
    for record in RECORDS:
      w.write(record)
  assert (tmp_path / "a.tfrecord").read_bytes() == (tmp_path / "tf.tfrecord").read_bytes()
  assert record_files.index_text(out.spans) == _tfrecord2idx(tmp_path / "tf.tfrecord")
  assert [o for o, _ in out.spans] == positions
  assert record_files.scan_spans(str(tmp_path / "a.tfrecord")) == out.spans
  assert list(record_files.read_records(str(tmp_path / "a.tfrecord"))) == RECORDS


def test_array_record_files_read_back_by_the_package_and_by_range(tmp_path):
  from array_record.python import array_record_module
  path = tmp_path / "a.array_record"
  out, positions = _write(path, Container(ARRAY_RECORD), framed=True)
  assert positions == list(range(len(RECORDS))) and out.position == len(RECORDS)
  reader = array_record_module.ArrayRecordReader(str(path))
  assert reader.read_all() == RECORDS
  assert set(reader.writer_options_string().split(",")) >= {"group_size:1", "uncompressed"}
  reader.close()
  assert list(record_files.read_records(str(path), ARRAY_RECORD)) == RECORDS
  assert list(record_files.read_records(str(path), ARRAY_RECORD, limit=2)) == RECORDS[:2]
  with record_files.EarlierShard(str(path), ARRAY_RECORD) as shard:
    assert shard.extent == len(RECORDS)
    frames, records = shard.read_range(1, 3)
    assert records == RECORDS[1:4]
    assert frames == [part for r in RECORDS[1:4] for part in tfrecord.framing(r)]
    assert shard.read_range(3, 5) is None  # past the end
    sha = catalog.record_digest("k", "u", frames)
    assert catalog.check_range(shard, "k", "u", 1, 3, 3, sha) == RECORDS[1:4]
    assert catalog.check_range(shard, "k", "u", 2, 3, 3, sha) is None  # another image's
    assert catalog.check_range(shard, "k", "u", 1, 3, 2, sha) is None  # wrong count
  # copied into a new file with a record of its own: the same records, in order
  with record_files.create(str(tmp_path / "b.array_record"), Container(ARRAY_RECORD)) as copy:
    copy.copy(RECORDS[1:4])
    copy.write(b"new")
  assert list(record_files.read_records(str(tmp_path / "b.array_record"), ARRAY_RECORD)) == \
      RECORDS[1:4] + [b"new"]


def test_damaged_array_record_files_are_refused(tmp_path):
  path = tmp_path / "a.array_record"
  _write(path, Container(ARRAY_RECORD))
  data = path.read_bytes()
  for name, damaged in (("cut", data[:-1000]), ("short", data[:100]), ("empty", b"")):
    bad = tmp_path / f"{name}.array_record"
    bad.write_bytes(damaged)
    with pytest.raises(ValueError, match="not a whole ArrayRecord file"):
      list(record_files.read_records(str(bad), ARRAY_RECORD))
    with pytest.raises(ValueError):
      record_files.EarlierShard(str(bad), ARRAY_RECORD)
  # a link in the shard's place is not followed
  os.symlink(path, tmp_path / "link.array_record")
  with pytest.raises(OSError):
    record_files.EarlierShard(str(tmp_path / "link.array_record"), ARRAY_RECORD)


def test_index_checks(tmp_path):
  shard = tmp_path / "a.tfrecord"
  out, _ = _write(shard, Container(TFRECORD, index_files=True))
  index = tmp_path / "a.tfrecord.idx"
  text = record_files.index_text(out.spans)
  index.write_bytes(text)
  assert record_files.check_index(str(shard), str(index)) is None
  lines = text.decode().splitlines(keepends=True)
  for bad, why in (("".join(lines[:-1]), "4 lines for 5 records"),
                   ("".join(lines + ["999 12\n"]), "6 lines for 5 records"),
                   (lines[0] + "1 2\n" + "".join(lines[2:]), "line 2;"),
                   ("0,28\n", "not an index file"), ("", "0 lines for 5 records")):
    index.write_text(bad)
    problem = record_files.check_index(str(shard), str(index))
    assert problem is not None and why in problem, (bad, problem)
  os.remove(index)
  os.symlink(shard, index)  # a link is not read through
  assert "cannot be checked" in record_files.check_index(str(shard), str(index))
  # a shard cut inside a record
  shard.write_bytes(shard.read_bytes()[:-3])
  with pytest.raises(ValueError, match="cut short"):
    record_files.scan_spans(str(shard))
