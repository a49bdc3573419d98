"""records/tfrecord.py: the TFRecord framing the shard writer writes, and the reader that
reads it back (verify, show, inspect) without Beam or TensorFlow."""
from __future__ import annotations

import io

import pytest

from beam_tfrecord.records import tfrecord


def test_framing_is_the_tfrecord_framing_of_beam_and_tensorflow(tmp_path):
  import io

  import tensorflow as tf
  from apache_beam.io.tfrecordio import _TFRecordUtil

  from beam_tfrecord.records.tfrecord import framing
  records = [b"", b"x", bytes(range(256)) * 40]
  beam_bytes = io.BytesIO()
  for record in records:
    _TFRecordUtil.write_record(beam_bytes, record)
  path = str(tmp_path / "tf.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for record in records:
      writer.write(record)
  ours = b"".join(b"".join((framing(r)[0], r, framing(r)[1])) for r in records)
  assert ours == beam_bytes.getvalue() == open(path, "rb").read()


def test_reads_what_tensorflow_writes(tmp_path):
  import tensorflow as tf
  path = str(tmp_path / "x.tfrecord")
  records = [b"", b"a", bytes(range(256)) * 40]
  with tf.io.TFRecordWriter(path) as w:
    for r in records:
      w.write(r)
  with open(path, "rb") as f:
    got = list(iter(lambda: tfrecord.read_record(f), None))
  assert got == records
  framed = b"".join(b"".join((tfrecord.framing(r)[0], r, tfrecord.framing(r)[1]))
                    for r in records)
  assert framed == open(path, "rb").read()
  assert [r.numpy() for r in tf.data.TFRecordDataset([path])] == records


@pytest.mark.parametrize("damage, why", [(lambda b: b[:5], "Fewer than 12"),
                                         (lambda b: b[:-2], "Fewer than"),
                                         (lambda b: b[:8] + b"\0\0\0\0" + b[12:], "length mask"),
                                         (lambda b: b[:-5] + b"X" + b[-4:], "data mask")])
def test_damage_is_named(damage, why):
  head, tail = tfrecord.framing(b"hello")
  with pytest.raises(ValueError, match=why):
    tfrecord.read_record(io.BytesIO(damage(head + b"hello" + tail)))
